/** The gym CLI as a user runs it: a separate process talking to a running daemon. */
import { spawn } from 'node:child_process';
import { lstat, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../client/client.ts';
import { startTestDaemon, type TestDaemon } from '../test/daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../test/docker-available.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';
const cliEntry = new URL('./main.ts', import.meta.url).pathname;

interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

function gym(args: string[], env: Record<string, string> = {}, input?: string): Promise<CliResult> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [cliEntry, ...args], {
      env: { ...process.env, GYM_LOG_LEVEL: 'warn', ...env },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    child.stdin.end(input ?? '');
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('gym CLI without a daemon', () => {
  it('explains unknown commands and missing flags', async () => {
    const unknown = await gym(['sandbox', 'frobnicate']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("unknown command 'frobnicate'");
    expect(unknown.stderr).toContain('gym sandbox --help');
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-cli-none-'));
    const noDaemon = await gym(['sandbox', 'ls'], { GYM_STATE_DIR: stateDir });
    expect(noDaemon.code).toBe(1);
    expect(noDaemon.stderr).toContain('DAEMON_UNAVAILABLE');
    expect(noDaemon.stderr).toContain('gym daemon start');
    const help = await gym(['--help']);
    expect(help.code).toBe(0);
    for (const command of ['daemon start', 'sandbox exec', 'sandbox cp', 'image build', 'doctor'])
      expect(help.stdout).toContain(command);
    await rm(stateDir, { recursive: true, force: true });
  });
});

describe.skipIf(skipReason !== undefined)('gym CLI against a running daemon', () => {
  let daemon: TestDaemon;
  let env: Record<string, string>;
  let sandboxId = '';

  beforeAll(async () => {
    daemon = await startTestDaemon(
      { namespace: `cli-${Math.random().toString(36).slice(2, 8)}` },
      { listen: true },
    );
    env = { GYM_STATE_DIR: daemon.stateDir };
  });
  afterAll(async () => {
    await daemon.stop({ destroy: true });
    await rm(daemon.stateDir, { recursive: true, force: true });
  });

  it('creates a sandbox and prints its id; refuses a bad flag with a clear message', async () => {
    const created = await gym(
      ['sandbox', 'create', '--image', busybox, '--memory', '256', '--label', 'who=cli', '--ttl', '600'],
      env,
    );
    expect(created.stderr).toBe('');
    expect(created.code).toBe(0);
    sandboxId = created.stdout.trim();
    expect(sandboxId).toMatch(/^sbx-[a-z0-9]+$/);
    const bad = await gym(['sandbox', 'create', '--image', busybox, '--memory=-4'], env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("option '--memory <MIB>' argument '-4' is invalid. It must be at least 1.");
    // What only the daemon knows is checked there: a failure (1), naming the field.
    const tooLong = await gym(['sandbox', 'create', '--image', busybox, '--ttl', '999999999'], env);
    expect(tooLong.code).toBe(1);
    expect(tooLong.stderr).toContain('ttlSeconds');
    const noImage = await gym(['sandbox', 'create'], env);
    expect(noImage.code).toBe(2);
    expect(noImage.stderr).toContain('--image or --pool is required');
  });

  it('passes the command exit code through, streams output, and says 124 on timeout', async () => {
    const result = await gym(
      ['sandbox', 'exec', sandboxId, '--', 'sh', '-c', 'echo out; echo err >&2; exit 3'],
      env,
    );
    expect(result).toEqual({ code: 3, stdout: 'out\n', stderr: 'err\n' });
    const session = await gym(
      [
        'sandbox',
        'exec',
        sandboxId,
        '--session',
        'main',
        '--env',
        'NAME=world',
        '--',
        'sh',
        '-c',
        'echo hello $NAME',
      ],
      env,
    );
    expect(session).toMatchObject({ code: 0, stdout: 'hello world\n' });
    // After --, options are the command's: --help reaches sh's script, not gym.
    const passed = await gym(
      ['sandbox', 'exec', sandboxId, '--', 'sh', '-c', 'echo "$@"', 'sh', '--help', '-x'],
      env,
    );
    expect(passed).toEqual({ code: 0, stdout: '--help -x\n', stderr: '' });
    const timeout = await gym(['sandbox', 'exec', sandboxId, '--timeout', '300', '--', 'sleep', '30'], env);
    expect(timeout.code).toBe(124);
    expect(timeout.stderr).toContain('timed out');
  });

  it('copies a directory in and out, and a single file back', async () => {
    const local = await mkdtemp(join(tmpdir(), 'gym-cli-cp-'));
    await mkdir(join(local, 'src/nested'), { recursive: true });
    await writeFile(join(local, 'src/nested/data.txt'), 'payload\n');
    await writeFile(join(local, 'src/run.sh'), '#!/bin/sh\necho ran\n', { mode: 0o755 });
    expect((await gym(['sandbox', 'cp', join(local, 'src'), `${sandboxId}:/work/src`], env)).code).toBe(0);
    expect((await gym(['sandbox', 'exec', sandboxId, '--', '/work/src/run.sh'], env)).stdout).toBe('ran\n');
    expect((await gym(['sandbox', 'cp', `${sandboxId}:/work/src`, join(local, 'back')], env)).code).toBe(0);
    expect(await readFile(join(local, 'back/nested/data.txt'), 'utf8')).toBe('payload\n');
    expect(
      (await gym(['sandbox', 'cp', `${sandboxId}:/work/src/nested/data.txt`, join(local, 'one.txt')], env))
        .code,
    ).toBe(0);
    expect(await readFile(join(local, 'one.txt'), 'utf8')).toBe('payload\n');
    const both = await gym(['sandbox', 'cp', join(local, 'src'), join(local, 'x')], env);
    expect(both.stderr).toContain('exactly one of SRC and DST');
    await rm(local, { recursive: true, force: true });
  });

  it('copies out of a sandbox only up to --max-mib, and no link that leads out of the target', async () => {
    const local = await mkdtemp(join(tmpdir(), 'gym-cli-cp-out-'));
    // 300 MiB to the sandbox's `ls`, no block of its disk; written here, every byte.
    const made = await gym(
      ['sandbox', 'exec', sandboxId, '--', 'sh', '-c', 'mkdir -p /out && truncate -s 300M /out/report.json'],
      env,
    );
    expect(made.code).toBe(0);
    const file = await gym(
      ['sandbox', 'cp', '--max-mib', '2', `${sandboxId}:/out/report.json`, join(local, 'r.json')],
      env,
    );
    expect(file.code).toBe(1);
    expect(file.stderr).toContain('FILE_TOO_LARGE');
    await expect(stat(join(local, 'r.json'))).rejects.toThrow();
    const tree = await gym(['sandbox', 'cp', '--max-mib', '2', `${sandboxId}:/out`, join(local, 'out')], env);
    expect(tree.code).toBe(1);
    expect(tree.stderr).toContain('FILE_TOO_LARGE');
    expect((await stat(join(local, 'out/report.json')).catch(() => ({ size: 0 }))).size).toBeLessThanOrEqual(
      2 * 1024 * 1024,
    );
    // The caller raises the bound for what it expects to be large.
    await gym(['sandbox', 'exec', sandboxId, '--', 'truncate', '-s', '3M', '/out/report.json'], env);
    const raised = await gym(
      ['sandbox', 'cp', '--max-mib', '4', `${sandboxId}:/out/report.json`, join(local, 'r.json')],
      env,
    );
    expect(raised.code).toBe(0);
    expect((await stat(join(local, 'r.json'))).size).toBe(3 * 1024 * 1024);
    await rm(join(local, 'r.json'));
    // The agent's links: one to this host's absolute path, one climbing out of the target.
    await mkdir(join(local, 'outside'));
    const linked = await gym(
      [
        'sandbox',
        'exec',
        sandboxId,
        '--',
        'sh',
        '-c',
        `mkdir -p /links && cd /links && echo x > f && ln -s ${local}/outside keys && ln -s ../outside up`,
      ],
      env,
    );
    expect(linked.code).toBe(0);
    const links = await gym(['sandbox', 'cp', `${sandboxId}:/links`, join(local, 'links')], env);
    expect(links.code).toBe(1);
    expect(links.stderr).toContain('ARCHIVE_UNSAFE');
    for (const name of ['keys', 'up']) await expect(lstat(join(local, 'links', name))).rejects.toThrow();
    // Then the agent makes `keys` a directory: nothing may go through a link an earlier copy left.
    await symlink(join(local, 'outside'), join(local, 'links', 'keys'));
    await gym(
      [
        'sandbox',
        'exec',
        sandboxId,
        '--',
        'sh',
        '-c',
        'cd /links && rm keys up && mkdir keys && echo k > keys/authorized_keys',
      ],
      env,
    );
    const again = await gym(['sandbox', 'cp', `${sandboxId}:/links`, join(local, 'links')], env);
    expect(again.stderr).toContain('ARCHIVE_UNSAFE');
    expect(await readdir(join(local, 'outside'))).toEqual([]);
    await rm(local, { recursive: true, force: true });
  });

  it("builds an environment's task images by the set's name, and names what exists for an unknown one", async () => {
    const built = await gym(['image', 'build', 'swe-mini', '--json'], env);
    expect(built.code).toBe(0);
    const lines = built.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { name: string; reference: string });
    expect(lines).toHaveLength(12);
    expect(
      lines.every((line) => line.name === 'swe-mini' && line.reference.startsWith('gym/swe-mini-')),
    ).toBe(true);
    const unknown = await gym(['image', 'build', 'nope'], env);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('available: busybox, debian-base, swe-mini');
  }, 600_000);

  it('runs a line shell through a session, remembering cd', async () => {
    const result = await gym(['sandbox', 'shell', sandboxId], env, 'cd /work/src\nls\nexit\n');
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('run.sh');
  });

  it('lists as a table and as JSON, reports status and doctor, then removes', async () => {
    const table = await gym(['sandbox', 'ls'], env);
    expect(table.stdout).toMatch(new RegExp(`${sandboxId}\\s+docker\\s+ready`));
    const listed = JSON.parse(
      (await gym(['sandbox', 'ls', '--json', '--label', 'who=cli'], env)).stdout,
    ) as Array<{ id: string }>;
    expect(listed.map((sandbox) => sandbox.id)).toEqual([sandboxId]);
    const status = await gym(['daemon', 'status'], env);
    expect(status.code).toBe(0);
    expect(status.stdout).toContain('provider docker: ok');
    const doctor = await gym(['doctor', '--json'], env);
    const checks = JSON.parse(doctor.stdout) as Array<{ name: string; ok: boolean }>;
    expect(checks.find((check) => check.name === 'daemon')?.ok).toBe(true);
    expect(checks.find((check) => check.name === 'provider docker')?.ok).toBe(true);
    expect(checks.find((check) => check.name === 'image busybox')?.ok).toBe(true);
    expect((await gym(['sandbox', 'rm', sandboxId], env)).stdout.trim()).toBe(sandboxId);
    const after = await gym(['sandbox', 'exec', sandboxId, '--', 'true'], env);
    expect(after.code).toBe(1);
    expect(after.stderr).toContain('SANDBOX_NOT_FOUND');
  });
});

describe.skipIf(skipReason !== undefined)('gym image, through the daemon', () => {
  it('builds and lists on the running daemon provider, and on an in-process one when none runs', async () => {
    const daemon = await startTestDaemon(
      { namespace: `cli-img-${Math.random().toString(36).slice(2, 8)}` },
      { listen: true },
    );
    const lonely = await mkdtemp(join(tmpdir(), 'gym-cli-img-'));
    try {
      const env = { GYM_STATE_DIR: daemon.stateDir };
      const built = await gym(['image', 'build', 'busybox', '--json'], env);
      expect(built.code, built.stderr).toBe(0);
      expect(JSON.parse(built.stdout)).toMatchObject({ name: 'busybox', reference: busybox, built: false });
      const listed = await gym(['image', 'ls', '--json'], env);
      expect(listed.code, listed.stderr).toBe(0);
      expect(JSON.parse(listed.stdout)).toEqual(
        expect.arrayContaining([expect.objectContaining({ reference: busybox, definition: 'busybox' })]),
      );
      // No daemon for this state directory: the command starts one in-process and stops it.
      const alone = await gym(['image', 'ls', '--json'], { GYM_STATE_DIR: lonely });
      expect(alone.code, alone.stderr).toBe(0);
      expect(JSON.parse(alone.stdout).map((image: { reference: string }) => image.reference)).toContain(
        busybox,
      );
      const unknown = await gym(['image', 'build', 'no-such-image'], env);
      expect(unknown.code).toBe(1);
      expect(unknown.stderr).toContain('no image definition or set named "no-such-image"');
    } finally {
      await daemon.stop({ destroy: true });
      await rm(lonely, { recursive: true, force: true });
    }
  }, 60_000);
});

describe.skipIf(skipReason !== undefined)('daemon on a unix socket', () => {
  it('serves the API on the socket, found by the CLI through the state directory', async () => {
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-socket-'));
    const socket = join(stateDir, 'gym.sock');
    const daemon = await startTestDaemon(
      { stateDir, namespace: 'socket-test', listen: { socket } },
      { listen: true },
    );
    try {
      expect(daemon.address).toEqual({ socket });
      const client = new GymClient({ socket, token: daemon.token });
      expect((await client.health()).ok).toBe(true);
      const status = await gym(['daemon', 'status', '--json'], { GYM_STATE_DIR: stateDir });
      expect(JSON.parse(status.stdout)).toMatchObject({ socket, sandboxes: 0 });
    } finally {
      await daemon.stop();
      await rm(stateDir, { recursive: true, force: true });
    }
  });
});
