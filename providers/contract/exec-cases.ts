import { createHash, randomBytes } from 'node:crypto';
import { expect, it as vitestIt } from 'vitest';
import { truncationMarker } from '../shared/output-capture.ts';
import type { SandboxFixture } from './fixture.ts';

export type ExecMode = 'one-shot' | 'session';

/** Counts processes whose command line is exactly `sleep <seconds>`, using only /proc and the shell. */
function countSleeps(seconds: number): string {
  return `n=0; for d in /proc/[0-9]*; do c=$(tr '\\000' ' ' < $d/cmdline 2>/dev/null); [ "$c" = "sleep ${seconds} " ] && n=$((n+1)); done; echo $n`;
}

/** Exec behaviour, run once per exec mode against one shared sandbox. */
export function defineExecCases(fixture: SandboxFixture, mode: ExecMode, sandboxId: () => string): void {
  const session = mode === 'session' ? { session: 'contract' } : {};
  // A provider without sessions skips the session group (the lifecycle cases check it refuses them).
  const it = (name: string, body: () => Promise<void>) =>
    vitestIt(name, async (context) => {
      if (mode === 'session' && !fixture.provider.capabilities.sessions) context.skip();
      await body();
    });
  const run = (request: Parameters<SandboxFixture['exec']>[1]) =>
    fixture.exec(sandboxId(), { ...session, ...request });

  it('runs a command and returns its output', async () => {
    const result = await run({ argv: ['echo', 'hello', 'world'] });
    expect(result).toMatchObject({
      status: 'ok',
      exitCode: 0,
      stdout: 'hello world\n',
      stderr: '',
      stdoutTruncated: false,
    });
    expect(result.durationMs).toBeGreaterThanOrEqual(0);
  });

  it('keeps output exact when it has no trailing newline', async () => {
    const result = await run({ command: "printf 'no newline'; printf 'err' >&2" });
    expect(result.stdout).toBe('no newline');
    expect(result.stderr).toBe('err');
  });

  it('reports non-zero exit codes as results, with stderr', async () => {
    const failed = await run({ command: 'echo oops >&2; exit 3' });
    expect(failed).toMatchObject({ status: 'ok', exitCode: 3, stderr: 'oops\n' });
    const falseResult = await run({ argv: ['false'] });
    expect(falseResult).toMatchObject({ status: 'ok', exitCode: 1 });
  });

  it('passes arguments without a shell (no word splitting or globbing)', async () => {
    const result = await run({ argv: ['sh', '-c', 'printf "%s|" "$@"', 'sh', 'a b', '*', "it's", '$HOME'] });
    expect(result.stdout).toBe("a b|*|it's|$HOME|");
  });

  it('feeds stdin, text and binary', async () => {
    const text = await run({ argv: ['cat'], stdin: 'line one\nline two' });
    expect(text.stdout).toBe('line one\nline two');
    const bytes = randomBytes(70_000);
    const binary = await run({
      command: 'sha256sum | cut -d" " -f1',
      stdin: bytes.toString('base64'),
      stdinEncoding: 'base64',
    });
    expect(binary.stdout.trim()).toBe(createHash('sha256').update(bytes).digest('hex'));
  });

  it('gives the command end-of-file on stdin when none is given', async () => {
    const result = await run({ argv: ['cat'], timeoutMs: 10_000 });
    expect(result).toMatchObject({ status: 'ok', exitCode: 0, stdout: '' });
  });

  it('applies env and cwd per command, over the sandbox env', async () => {
    const result = await run({
      command: 'echo "$GREETING|$SPEC_VAR|$(pwd)"',
      env: { GREETING: "hi 'there' $x" },
      cwd: '/tmp',
    });
    expect(result.stdout).toBe("hi 'there' $x|from-spec|/tmp\n");
    const overridden = await run({ command: 'echo "$SPEC_VAR"', env: { SPEC_VAR: 'overridden' } });
    expect(overridden.stdout).toBe('overridden\n');
  });

  // Not registered when the author declares root only (see `otherUsers`).
  if (fixture.options.capabilities?.otherUsers !== false)
    vitestIt(
      "runs as the user asked for, by uid or by name, and as the sandbox's user otherwise",
      async (context) => {
        if (mode === 'session' && !fixture.provider.capabilities.sessions) context.skip();
        if (fixture.provider.capabilities.otherUsers === false) context.skip();
        const byUid = await run({ command: 'id -u; id -g', user: '65534:65534' });
        expect(byUid).toMatchObject({ status: 'ok', exitCode: 0, stdout: '65534\n65534\n' });
        const byName = await run({ argv: ['id', '-un'], user: 'nobody' });
        expect(byName.stdout).toBe('nobody\n');
        // What it makes is its own, and what only root may do stays refused.
        const made = await run({
          command: 'touch /tmp/contract-user && stat -c %u /tmp/contract-user',
          user: '65534',
        });
        expect(made.stdout).toBe('65534\n');
        const refused = await run({ command: 'echo x > /etc/contract-user', user: '65534' });
        expect(refused.exitCode).not.toBe(0);
        const sandboxUser = await run({ argv: ['id', '-u'] });
        expect(sandboxUser.stdout).toBe('0\n');
      },
    );

  it('does not carry shell state from one command to the next', async () => {
    await run({ command: 'cd /; export LEAK=1; exit 0' });
    const result = await run({ command: 'echo "[$LEAK]"; pwd', cwd: '/tmp' });
    expect(result.stdout).toBe('[]\n/tmp\n');
  });

  it('kills the whole process group on timeout and stays usable', async () => {
    const started = performance.now();
    const result = await run({ command: 'sleep 1001 & sleep 1001; echo never', timeoutMs: 1000 });
    expect(result.status).toBe('timeout');
    expect(result.exitCode).toBeNull();
    expect(result.stdout).not.toContain('never');
    expect(performance.now() - started).toBeLessThan(15_000);
    const left = await fixture.exec(sandboxId(), { command: countSleeps(1001) });
    expect(left.stdout.trim()).toBe('0');
    const after = await run({ argv: ['echo', 'still here'] });
    expect(after).toMatchObject({ status: 'ok', stdout: 'still here\n' });
  });

  // An agent is shown what its command printed before it was stopped (mini-SWE-agent's and
  // Terminal-Bench's harnesses do): a timeout ends the command, not what it said.
  it('keeps what a command printed before its timeout', async () => {
    const result = await run({ command: 'echo before; echo oops >&2; sleep 1005', timeoutMs: 1000 });
    expect(result.status).toBe('timeout');
    expect(result.stdout).toBe('before\n');
    // A session's shell that outlives the kill may add its own word on the job ("Killed").
    expect(result.stderr.startsWith('oops\n')).toBe(true);
  });

  it('kills processes that left the process group on timeout', async () => {
    const result = await run({ command: 'setsid sleep 1002 & sleep 1002', timeoutMs: 1000 });
    expect(result.status).toBe('timeout');
    const left = await fixture.exec(sandboxId(), { command: countSleeps(1002) });
    expect(left.stdout.trim()).toBe('0');
  });

  // Only a provider whose kill nothing can leave (a cgroup, a tracer) can promise these; a `tagged` one says so.
  const itConfined = (name: string, body: () => Promise<void>) =>
    fixture.options.capabilities?.timeoutKill === 'tagged'
      ? undefined
      : vitestIt(name, async (context) => {
          if (mode === 'session' && !fixture.provider.capabilities.sessions) context.skip();
          if (fixture.provider.capabilities.timeoutKill === 'tagged') context.skip();
          await body();
        });

  itConfined('kills processes that cleared their environment on timeout', async () => {
    const result = await run({ command: 'env -i sleep 1003', timeoutMs: 1000 });
    expect(result.status).toBe('timeout');
    const left = await fixture.exec(sandboxId(), { command: countSleeps(1003) });
    expect(left.stdout.trim()).toBe('0');
  });

  itConfined('kills processes that cleared their environment and left the session on timeout', async () => {
    const result = await run({ command: 'env -i setsid sleep 1004 & sleep 1004', timeoutMs: 1000 });
    expect(result.status).toBe('timeout');
    const left = await fixture.exec(sandboxId(), { command: countSleeps(1004) });
    expect(left.stdout.trim()).toBe('0');
  });

  it('truncates output beyond the cap, keeping head and tail', async () => {
    const result = await run({ argv: ['seq', '1', '20000'], maxOutputBytes: 1000 });
    expect(result.status).toBe('ok');
    expect(result.stdoutTruncated).toBe(true);
    expect(result.stdoutBytes).toBe(108_894);
    expect(result.stdout.startsWith('1\n2\n3\n')).toBe(true);
    expect(result.stdout.endsWith('19999\n20000\n')).toBe(true);
    expect(result.stdout).toContain(truncationMarker(108_894 - 1000));
    expect(result.stderrTruncated).toBe(false);
  });

  it('keeps memory bounded for a command that prints far more than the cap', async () => {
    const result = await run({
      command: 'head -c 20000000 /dev/zero',
      maxOutputBytes: 4096,
      timeoutMs: 30_000,
    });
    expect(result).toMatchObject({
      status: 'ok',
      exitCode: 0,
      stdoutTruncated: true,
      stdoutBytes: 20_000_000,
    });
    expect(result.stdout.length).toBeLessThan(4096 + 100);
  });

  it('reports a missing program as a non-zero exit, not an error', async () => {
    const result = await run({ argv: ['/no/such/program'] });
    expect(result.status).toBe('ok');
    expect(result.exitCode).not.toBe(0);
  });

  // What the sandbox holds is the task's or the agent's doing: a command it does not let start is
  // a result, as a shell gives one (126 cannot run, 127 not found), never a provider error (which
  // an evaluation would retry as an infrastructure fault).
  const cannotStart: Array<[string, Parameters<SandboxFixture['exec']>[1]]> = [
    ['a working directory the sandbox lacks', { command: 'pwd', cwd: '/no/such/testbed' }],
    ['a working directory that is a file', { command: 'pwd', cwd: '/etc/passwd' }],
    ['a program not in PATH', { argv: ['no-such-program-in-path'] }],
    ['a file that is not executable', { argv: ['/etc/passwd'] }],
    ['a user the sandbox does not have', { command: 'id', user: 'no-such-user-here' }],
  ];
  for (const [what, request] of cannotStart) {
    it(`reports a command that cannot start for ${what} as a result, with a message`, async () => {
      const result = await run(request);
      expect(result, JSON.stringify(result)).toMatchObject({ status: 'ok' });
      expect([126, 127]).toContain(result.exitCode);
      expect(result.sandboxLost).toBeUndefined();
      expect(`${result.stdout}${result.stderr}`.trim()).not.toBe('');
      // The sandbox is no worse for it.
      expect(await run({ argv: ['true'] })).toMatchObject({ status: 'ok', exitCode: 0 });
    });
  }
}
