/**
 * The helper's session pipes, run on the host (no engine): the helper from `scripts/setup.sh`
 * makes them, `openHelperPipes` opens them through /proc, and the go byte says which stdio the
 * command gets. CI builds the helper; without it these fail rather than skip.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { openSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../../test/wait-for.ts';
import { DEFAULT_EXEC_HELPER_PATH } from './process-control.ts';
import { openHelperPipes, PIPES_GO_BYTE, type SessionPipes } from './session-pipes.ts';

const children: ChildProcess[] = [];
afterEach(() => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
});

/** Starts `argv` under the helper, asking for pipes, and waits for its ready token. */
async function startHelper(argv: string[], env: Record<string, string> = { GYM_EXEC_PIPES: '1' }) {
  const child = spawn(DEFAULT_EXEC_HELPER_PATH, argv, {
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', GYM_EXEC_READY: 'ready-', ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  children.push(child);
  let engineStdout = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    engineStdout += chunk.toString();
  });
  await waitFor(
    'the ready token',
    () => engineStdout.startsWith('ready-') && engineStdout.length >= 16,
    10_000,
    10,
  );
  return { child, engineStdout: () => engineStdout.slice(16) };
}

function collect(pipe: SessionPipes['stdout']): () => string {
  let text = '';
  pipe.on('data', (chunk: Buffer) => {
    text += chunk.toString();
  });
  return () => text;
}

/** The fds of `pid` that are one of `links` (`pipe:[inode]`), sorted. */
function holdersOf(pid: number, links: string[]): string[] {
  return readdirSync(`/proc/${pid}/fd`)
    .filter((fd) => {
      try {
        return links.includes(readlinkSync(`/proc/${pid}/fd/${fd}`));
      } catch {
        return false;
      }
    })
    .sort();
}

const openFds = () => readdirSync('/proc/self/fd').length;

describe('session pipes', () => {
  it("runs the command on the pipes the daemon opened, and the engine's stdio carries nothing", async () => {
    const { child, engineStdout } = await startHelper([
      'sh',
      '-c',
      'read line; echo "out:$line"; echo err >&2',
    ]);
    const exited = once(child, 'exit');
    const pipeLinks = [3, 4, 5].map((fd) => readlinkSync(`/proc/${child.pid}/fd/${fd}`));
    const pipes = openHelperPipes(child.pid!);
    expect(pipes).not.toBeNull();
    const stdout = collect(pipes!.stdout);
    const stderr = collect(pipes!.stderr);
    child.stdin!.end(PIPES_GO_BYTE);
    // While the shell waits for its line: it holds the pipes as 0, 1 and 2 only, as the helper
    // closed its own ends (3 to 8) before the command ran.
    await waitFor(
      'the shell',
      () => readFileSync(`/proc/${child.pid}/comm`, 'utf8').trim() === 'sh',
      10_000,
      10,
    );
    expect(holdersOf(child.pid!, pipeLinks)).toEqual(['0', '1', '2']);
    pipes!.stdin.end('hello\n');
    await once(pipes!.stdout, 'close');
    expect(stdout()).toBe('out:hello\n');
    expect(stderr()).toBe('err\n');
    expect(engineStdout()).toBe('');
    const [code] = await exited;
    expect(code).toBe(0);
  });

  it('stays on the exec stdio when the go byte is the plain one, closing the pipes', async () => {
    const { child, engineStdout } = await startHelper(['sh', '-c', 'read line; echo "plain:$line"']);
    const exited = once(child, 'exit');
    const pipeLinks = [3, 4, 5].map((fd) => readlinkSync(`/proc/${child.pid}/fd/${fd}`));
    child.stdin!.write('g');
    await waitFor(
      'the shell',
      () => readFileSync(`/proc/${child.pid}/comm`, 'utf8').trim() === 'sh',
      10_000,
      10,
    );
    expect(holdersOf(child.pid!, pipeLinks)).toEqual([]);
    child.stdin!.end('x\n');
    const [code] = await exited;
    expect(code).toBe(0);
    expect(engineStdout()).toBe('plain:x\n');
  });

  it('opens nothing from a helper that made no pipes (one from before them, or not asked), and leaks no fd', async () => {
    const { child, engineStdout } = await startHelper(['sh', '-c', 'echo unpiped'], {});
    const before = openFds();
    expect(openHelperPipes(child.pid!)).toBeNull();
    expect(openFds()).toBe(before);
    child.stdin!.end(PIPES_GO_BYTE);
    await once(child, 'exit');
    expect(engineStdout()).toBe('unpiped\n');
  });

  it('refuses an fd 3 that is not a pipe, and leaks no fd', async () => {
    const file = openSync('/dev/null', 'r');
    const child = spawn('sleep', ['30'], { stdio: ['ignore', 'ignore', 'ignore', file] });
    children.push(child);
    await waitFor('the child', () => readdirSync(`/proc/${child.pid}/fd`).includes('3'), 10_000, 10);
    const before = openFds();
    expect(openHelperPipes(child.pid!)).toBeNull();
    expect(openFds()).toBe(before);
  });
});
