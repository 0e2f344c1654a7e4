/**
 * One command, one `docker exec`. The command is tagged with GYM_EXEC_ID so that on timeout every
 * process it started (the exec is a session leader) can be found and killed from a second exec.
 */

import type { Duplex } from 'node:stream';
import type Docker from 'dockerode';
import { createId } from '../../core/ids.ts';
import type { ExecRequest, ExecResult } from '../../core/schemas/exec.ts';
import type { ExecOptions } from '../sandbox-provider.ts';
import { ExecOutput, SIGKILL_EXIT_CODE, stdinBytes } from '../shared/exec-output.ts';
import { EXEC_ID_ENV, KILL_SCRIPT } from '../shared/kill-script.ts';
import { DockerStreamDemuxer } from './demux.ts';

/** After a kill, how long to wait for the exec's stream to close before dropping it. */
const KILL_GRACE_MS = 5_000;

export interface OneShotHooks {
  /**
   * Says why a command ended abnormally (killed by SIGKILL, or its stream broke): the sandbox is
   * gone, the kernel's OOM killer struck, or something else killed it.
   */
  classifyAbnormalEnd(): Promise<'sandbox_gone' | 'oom' | 'killed'>;
}

export function envList(env: Record<string, string>): string[] {
  return Object.entries(env).map(([name, value]) => `${name}=${value}`);
}

/** Resolves when a hijacked exec stream has ended (or closed, or failed). */
function streamDone(stream: Duplex): Promise<void> {
  return new Promise((resolve) => {
    if (stream.destroyed || stream.readableEnded) {
      resolve();
      return;
    }
    stream.once('end', resolve);
    stream.once('close', resolve);
    stream.once('error', () => resolve());
  });
}

function sleep(ms: number): Promise<'timeout'> {
  return new Promise((resolve) => setTimeout(() => resolve('timeout'), ms).unref());
}

/** Runs the kill script for `execId` and waits (bounded) for it to finish. */
export async function killTagged(
  container: Docker.Container,
  execId: string,
  mode: 'session' | 'process',
  user: string | undefined,
): Promise<void> {
  const exec = await container.exec({
    Cmd: ['sh', '-c', KILL_SCRIPT, 'gym-kill', execId, mode === 'session' ? 'session' : 'process'],
    AttachStdout: true,
    AttachStderr: true,
    ...(user === undefined ? {} : { User: user }),
  });
  const stream = (await exec.start({ hijack: true, stdin: false })) as Duplex;
  stream.resume();
  await Promise.race([streamDone(stream), sleep(KILL_GRACE_MS)]);
  stream.destroy();
}

export async function runOneShotExec(
  container: Docker.Container,
  request: ExecRequest,
  options: ExecOptions,
  hooks: OneShotHooks,
): Promise<ExecResult> {
  const execId = createId('exec');
  const input = stdinBytes(request);
  const exec = await container.exec({
    Cmd: request.argv ?? ['sh', '-c', request.command!],
    Env: [`${EXEC_ID_ENV}=${execId}`, ...envList(request.env)],
    AttachStdin: input !== null,
    AttachStdout: true,
    AttachStderr: true,
    Tty: false,
    ...(request.cwd === undefined ? {} : { WorkingDir: request.cwd }),
    ...(request.user === undefined ? {} : { User: request.user }),
  });
  const output = new ExecOutput(request, options);
  const stream = (await exec.start({ hijack: true, stdin: input !== null })) as Duplex;
  const demuxer = new DockerStreamDemuxer((name, payload) => output.push(name, payload));
  stream.on('data', (chunk: Buffer) => demuxer.push(chunk));
  stream.on('error', () => {});
  if (input !== null) stream.end(input);

  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    killTagged(container, execId, 'session', request.user)
      .catch(() => {})
      .then(() => sleep(KILL_GRACE_MS))
      .then(() => stream.destroy());
  }, request.timeoutMs);
  try {
    await streamDone(stream);
  } finally {
    clearTimeout(timer);
  }
  if (timedOut) return output.result('timeout', null);

  let exitCode: number | null = null;
  try {
    const inspected = await exec.inspect();
    exitCode = inspected.Running ? null : inspected.ExitCode;
  } catch {
    // The exec record disappears with its container: fall through to the sandbox check.
  }
  if (exitCode === null || exitCode === SIGKILL_EXIT_CODE) {
    const cause = await hooks.classifyAbnormalEnd();
    return output.result(cause, cause === 'sandbox_gone' ? null : exitCode);
  }
  return output.result('ok', exitCode);
}
