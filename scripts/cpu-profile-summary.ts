/**
 * Where a `.cpuprofile` (node --cpu-prof, e.g. from `bench:scale --profile DIR`) spent its time:
 * self time by function and by file, largest first.
 *
 *   node scripts/cpu-profile-summary.ts FILE.cpuprofile [TOP]
 */
import { readFile } from 'node:fs/promises';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const [path, topArgument] = process.argv.slice(2);
if (path === undefined) {
  console.error('usage: node scripts/cpu-profile-summary.ts FILE.cpuprofile [TOP]');
  process.exit(2);
}
const top = Number(topArgument ?? 25);
const profile = JSON.parse(await readFile(path, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((node) => [node.id, node]));
const byFunction = new Map<string, number>();
const byFile = new Map<string, number>();
let total = 0;
for (const [index, id] of profile.samples.entries()) {
  const micros = profile.timeDeltas[index] ?? 0;
  total += micros;
  const frame = byId.get(id)!.callFrame;
  const file =
    frame.url.replace(/^file:\/\//, '').replace(/^.*\/node_modules\//, 'node_modules/') || '(native)';
  const name = `${frame.functionName || '(anonymous)'} ${file}:${frame.lineNumber + 1}`;
  byFunction.set(name, (byFunction.get(name) ?? 0) + micros);
  const group = file.startsWith('node_modules/')
    ? file
        .split('/')
        .slice(0, file.startsWith('node_modules/@') ? 3 : 2)
        .join('/')
    : file;
  byFile.set(group, (byFile.get(group) ?? 0) + micros);
}
const print = (title: string, map: Map<string, number>) => {
  console.log(`${title} (of ${(total / 1e6).toFixed(2)} s sampled)`);
  for (const [key, micros] of [...map].sort((a, b) => b[1] - a[1]).slice(0, top))
    console.log(
      `${((micros / total) * 100).toFixed(1).padStart(6)}%  ${(micros / 1e6).toFixed(2).padStart(7)} s  ${key}`,
    );
};
print('self time by file or package', byFile);
print('self time by function', byFunction);
