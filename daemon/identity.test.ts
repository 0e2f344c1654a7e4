import { type ChildProcess, spawn } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { runCli } from '../cli/program.ts';
import {
  DAEMON_INFO_FILE,
  ensureStateDir,
  isProcessAlive,
  LOCK_FILE,
  lockStateDir,
  processStartTicks,
  tokenMatches,
  writeDaemonInfo,
} from './identity.ts';

const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function stateDirectory(): Promise<string> {
  const path = await mkdtemp(join(tmpdir(), 'gym-identity-'));
  cleanups.push(() => rm(path, { recursive: true, force: true }));
  return path;
}

/** A pid that no process has: a child that already exited. */
async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ['-e', '0']);
  await new Promise((resolve) => child.once('exit', resolve));
  return child.pid!;
}

/** A long-lived process that is not a daemon (what a stale daemon.json may end up naming). */
function bystander(): ChildProcess {
  const child = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60_000)'], { stdio: 'ignore' });
  cleanups.push(() => child.kill('SIGKILL'));
  return child;
}

const identityModule = new URL('./identity.ts', import.meta.url).pathname;

/**
 * Runs lockStateDir in a separate process, starting at `startAt` (ms since epoch). `result`
 * resolves "won" or the error code; the process holds what it won until `release()`, so a slow
 * second starter (a loaded machine) never finds the winner already gone.
 */
function lockInChild(
  stateDir: string,
  startAt: number,
): { result: Promise<string>; release: () => Promise<void> } {
  const script = `
    const { lockStateDir } = await import(${JSON.stringify(identityModule)});
    while (Date.now() < ${startAt}) {}
    try { await lockStateDir(${JSON.stringify(stateDir)}); console.log('won'); }
    catch (error) { console.log(error.code ?? String(error)); }
    process.stdin.resume();
    process.stdin.on('end', () => process.exit(0));`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  cleanups.push(() => child.kill('SIGKILL'));
  let output = '';
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const result = new Promise<string>((resolve) => {
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('\n')) resolve(output.trim());
    });
    void exited.then(() => resolve(output.trim()));
  });
  return {
    result,
    release: async () => {
      child.stdin.end();
      await exited;
    },
  };
}

describe('state directory lock', () => {
  it('lets exactly one of two concurrent starters take over a stale lock', async () => {
    // Seen: both starters saw the dead owner, both removed the lock, both "won".
    for (let round = 0; round < 4; round += 1) {
      const stateDir = await stateDirectory();
      await writeFile(join(stateDir, LOCK_FILE), `${await deadPid()}\n`);
      const startAt = Date.now() + 700;
      const starters = [lockInChild(stateDir, startAt), lockInChild(stateDir, startAt)];
      const results = await Promise.all(starters.map((starter) => starter.result));
      await Promise.all(starters.map((starter) => starter.release()));
      expect(
        results.filter((result) => result === 'won'),
        `round ${round}: ${results.join(', ')}`,
      ).toHaveLength(1);
      expect(results.filter((result) => result === 'DAEMON_CONFLICT')).toHaveLength(1);
    }
  });

  it('takes over a lock whose owner is dead, and releases only its own lock', async () => {
    const stateDir = await stateDirectory();
    await writeFile(join(stateDir, LOCK_FILE), `${await deadPid()}\n`);
    const release = await lockStateDir(stateDir);
    expect((await readFile(join(stateDir, LOCK_FILE), 'utf8')).trim()).toBe(String(process.pid));
    await expect(lockStateDir(stateDir)).rejects.toMatchObject({ code: 'DAEMON_CONFLICT' });
    await writeFile(join(stateDir, LOCK_FILE), '1\n');
    await release();
    expect((await readFile(join(stateDir, LOCK_FILE), 'utf8')).trim()).toBe('1');
  });
});

describe('state directory mode', () => {
  it('makes an existing directory that others can enter 0700', async () => {
    const stateDir = join(await stateDirectory(), 'state');
    await mkdir(stateDir, { mode: 0o755 });
    await chmod(stateDir, 0o755);
    await ensureStateDir(stateDir);
    expect((await stat(stateDir)).mode & 0o777).toBe(0o700);
  });

  it('creates a new one 0700', async () => {
    const stateDir = join(await stateDirectory(), 'a', 'b');
    await ensureStateDir(stateDir);
    expect((await stat(stateDir)).mode & 0o777).toBe(0o700);
  });

  it.skipIf(process.getuid?.() !== 0)('refuses a directory owned by another user', async () => {
    const stateDir = join(await stateDirectory(), 'theirs');
    await mkdir(stateDir, { mode: 0o700 });
    const { chown } = await import('node:fs/promises');
    await chown(stateDir, 12345, 12345);
    await expect(ensureStateDir(stateDir)).rejects.toMatchObject({ code: 'VALIDATION_FAILED' });
  });
});

describe('gym daemon stop', () => {
  async function stop(stateDir: string): Promise<string> {
    let output = '';
    const stdout = new Writable({
      write(chunk, _encoding, callback) {
        output += String(chunk);
        callback();
      },
    });
    await runCli(['daemon', 'stop', '--state-dir', stateDir], { stdout, stderr: stdout, env: {} });
    return output;
  }

  it('does not signal the process a stale daemon.json names, and removes the file', async () => {
    // Seen: after a kill -9 the pid was reused, and `gym daemon stop` sent SIGTERM to a stranger.
    const stateDir = await stateDirectory();
    const stranger = bystander();
    await writeDaemonInfo(stateDir, {
      pid: stranger.pid!,
      daemonId: 'daemon-stale',
      url: 'http://127.0.0.1:1',
      startedAt: new Date().toISOString(),
      version: 'test',
    });
    await writeFile(join(stateDir, LOCK_FILE), `${await deadPid()}\n`);
    const output = await stop(stateDir);
    expect(output).toContain('no daemon is running');
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(isProcessAlive(stranger.pid!)).toBe(true);
    await expect(stat(join(stateDir, DAEMON_INFO_FILE))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('does not signal a reused pid even when the lock names it, by its start time', async () => {
    const stateDir = await stateDirectory();
    const stranger = bystander();
    const ticks = processStartTicks(stranger.pid!);
    expect(ticks).not.toBeNull();
    await writeDaemonInfo(stateDir, {
      pid: stranger.pid!,
      daemonId: 'daemon-stale',
      startedAt: new Date().toISOString(),
      version: 'test',
      processStartTicks: ticks! - 1000,
    });
    await writeFile(join(stateDir, LOCK_FILE), `${stranger.pid}\n`);
    expect(await stop(stateDir)).toContain('no daemon is running');
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(isProcessAlive(stranger.pid!)).toBe(true);
  });

  it('stops a process that is the daemon: lock and start time match', async () => {
    const stateDir = await stateDirectory();
    const daemon = bystander();
    await new Promise((resolve) => setTimeout(resolve, 100));
    await writeDaemonInfo(stateDir, {
      pid: daemon.pid!,
      daemonId: 'daemon-real',
      startedAt: new Date().toISOString(),
      version: 'test',
    });
    await writeFile(join(stateDir, LOCK_FILE), `${daemon.pid}\n`);
    const exited = new Promise((resolve) => daemon.once('exit', resolve));
    expect(await stop(stateDir)).toContain('daemon daemon-real stopped');
    await exited;
  });
});

describe('tokenMatches', () => {
  it('accepts only the exact token: not one differing in a byte, nor a prefix, nor empty', () => {
    const token = 'Qm9ndXMtdG9rZW4tZm9yLWEtdGVzdC1vbmx5LTQzY2g';
    expect(tokenMatches(token, token)).toBe(true);
    expect(tokenMatches(`${token.slice(0, -1)}h`, token)).toBe(false);
    expect(tokenMatches(token.slice(0, -1), token)).toBe(false);
    expect(tokenMatches(`${token}x`, token)).toBe(false);
    expect(tokenMatches('', token)).toBe(false);
    // Same length in characters, not in bytes.
    expect(tokenMatches(`${token.slice(0, -1)}é`, token)).toBe(false);
  });
});
