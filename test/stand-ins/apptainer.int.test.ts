/**
 * The apptainer stand-in keeps Apptainer's interface: documented flags, `instance list --json`'s
 * shape, `FATAL:` with exit 255 for its own errors, and a loud refusal of anything else.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cp, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeBusyboxRoot } from '../fixtures/busybox-root.ts';

const STAND_IN = new URL('./apptainer.ts', import.meta.url).pathname;
let directory = '';
let image = '';
let plain = '';
const apptainer = (...args: string[]) => {
  const result = spawnSync(process.execPath, [STAND_IN, ...args], {
    env: { ...process.env, APPTAINER_CONFIGDIR: join(directory, 'config') },
    encoding: 'utf8',
  });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
};

beforeAll(async () => {
  directory = await mkdtemp(join(tmpdir(), 'gym-apptainer-standin-'));
  await makeBusyboxRoot(join(directory, 'images'));
  image = join(directory, 'images', 'local_busybox_rootfs');
  // What `apptainer build` puts in an image and an instance needs: a start action and a
  // startscript that keeps running (the plain root filesystem is refused, below).
  plain = join(directory, 'images', 'plain');
  await cp(image, plain, { recursive: true, verbatimSymlinks: true });
  await mkdir(join(image, '.singularity.d', 'actions'), { recursive: true });
  await writeFile(
    join(image, '.singularity.d', 'actions', 'start'),
    '#!/bin/sh\nkill -CONT 1\nexec /.singularity.d/startscript\n',
    { mode: 0o755 },
  );
  await writeFile(
    join(image, '.singularity.d', 'startscript'),
    '#!/bin/sh\nwhile :; do sleep 86400; done\n',
    { mode: 0o755 },
  );
});
afterAll(async () => {
  apptainer('instance', 'stop', '--force', 'one');
  await rm(directory, { recursive: true, force: true });
});

describe('apptainer stand-in', () => {
  it('starts an instance, runs commands in it with state kept between them, lists and stops it', () => {
    expect(
      apptainer(
        'instance',
        'start',
        '--containall',
        '--cleanenv',
        '--writable-tmpfs',
        '--net',
        '--network',
        'none',
        image,
        'one',
      ).code,
    ).toBe(0);
    expect(apptainer('instance', 'start', '--containall', '--writable-tmpfs', image, 'one')).toMatchObject({
      code: 255,
    });
    const listed = JSON.parse(apptainer('instance', 'list', '--json').stdout) as {
      instances: Array<Record<string, unknown>>;
    };
    expect(listed.instances).toEqual([
      expect.objectContaining({ instance: 'one', img: image, pid: expect.any(Number) }),
    ]);
    const first = apptainer(
      'exec',
      '--cleanenv',
      '--pwd',
      '/tmp',
      '--env',
      'GREETING=hi there',
      'instance://one',
      '/bin/sh',
      '-c',
      'echo "$GREETING" > note; pwd; ls /sys/class/net 2>/dev/null; echo $$',
    );
    expect(first.code, first.stderr).toBe(0);
    // A pid namespace of its own (the shell is not pid 1: the keeper is).
    expect(first.stdout).toMatch(/^\/tmp\n(lo\n)?\d+\n$/);
    expect(apptainer('exec', 'instance://one', 'cat', '/tmp/note')).toMatchObject({
      code: 0,
      stdout: 'hi there\n',
    });
    expect(apptainer('exec', 'instance://one', '/bin/sh', '-c', 'exit 7').code).toBe(7);
    expect(apptainer('instance', 'stop', 'one').code).toBe(0);
    expect(JSON.parse(apptainer('instance', 'list', '--json').stdout)).toEqual({ instances: [] });
    expect(apptainer('exec', 'instance://one', 'true')).toMatchObject({
      code: 255,
      stderr: expect.stringContaining('no instance found'),
    });
  });

  it("gives root every capability unless --no-privs, and --security's uid and gid none", () => {
    expect(
      apptainer('instance', 'start', '--no-privs', '--containall', '--writable-tmpfs', image, 'privs').code,
    ).toBe(0);
    try {
      // The instance's own first process has none either.
      const keeper = (
        JSON.parse(apptainer('instance', 'list', '--json').stdout) as {
          instances: Array<{ instance: string; pid: number }>;
        }
      ).instances.find((entry) => entry.instance === 'privs')!.pid;
      expect(readFileSync(`/proc/${keeper}/status`, 'utf8')).toMatch(/\nCapEff:\t0{16}\n/);
      const status = (...flags: string[]) =>
        apptainer(
          'exec',
          ...flags,
          'instance://privs',
          '/bin/sh',
          '-c',
          'id -u; grep -E "^(CapEff|NoNewPrivs):" /proc/self/status',
        );
      // An exec decides its own privileges, whatever the instance was started with.
      expect(status()).toMatchObject({
        code: 0,
        stdout: expect.stringMatching(/^0\nCapEff:\t0*[1-9a-f][0-9a-f]*\nNoNewPrivs:\t0\n$/),
      });
      expect(status('--no-privs')).toMatchObject({
        code: 0,
        stdout: '0\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\n',
      });
      expect(status('--security', 'uid:1000,gid:1001')).toMatchObject({
        code: 0,
        stdout: '1000\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\n',
      });
      for (const flags of [
        ['--security', 'seccomp:/x.json'],
        ['--security', 'uid:1000'],
        ['--keep-privs'],
        ['--drop-caps', 'CAP_SYS_ADMIN'],
      ])
        expect(apptainer('exec', ...flags, 'instance://privs', 'true'), flags.join(' ')).toMatchObject({
          code: 255,
          stderr: expect.stringMatching(/^FATAL: /),
        });
    } finally {
      apptainer('instance', 'stop', '--force', 'privs');
    }
  });

  it('refuses an instance of a root filesystem that has no start action or no startscript, as Apptainer 1.4 does', () => {
    const start = (root: string, ...binds: string[]) =>
      apptainer('instance', 'start', '--containall', '--writable-tmpfs', ...binds, root, 'three');
    expect(start(plain)).toMatchObject({
      code: 255,
      stderr: expect.stringContaining('exec /.singularity.d/actions/start failed'),
    });
    const action = join(image, '.singularity.d', 'actions', 'start');
    expect(start(plain, '--bind', `${action}:/.singularity.d/actions/start:ro`)).toMatchObject({
      code: 255,
      stderr: expect.stringContaining('failed to start instance'),
    });
    const script = join(image, '.singularity.d', 'startscript');
    const bound = start(
      plain,
      '--bind',
      `${action}:/.singularity.d/actions/start:ro`,
      '--bind',
      `${script}:/.singularity.d/startscript:ro`,
    );
    expect(bound.code, bound.stderr).toBe(0);
    expect(apptainer('instance', 'stop', 'three').code).toBe(0);
  });

  it('refuses what it does not reproduce, loudly', () => {
    for (const args of [
      ['exec', '--bogus', 'instance://one', 'true'],
      ['instance', 'start', '--containall', '--writable-tmpfs', '--fakeroot', image, 'two'],
      ['instance', 'start', '--containall', '--writable-tmpfs', '--net', image, 'two'],
      ['instance', 'start', '--containall', '--writable-tmpfs', join(directory, 'image.sif'), 'two'],
      ['instance', 'start', '--containall', '--writable-tmpfs', image, 'bad/name'],
      ['build', 'out.sif', 'docker-daemon:x:y'],
    ]) {
      const result = apptainer(...args);
      expect(result.code, args.join(' ')).toBe(255);
      expect(result.stderr).toMatch(/^FATAL: /);
    }
  });
});
