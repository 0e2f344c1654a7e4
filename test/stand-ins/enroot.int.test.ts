/**
 * The enroot stand-in keeps Enroot 4.1.2's interface: create/start/exec/list/export/remove with
 * their documented flags, `list --fancy`'s columns, `[ERROR]` with exit 1, and a loud refusal of
 * anything else (including a call without the four ENROOT_* paths).
 */
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { imageFolderName } from '../../providers/shared/image-folder.ts';
import { BUSYBOX_REFERENCE, makeBusyboxRoot } from '../fixtures/busybox-root.ts';
import { placeHelpers, squashInto } from '../hpc/enroot-node.ts';

const STAND_IN = new URL('./enroot.ts', import.meta.url).pathname;
let directory = '';
let image = '';
const paths = () => ({
  PATH: `${join(directory, 'helpers')}:${process.env.PATH ?? ''}`,
  ENROOT_RUNTIME_PATH: join(directory, 'runtime'),
  ENROOT_DATA_PATH: join(directory, 'data'),
  ENROOT_CACHE_PATH: join(directory, 'cache'),
  ENROOT_TEMP_PATH: join(directory, 'tmp'),
});
const enroot = (...args: string[]) => {
  const result = spawnSync(process.execPath, [STAND_IN, ...args], {
    env: { ...process.env, ...paths() },
    encoding: 'utf8',
  });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
};
const pidOf = (name: string) =>
  enroot('list', '--fancy')
    .stdout.split('\n')
    .map((line) => line.split(/\s+/))
    .find((fields) => fields[0] === name)?.[1];

beforeAll(async () => {
  directory = await mkdtemp(join(tmpdir(), 'gym-enroot-standin-'));
  await mkdir(join(directory, 'helpers'));
  await placeHelpers(join(directory, 'helpers'));
  await makeBusyboxRoot(join(directory, 'roots'));
  squashInto(directory, BUSYBOX_REFERENCE, join(directory, 'roots', imageFolderName(BUSYBOX_REFERENCE)));
  image = join(directory, `${imageFolderName(BUSYBOX_REFERENCE)}.sqsh`);
});
afterAll(async () => {
  const pid = pidOf('one');
  if (pid !== undefined && /^\d+$/.test(pid)) process.kill(Number(pid), 'SIGKILL');
  await rm(directory, { recursive: true, force: true });
});

describe('enroot stand-in', () => {
  it('creates, starts, execs into, lists, exports and removes a container', async () => {
    expect(enroot('create', '--name', 'one', image).code).toBe(0);
    expect(enroot('create', '--name', 'one', image)).toMatchObject({
      code: 1,
      stderr: expect.stringMatching(/^\[ERROR\] File already exists/),
    });
    expect(enroot('list').stdout).toBe('one\n');
    const started = spawn(
      process.execPath,
      [STAND_IN, 'start', '--root', '--rw', 'one', 'sh', '-c', 'echo $$ > /pid; exec sleep 1000'],
      {
        env: { ...process.env, ...paths() },
        stdio: 'ignore',
        detached: true,
      },
    );
    let pid: string | undefined;
    for (let attempt = 0; attempt < 50 && pid === undefined; attempt += 1) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      pid = pidOf('one');
    }
    expect(pid).toMatch(/^\d+$/);
    const header = enroot('list', '--fancy').stdout.split('\n')[0]!.split(/\s+/);
    expect(header).toEqual(['NAME', 'PID', 'COMM', 'STATE', 'STARTED', 'TIME', 'MNTNS', 'USERNS', 'COMMAND']);
    // Root in a user namespace of its own, the host's pid namespace (no --pid in 4.1.2), its writes kept.
    const inside = enroot(
      'exec',
      '--env',
      'GREETING=hi there',
      pid!,
      'sh',
      '-c',
      'id -u; echo "$GREETING" > /note; cat /pid; echo $$',
    );
    expect(inside.code).toBe(0);
    const [uid, keeper, own] = inside.stdout.trim().split('\n');
    expect(uid).toBe('0');
    expect(keeper).toBe(pid);
    expect(Number(own)).toBeGreaterThan(1);
    expect(enroot('exec', pid!, 'cat', '/note').stdout).toBe('hi there\n');
    expect(enroot('exec', pid!, 'sh', '-c', 'exit 7').code).toBe(7);
    process.kill(Number(pid), 'SIGKILL');
    await new Promise((resolve) => started.once('exit', resolve));
    expect(enroot('exec', pid!, 'true')).toMatchObject({
      code: 1,
      stderr: `[ERROR] Process not found: ${pid}\n`,
    });
    expect(enroot('export', '--output', join(directory, 'one.sqsh'), 'one').code).toBe(0);
    // Enroot's 10-shadow hook ran at start: root, nobody and the caller first, the image's own
    // lines after them (doubled on a root without shadow files), and `export` kept it.
    const passwd = readFileSync(join(directory, 'data', 'one', 'etc', 'passwd'), 'utf8').split('\n');
    expect(passwd.slice(0, 2)).toEqual([
      'root:x:0:0:root:/root:/bin/sh',
      'nobody:x:65534:65534:nobody:/:/sbin/nologin',
    ]);
    expect(passwd.filter((line) => line.startsWith('root:'))).toHaveLength(3);
    expect(enroot('remove', '--force', 'one').code).toBe(0);
    expect(enroot('list').stdout).toBe('');
    expect(enroot('create', '--name', 'again', join(directory, 'one.sqsh')).code).toBe(0);
    expect(enroot('exec', '1', 'true').code).toBe(1);
  });

  it('cannot exec into a container whose process mounted a /proc of its own pid namespace', async () => {
    // As under the real enroot: enroot-nsenter reads its environment through /proc/self after
    // joining the mount namespace, and the caller is not in that /proc's pid namespace.
    expect(enroot('create', '--name', 'private', image).code).toBe(0);
    const started = spawn(
      process.execPath,
      [
        STAND_IN,
        'start',
        '--root',
        '--rw',
        'private',
        'unshare',
        '-m',
        '-p',
        '-f',
        '--mount-proc',
        'sleep',
        '1000',
      ],
      { env: { ...process.env, ...paths() }, stdio: 'ignore', detached: true },
    );
    let pid: string | undefined;
    // The listed process is the one that unshared; its child mounted the new /proc before it became sleep.
    const sleeping = (listed: string) =>
      spawnSync('sh', ['-c', `read -r c rest < /proc/${listed}/task/${listed}/children; cat /proc/$c/comm`], {
        encoding: 'utf8',
      }).stdout === 'sleep\n';
    for (let attempt = 0; attempt < 50; attempt += 1) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      pid = pidOf('private');
      if (pid !== undefined && /^\d+$/.test(pid) && sleeping(pid)) break;
    }
    try {
      expect(pid).toMatch(/^\d+$/);
      // Seen from another data path (another daemon's, another user's), it is a foreign container.
      const elsewhere = spawnSync(process.execPath, [STAND_IN, 'list', '--fancy'], {
        env: { ...process.env, ...paths(), ENROOT_DATA_PATH: join(directory, 'other-data') },
        encoding: 'utf8',
      });
      // (Other tests' containers may be listed there too.)
      const unknown: string[] = [];
      let group = '';
      for (const line of elsewhere.stdout.split('\n').slice(1)) {
        if (!line.startsWith(' ')) group = line.split(/\s+/)[0] ?? '';
        if (group === '<unknown>') unknown.push(line.trim().split(/\s+/)[line.startsWith(' ') ? 0 : 1] ?? '');
      }
      expect(unknown).toContain(pid);
      expect(enroot('exec', pid!, 'true')).toMatchObject({
        code: 1,
        stderr: 'enroot-nsenter: failed to load environment: /proc/self/fd/11: No such file or directory\n',
      });
    } finally {
      if (pid !== undefined && /^\d+$/.test(pid)) process.kill(Number(pid), 'SIGKILL');
      await new Promise((resolve) => started.once('exit', resolve));
      enroot('remove', '--force', 'private');
    }
  });

  it('refuses what it does not reproduce, loudly', () => {
    for (const args of [
      ['start', '--conf', 'x.sh', 'again'],
      ['start', '--rc', '/dev/null', 'again'],
      ['start', '--net', 'again'],
      ['start', '--mount', 'tmpfs:/mnt:tmpfs:rw', 'again'],
      ['start', image],
      ['create', '--bogus', image],
      ['remove', 'again'],
      ['import', 'dockerd://busybox'],
      ['create', '--name', 'bad/name', image],
    ]) {
      const result = enroot(...args);
      expect(result.code, args.join(' ')).toBe(1);
      expect(result.stderr).toMatch(/^\[ERROR\] /);
    }
    // Enroot runs its helpers by name: without them on PATH, start and exec fail as its bash does.
    for (const args of [
      ['start', '--root', 'again', 'true'],
      ['exec', String(process.pid), 'true'],
    ]) {
      const withoutHelpers = spawnSync(process.execPath, [STAND_IN, ...args], {
        env: { ...process.env, ...paths(), PATH: process.env.PATH ?? '' },
        encoding: 'utf8',
      });
      expect(withoutHelpers.status, args.join(' ')).toBe(127);
      expect(withoutHelpers.stderr).toContain('enroot-nsenter: not found');
    }
    const withoutPaths = spawnSync(process.execPath, [STAND_IN, 'list'], {
      env: { ...process.env, ...paths(), ENROOT_TEMP_PATH: '' },
      encoding: 'utf8',
    });
    expect(withoutPaths.status).toBe(1);
    expect(withoutPaths.stderr).toContain('ENROOT_TEMP_PATH must be set');
  });
});
