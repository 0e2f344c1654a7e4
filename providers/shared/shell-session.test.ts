import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { type ExecRequestInput, ExecRequestSchema } from '../../core/schemas/exec.ts';
import type { ExecHooks } from './abnormal-end.ts';
import { killScriptArgv } from './kill-script.ts';
import { MarkerScanner, type SessionKill, ShellSession } from './shell-session.ts';

/**
 * The protocol over the plainest channel there is: a local `sh` child's pipes. This is what a
 * backend without Docker (an SSH channel, kubectl exec) hands the session.
 */
function localSession(kill?: SessionKill, killGraceMs?: number) {
  const shell = spawn('sh', [], { stdio: ['pipe', 'pipe', 'pipe'] });
  const session = new ShellSession(
    { write: (text) => shell.stdin.write(text), close: () => shell.kill('SIGKILL') },
    {
      user: undefined,
      kill: kill ?? {
        kind: 'tagged',
        kill: async (execId) => {
          const [command, ...args] = killScriptArgv(execId, 'tagged-only');
          await new Promise((resolve) => spawn(command!, args, { stdio: 'ignore' }).once('exit', resolve));
          return 'killed';
        },
      },
      ...(killGraceMs === undefined ? {} : { killGraceMs }),
    },
  );
  shell.stdout.on('data', (chunk: Buffer) => session.receive('stdout', chunk));
  shell.stderr.on('data', (chunk: Buffer) => session.receive('stderr', chunk));
  shell.once('exit', () => session.channelLost());
  return { shell, session };
}

const alive: ExecHooks = { classifyAbnormalEnd: async () => 'killed' };
const request = (input: ExecRequestInput) => ExecRequestSchema.parse(input);

describe('MarkerScanner', () => {
  it('finds a marker split across chunks and passes exactly the bytes before it', () => {
    const seen: Buffer[] = [];
    const scanner = new MarkerScanner(Buffer.from('__END__'), (chunk) => seen.push(chunk));
    for (const piece of ['out', 'put\n_', '_E', 'ND', '__0', '\n']) scanner.push(Buffer.from(piece));
    expect(Buffer.concat(seen).toString()).toBe('output\n');
    expect(scanner.trailer).toBe('0');
  });

  it('passes output on at once, holding back only an end that may begin the marker', () => {
    const seen: string[] = [];
    const scanner = new MarkerScanner(Buffer.from('__END__'), (chunk) => seen.push(chunk.toString()));
    scanner.push(Buffer.from('before\n'));
    expect(seen.join('')).toBe('before\n');
    scanner.push(Buffer.from('a_b__E'));
    expect(seen.join('')).toBe('before\na_b');
    // The stream ended with no marker: what was held back was output after all.
    scanner.flush();
    expect(seen.join('')).toBe('before\na_b__E');
  });

  it('has no trailer until its newline arrived', () => {
    const scanner = new MarkerScanner(Buffer.from('M'), () => {});
    scanner.push(Buffer.from('xM12'));
    expect(scanner.trailer).toBeNull();
    scanner.push(Buffer.from('3\nrest'));
    expect(scanner.trailer).toBe('123');
  });
});

describe('ShellSession over a local shell', () => {
  it('runs commands exactly as one-shot execs would: own env, cwd, stdin, exit code, bytes', async () => {
    const { session } = localSession();
    const first = await session.run(
      request({
        command: 'cd /; export X=1; printf "%s|" "$Y" "$(pwd)"; cat; exit 3',
        env: { Y: "a 'b'" },
        stdin: 'in',
      }),
      {},
      alive,
    );
    expect(first).toMatchObject({ status: 'ok', exitCode: 3, stdout: "a 'b'|/|in", stderr: '' });
    // Nothing the first command did changed the session.
    const second = await session.run(
      request({ argv: ['sh', '-c', 'printf "%s" "${X:-unset}" >&2; pwd'], cwd: '/tmp' }),
      {},
      alive,
    );
    expect(second).toMatchObject({ status: 'ok', exitCode: 0, stdout: '/tmp\n', stderr: 'unset' });
    session.close();
  });

  it('kills a timed-out command with the tagged kill and keeps the shell for the next one', async () => {
    const { session } = localSession();
    const timedOut = await session.run(request({ command: 'sleep 1009', timeoutMs: 200 }), {}, alive);
    expect(timedOut.status).toBe('timeout');
    expect(session.isAlive).toBe(true);
    const next = await session.run(request({ command: 'echo again' }), {}, alive);
    expect(next).toMatchObject({ status: 'ok', stdout: 'again\n' });
    session.close();
  });

  it('with a whole-session kill, drops the session and waits for the kill before the result', async () => {
    const events: string[] = [];
    const { session } = localSession({
      kind: 'whole-session',
      kill: async (drop) => {
        events.push('kill');
        drop();
        await new Promise((resolve) => setTimeout(resolve, 50));
        events.push('killed');
        return 'killed';
      },
      releaseBackground: async () => {
        events.push('release');
      },
    });
    expect((await session.run(request({ command: 'true' }), {}, alive)).status).toBe('ok');
    const timedOut = await session.run(request({ command: 'sleep 1010', timeoutMs: 100 }), {}, alive);
    expect(timedOut.status).toBe('timeout');
    expect(events).toEqual(['release', 'kill', 'killed']);
    expect(session.isAlive).toBe(false);
  });

  it('says the command lost its sandbox, never a plain timeout or sandbox_gone, when the tagged kill did not take effect', async () => {
    const { session, shell } = localSession({
      kind: 'tagged',
      // As a backend whose kill script was stopped by the agent: it killed the whole sandbox.
      kill: async () => {
        shell.kill('SIGKILL');
        return 'sandbox_killed';
      },
    });
    const result = await session.run(
      request({ command: 'echo started; sleep 1013', timeoutMs: 100 }),
      {},
      alive,
    );
    expect(result).toMatchObject({ status: 'timeout', exitCode: null, sandboxLost: true });
    expect(result.reason).toMatch(/resisted their kill/);
    expect(result.stderr).toContain('the sandbox was killed');
    expect(session.isAlive).toBe(false);
  });

  it('says a lost shell is sandbox_gone only when the sandbox is', async () => {
    const { session, shell } = localSession();
    const gone: ExecHooks = { classifyAbnormalEnd: async () => 'sandbox_gone' };
    const running = session.run(request({ command: 'sleep 1011' }), {}, gone);
    await new Promise((resolve) => setTimeout(resolve, 50));
    shell.kill('SIGKILL');
    expect((await running).status).toBe('sandbox_gone');
    expect((await session.run(request({ command: 'true' }), {}, alive)).status).toBe('killed');
  });

  it('says oom for the command whose shell the OOM killer ended with it (a container killed whole)', async () => {
    const { session, shell } = localSession();
    const outOfMemory: ExecHooks = { classifyAbnormalEnd: async () => 'oom' };
    const running = session.run(request({ command: 'sleep 1012' }), {}, outOfMemory);
    await new Promise((resolve) => setTimeout(resolve, 50));
    shell.kill('SIGKILL');
    expect((await running).status).toBe('oom');
    // A command after it never ran: not an oom of its own.
    expect((await session.run(request({ command: 'true' }), {}, outOfMemory)).status).toBe('killed');
  });

  it('never starts a command cancelled while it waited its turn', async () => {
    const { session } = localSession();
    const controller = new AbortController();
    const first = session.run(request({ command: 'sleep 0.2; echo first' }), {}, alive);
    const second = session.run(request({ command: 'echo second' }), { signal: controller.signal }, alive);
    controller.abort();
    expect((await first).stdout).toBe('first\n');
    expect(await second).toMatchObject({ status: 'killed', stdout: '' });
    session.close();
  });
});
