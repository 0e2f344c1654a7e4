/**
 * `gym sandbox cp ID:/dir ./here` unpacking what a sandbox sent: each archive is made here as a
 * hostile `tar` (a Pod's own, which the agent can replace) would write it, and each case checks
 * what the attacker wants, a file or a link outside the folder, not only the error.
 */
import {
  lstat,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  readlink,
  realpath,
  rm,
  stat,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { GymError } from '../../../core/errors.ts';
import { type ContractEntry, entriesToTar } from '../../../providers/contract/tar-helpers.ts';
import { DEFAULT_MAX_DOWNLOAD_BYTES, unpackDownload } from './unpack.ts';

const file = (name: string, text = 'x'): ContractEntry => ({
  name,
  type: 'file',
  content: Buffer.from(text),
});
const dir = (name: string): ContractEntry => ({ name, type: 'directory' });
const link = (name: string, linkname: string): ContractEntry => ({ name, type: 'symlink', linkname });
const hard = (name: string, linkname: string): ContractEntry => ({ name, type: 'link', linkname });

/** Links whose resolution passes PATH_MAX, then a link through them and a file through that (the CVE-2025-4517 technique). */
function pathMaxChain(escapeTo: string): ContractEntry[] {
  const long = 'd'.repeat(247);
  const steps = 'abcdefghijklmnop'.split('');
  const entries: ContractEntry[] = [];
  let path = '';
  for (const step of steps) {
    entries.push(dir(`${path}${long}`), link(`${path}${step}`, long));
    path = `${path}${long}/`;
  }
  const deep = `${steps.join('/')}/${'l'.repeat(254)}`;
  entries.push(link(deep, '../'.repeat(steps.length)));
  entries.push(link('escape', `${deep}/${escapeTo}`));
  entries.push(file('escape/authorized_keys', 'ssh-ed25519 AAAA attacker\n'));
  return entries;
}

let base: string;
let target: string;
let outside: string;

beforeEach(async () => {
  base = await realpath(await mkdtemp(join(tmpdir(), 'gym-unpack-')));
  target = join(base, 'home/user/results');
  outside = join(base, 'home/user/outside');
  await mkdir(outside, { recursive: true });
  await writeFile(join(outside, 'secret'), 'host secret\n');
});

afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

async function walk(root: string): Promise<string[]> {
  const found: string[] = [];
  for (const entry of await readdir(root, { withFileTypes: true, recursive: true }))
    found.push(join(entry.parentPath, entry.name));
  return found;
}

async function expectNothingEscaped(): Promise<void> {
  expect(await readdir(outside)).toEqual(['secret']);
  expect(await readFile(join(outside, 'secret'), 'utf8')).toBe('host secret\n');
  expect((await stat(join(outside, 'secret'))).nlink).toBe(1);
  const stray = (await walk(base)).filter(
    (path) => !path.startsWith(`${target}/`) && path !== target && !path.startsWith(outside),
  );
  expect(stray.map((path) => relative(base, path)).sort()).toEqual(['home', 'home/user']);
  for (const path of (await walk(target).catch(() => [])).filter(Boolean)) {
    if (!(await lstat(path)).isSymbolicLink()) continue;
    const resolved = await realpath(path).catch(() => null);
    if (resolved !== null)
      expect(resolved.startsWith(target), `${path} -> ${await readlink(path)}`).toBe(true);
  }
}

async function refusal(entries: ContractEntry[]): Promise<GymError> {
  const error = await unpackDownload(entriesToTar(entries), target).then(
    () => null,
    (caught: unknown) => caught,
  );
  return error as GymError;
}

const ATTACKS: Record<string, () => ContractEntry[]> = {
  'an absolute name': () => [file(`${outside}/planted`)],
  'a dot-dot name': () => [file('../outside/planted')],
  'a dot-dot deep in the name': () => [dir('a'), file('a/./../../outside/planted')],
  'a link to an absolute path, then a file through it': () => [link('keys', outside), file('keys/planted')],
  'a link to an absolute path alone': () => [link('keys', outside)],
  'a link climbing out': () => [link('up', '../outside')],
  'a link to ".", then a climbing link through it': () => [link('here', '.'), link('here/up', '../outside')],
  'a file through a link made earlier': () => [link('up', '../outside'), file('up/planted')],
  'a chain of links each inside on its own': () => [
    dir('p/q'),
    link('p/q/top', '../..'),
    link('out', 'p/q/top/../outside'),
  ],
  'a link re-pointed by a later one': () => [dir('x'), link('a', 'y/../../outside'), link('y', 'x/..')],
  'a hard link to a file outside': () => [hard('stolen', '../outside/secret')],
  'a hard link to an absolute path': () => [hard('stolen', `${outside}/secret`)],
  'a hard link through a link': () => [link('up', '../outside'), hard('stolen', 'up/secret')],
  'a device': () => [{ name: 'null', type: 'character-device' }],
  'the PATH_MAX link chain': () => pathMaxChain('../outside'),
  'the PATH_MAX link chain, climbing to an absolute path': () =>
    pathMaxChain(`../../../../../../../..${outside}`),
};

describe('unpacking a download from a sandbox', () => {
  it.each(Object.keys(ATTACKS))('never writes or links outside its folder: %s', async (attack) => {
    const error = await refusal(ATTACKS[attack]!());
    expect(error?.code).toBe('ARCHIVE_UNSAFE');
    await expectNothingEscaped();
  });

  it('writes nothing through a link an earlier copy left in the folder', async () => {
    await mkdir(target, { recursive: true });
    await symlink(outside, join(target, 'keys'));
    expect((await refusal([dir('keys'), file('keys/planted')]))?.code).toBe('ARCHIVE_UNSAFE');
    expect((await refusal([file('keys/planted')]))?.code).toBe('ARCHIVE_UNSAFE');
    await rm(join(target, 'keys'));
    await mkdir(join(target, 'p'));
    await symlink('..', join(target, 'p/top'));
    expect((await refusal([link('out', 'p/top/../outside')]))?.code).toBe('ARCHIVE_UNSAFE');
    await rm(join(target, 'p/top'));
    await expectNothingEscaped();
  });

  it('replaces a link in the folder with the file, not the file it points to', async () => {
    await mkdir(target, { recursive: true });
    await symlink(join(outside, 'secret'), join(target, 'report.json'));
    await unpackDownload(entriesToTar([file('report.json', '{}')]), target);
    expect(await readFile(join(outside, 'secret'), 'utf8')).toBe('host secret\n');
    expect((await lstat(join(target, 'report.json'))).isFile()).toBe(true);
  });

  it('unpacks an ordinary tree with links inside it whole', async () => {
    await unpackDownload(
      entriesToTar([
        dir('src'),
        file('src/main.py', "print('hi')\n"),
        dir('node_modules/.bin'),
        dir('node_modules/tool/bin'),
        file('node_modules/tool/bin/run.js', 'run\n'),
        link('node_modules/.bin/run', '../tool/bin/run.js'),
        link('latest', 'src'),
        link('dangling', 'not-yet/there'),
        hard('src/same.py', 'src/main.py'),
        { name: 'tool.sh', type: 'file', content: Buffer.from('#!'), mode: 0o4755 },
        { name: 'locked', type: 'directory', mode: 0o555 },
      ]),
      target,
    );
    expect(await readFile(join(target, 'node_modules/.bin/run'), 'utf8')).toBe('run\n');
    expect(await readFile(join(target, 'latest/main.py'), 'utf8')).toBe("print('hi')\n");
    expect(await readlink(join(target, 'dangling'))).toBe('not-yet/there');
    expect((await stat(join(target, 'src/same.py'))).ino).toBe((await stat(join(target, 'src/main.py'))).ino);
    expect((await stat(join(target, 'tool.sh'))).mode & 0o7777).toBe(0o755);
    expect((await stat(join(target, 'locked'))).mode & 0o777).toBe(0o555);
  });

  it("bounds the archive's files in all", async () => {
    const big = await unpackDownload(entriesToTar([file('big', 'x'.repeat(4096))]), join(base, 'one'), {
      maxBytes: 1000,
    }).then(
      () => null,
      (caught: unknown) => caught as GymError,
    );
    expect(big?.code).toBe('FILE_TOO_LARGE');
    await expect(stat(join(base, 'one/big'))).rejects.toThrow(); // refused from its header
    const many = Array.from({ length: 10 }, (_, index) => file(`part-${index}`, 'y'.repeat(300)));
    const error = await unpackDownload(entriesToTar(many), join(base, 'many'), { maxBytes: 1000 }).then(
      () => null,
      (caught: unknown) => caught as GymError,
    );
    expect(error?.code).toBe('FILE_TOO_LARGE');
    let written = 0;
    for (const name of await readdir(join(base, 'many')))
      written += (await stat(join(base, 'many', name))).size;
    expect(written).toBeLessThanOrEqual(1000);
    await unpackDownload(entriesToTar(many), join(base, 'raised'), { maxBytes: 3000 });
    expect(await readdir(join(base, 'raised'))).toHaveLength(10);
    expect(DEFAULT_MAX_DOWNLOAD_BYTES).toBe(1024 * 1024 * 1024);
  });
});
