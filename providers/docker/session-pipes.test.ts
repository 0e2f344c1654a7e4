/**
 * The helper's session pipes, run on the host (no engine): the helper from `scripts/setup.sh`
 * makes them, `openHelperPipes` opens them through /proc, and the go byte says which stdio the
 * command gets. CI builds the helper; without it these fail rather than skip.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { openSync, readdirSync } from 'node:fs';
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

const openFds = () => readdirSync('/proc/self/fd').length;

describe('session pipes', () => {
  it("runs the command on the pipes the daemon opened, and the engine's stdio carries nothing", async () => {
    const { child, engineStdout } = await startHelper([
      'sh',
      '-c',
      'read line; echo "out:$line"; echo err >&2; ls /proc/$$/fd | grep -x "[3-8]"; true',
    ]);
    const pipes = openHelperPipes(child.pid!);
    expect(pipes).not.toBeNull();
    const stdout = collect(pipes!.stdout);
    const stderr = collect(pipes!.stderr);
    child.stdin!.end(PIPES_GO_BYTE);
    pipes!.stdin.end('hello\n');
    await once(pipes!.stdout, 'close');
    // The helper closed its ends (3 to 8) before the command ran: none of them is open in it.
    expect(stdout()).toBe('out:hello\n');
    expect(stderr()).toBe('err\n');
    expect(engineStdout()).toBe('');
    const [code] = await once(child, 'exit');
    expect(code).toBe(0);
  });

  it('stays on the exec stdio when the go byte is the plain one, closing the pipes', async () => {
    const { child, engineStdout } = await startHelper([
      'sh',
      '-c',
      'echo plain; ls /proc/$$/fd | grep -x "[3-8]"; true',
    ]);
    child.stdin!.end('g');
    const [code] = await once(child, 'exit');
    expect(code).toBe(0);
    expect(engineStdout()).toBe('plain\n');
  });

  it('opens nothing from a helper that made no pipes (one from before them, or not asked), and leaks no fd', async () => {
    const before = openFds();
    const { child, engineStdout } = await startHelper(['sh', '-c', 'echo unpiped'], {});
    expect(openHelperPipes(child.pid!)).toBeNull();
    child.stdin!.end(PIPES_GO_BYTE);
    await once(child, 'exit');
    expect(engineStdout()).toBe('unpiped\n');
    expect(openFds()).toBe(before);
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
