/**
 * `npm run build`'s second step: tsc emits only JavaScript, but the code reads files beside it at
 * run time (the viewer's and /ui's pages, the built-in environments' data, tasks and Dockerfiles,
 * the helpers' C sources). This copies every file of the built folders that is not TypeScript
 * into dist/ at the same path, so an installed package (which ships dist/) finds them.
 */
import { copyFile, mkdir, readdir } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
/** The folders tsconfig.build.json compiles. */
export const BUILT_FOLDERS = [
  'core',
  'providers',
  'daemon',
  'harnesses',
  'environments',
  'images',
  'client',
  'cli',
];

/** Every non-TypeScript file under the folders, relative to `root`. */
export async function runtimeAssets(
  root: string,
  folders: readonly string[] = BUILT_FOLDERS,
): Promise<string[]> {
  const found: string[] = [];
  const walk = async (directory: string): Promise<void> => {
    for (const entry of await readdir(directory, { withFileTypes: true })) {
      const path = join(directory, entry.name);
      if (entry.isDirectory()) await walk(path);
      else if (entry.isFile() && !entry.name.endsWith('.ts')) found.push(relative(root, path));
    }
  };
  for (const folder of folders) await walk(join(root, folder));
  return found.sort();
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const assets = await runtimeAssets(ROOT);
  for (const asset of assets) {
    const target = join(ROOT, 'dist', asset);
    await mkdir(dirname(target), { recursive: true });
    await copyFile(join(ROOT, asset), target);
  }
  console.log(`copied ${assets.length} runtime files into dist/`);
}
