/**
 * The cases every runtime over SSH (Apptainer, Enroot) meets against an agent that may stop
 * (SIGSTOP) any process of its sandbox, the daemon's kill script and stop included: each runtime's
 * agent test registers them with its provider and adds what is its own.
 */
import { readdir, readFile } from 'node:fs/promises';
import { expect, it } from 'vitest';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import type { SandboxProvider } from '../../providers/sandbox-provider.ts';
import { withTimeout } from '../../providers/shared/with-timeout.ts';
import { BUSYBOX_REFERENCE } from '../fixtures/busybox-root.ts';

/** Host processes whose command line is exactly `argv`. */
export async function hostProcesses(argv: string[]): Promise<number[]> {
  const wanted = `${argv.join('\0')}\0`;
  const found: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const line = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    if (line === wanted) found.push(Number(entry));
  }
  return found;
}

/**
 * A sandbox of `provider` with 1000 idle processes (they make a pass over /proc slow) and a
 * watcher that stops whatever starts after it, as soon as its pid exists; and its exec.
 */
async function sandboxWithStopper(provider: SandboxProvider) {
  const sandbox = await provider.create(
    parseOrThrow(SandboxSpecSchema, { image: BUSYBOX_REFERENCE }, 'spec'),
  );
  const exec = (command: string, timeoutMs = 30_000) =>
    provider.exec(sandbox.id, parseOrThrow(ExecRequestSchema, { command, timeoutMs }, 'exec'));
  const setUp = await exec(
    [
      'i=0; while [ $i -lt 1000 ]; do env -i setsid sleep 1000 </dev/null >/dev/null 2>&1 & i=$((i+1)); done',
      `env -i setsid sh -c 'base=$$; while :; do p=$((base+1)); while [ $p -lt $((base+600)) ]; do kill -STOP $p 2>/dev/null; p=$((p+1)); done; done' </dev/null >/dev/null 2>&1 &`,
      'echo started',
    ].join('\n'),
  );
  expect(setUp.stdout).toContain('started');
  return { sandbox, exec };
}

/**
 * Registers the stopper cases for `provider`. `sleepSeconds` names the timed-out command's sleep,
 * one per runtime, so that two runtimes' files running at once never see each other's.
 */
export function stopperCases(
  provider: SandboxProvider & Required<Pick<SandboxProvider, 'stopProcesses'>>,
  sleepSeconds: number,
): void {
  it('kills a timed-out command while the agent stops every new process of the sandbox', async () => {
    const { sandbox, exec } = await sandboxWithStopper(provider);
    // Before the fix the kill ran in the sandbox, was stopped, and this exec never returned.
    const result = await withTimeout(exec(`sleep ${sleepSeconds}; echo survived`, 1000), 30_000);
    expect(result, 'the exec had not returned 30 s after its 1 s timeout').not.toBeNull();
    expect(result).toMatchObject({ status: 'timeout', stdout: '' });
    expect(await hostProcesses(['sleep', String(sleepSeconds)])).toEqual([]);
    await provider.destroy(sandbox.id);
  }, 90_000);

  it('stops every process of the sandbox while the agent stops every new one', async () => {
    const { sandbox, exec } = await sandboxWithStopper(provider);
    // Before the fix the stop ran in the sandbox, was stopped, and never returned.
    const stopped = await withTimeout(provider.stopProcesses(sandbox.id), 30_000);
    expect(stopped, 'stopProcesses had not returned in 30 s').not.toBeNull();
    expect(stopped!.killed).toBeGreaterThanOrEqual(1001);
    // The watcher is gone with the rest: a command runs again.
    expect(await exec('echo quiet')).toMatchObject({ status: 'ok', stdout: 'quiet\n' });
    await provider.destroy(sandbox.id);
  }, 90_000);
}

/** Host processes whose command line contains `text`. */
async function hostProcessesNamed(text: string): Promise<number[]> {
  const found: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const line = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    if (line.includes(text)) found.push(Number(entry));
  }
  return found;
}

/**
 * Registers the case of the SSH command runner (providers/ssh/runner-script.ts): a process of the
 * SSH user on the node that runs whatever its stdin says, outside every namespace. It has no
 * socket; its stdin is a pipe from sshd, which a process of the same user could open through
 * `/proc/<pid>/fd/0` if it saw the runner's pid. The sandbox's own pid namespace and /proc hide
 * it, and a command run through it holds none of its descriptors.
 */
export function runnerOutOfReachCase(provider: SandboxProvider): void {
  it('gives the agent no way to see or reach the SSH command runner', async () => {
    const sandbox = await provider.create(
      parseOrThrow(SandboxSpecSchema, { image: BUSYBOX_REFERENCE }, 'spec'),
    );
    const exec = (command: string) =>
      provider.exec(sandbox.id, parseOrThrow(ExecRequestSchema, { command, timeoutMs: 30_000 }, 'exec'));
    // The runner is there, on the host, running the command below.
    expect((await hostProcessesNamed('gym-command-runner')).length).toBeGreaterThan(0);
    const probe = await exec(
      [
        'for f in /proc/[0-9]*/cmdline; do tr "\\000" " " < "$f" 2>/dev/null; echo; done > /tmp/listed',
        // The listing works: it shows this probe itself.
        'grep -c "[f]or f in /proc" /tmp/listed',
        'grep -c "gym-command-runne[r]" /tmp/listed',
        'ls /proc/self/fd | tr "\\n" " "',
      ].join('; '),
    );
    const [itself, seen, descriptors] = probe.stdout.split('\n');
    expect(Number(itself)).toBeGreaterThan(0);
    expect(seen).toBe('0');
    // Its stdin, stdout, stderr and ls's folder: nothing of the runner or another command.
    expect(descriptors?.trim().split(' ')).toEqual(['0', '1', '2', '3']);
    await provider.destroy(sandbox.id);
  }, 90_000);
}
