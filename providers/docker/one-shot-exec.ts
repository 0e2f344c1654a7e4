/**
 * One command, one `docker exec`.
 *
 * With an exec confinement (the exec helper mounted in the container and the container's cgroup
 * v2 directory reachable from here), the exec starts as the helper, which waits for a go byte on
 * stdin; the daemon moves it into a cgroup of its own first, so everything the command ever
 * starts is in that cgroup, and a timeout kills the cgroup. Without one, the command is tagged
 * with GYM_EXEC_ID and a timeout runs the kill script inside the sandbox (a weaker guarantee: see
 * `shared/kill-script.ts`).
 */

import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { Duplex } from 'node:stream';
import type Docker from 'dockerode';
import { GymError } from '../../core/errors.ts';
import { createId } from '../../core/ids.ts';
import type { ExecRequest, ExecResult } from '../../core/schemas/exec.ts';
import type { ExecOptions } from '../sandbox-provider.ts';
import { abnormalEndResult, type ExecHooks } from '../shared/abnormal-end.ts';
import { ExecOutput, SIGKILL_EXIT_CODE, stdinBytes } from '../shared/exec-output.ts';
import {
  EXEC_ID_ENV,
  KILL_FAILED_NOTE,
  KILL_FAILED_REASON,
  type KillOutcome,
  type KillReach,
  killScriptArgv,
} from '../shared/kill-script.ts';
import { withTimeout } from '../shared/with-timeout.ts';
import { DockerStreamDemuxer } from './demux.ts';
import type { ContainerCgroup } from './exec-cgroups.ts';

/** After a kill, how long to wait for the exec's stream to close before dropping it. */
const KILL_GRACE_MS = 5_000;

/**
 * How long a timeout's kill script may take before the kill counts as failed and the container is
 * killed instead. Normally it takes milliseconds; a loaded engine can take seconds to start an
 * exec, and a sandbox killed for that alone would be lost for nothing.
 */
const KILL_SCRIPT_WAIT_MS = 15_000;

/**
 * How long a just-started exec may take to run (its ready token, or its pid in the engine's
 * inspect). An engine under heavy load can take well over 5 s to start a process (seen: 300
 * execs at once with the 2 cores busy); waiting less failed those commands as PROVIDER_ERROR.
 */
export const PID_WAIT_MS = 120_000;

/** The pause between two inspects while waiting for an exec's pid: from 5 ms, doubling, to this. */
const PID_POLL_MAX_MS = 500;

/**
 * How long to wait for the helper's ready token before asking the engine for the pid anyway (a
 * helper of an older build, mounted before an upgrade, sends none).
 */
const READY_WAIT_MS = 1_000;

/** The helper writes its pid in the sandbox after its ready token, as this many digits. */
const READY_PID_DIGITS = 10;

/** The byte that tells the exec helper to run the command (any byte would do). */
export const GO_BYTE = Buffer.from('g');

/** Where the exec helper appears in every container (read-only; /dev is not committed by snapshots). */
export const EXEC_HELPER_MOUNT = '/dev/.gym-exec';

/** How a container's commands are confined, so that a timeout kills all they started. */
export interface ExecConfinement {
  /** The exec helper's path inside the container. */
  helperPath: string;
  /** The container's cgroup v2 directory on the host. */
  cgroup: ContainerCgroup;
}

export function envList(env: Record<string, string>): string[] {
  return Object.entries(env).map(([name, value]) => `${name}=${value}`);
}

/** Resolves when a hijacked exec stream has ended (or closed, or failed). */
export function streamDone(stream: Duplex): Promise<void> {
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

/**
 * The runtime ended an exec before its first process ran: what the sandbox holds does not let it
 * start (no such working directory, no such user). Its message is in the exec's output.
 */
export class ExecNotStarted extends Error {
  readonly exitCode: number;

  constructor(exitCode: number) {
    super(`the exec ended (exit ${exitCode}) before it showed a pid`);
    this.exitCode = exitCode;
  }
}

/**
 * Added to the stderr of a command the sandbox's contents did not let start: a result, as a shell
 * gives one (126, 127), never a provider error. The runtime's own message says which.
 */
export function notStartedNote(exitCode: number): Buffer {
  return Buffer.from(
    `\n[gym: the command could not start in the sandbox (exit ${exitCode}): its working directory, user or program is missing or not usable]\n`,
  );
}

export function sleep(ms: number): Promise<'timeout'> {
  return new Promise((resolve) => setTimeout(() => resolve('timeout'), ms).unref());
}

/**
 * A timeout's kill without a cgroup: the kill script in the container, as the command's user, and
 * when it did not take effect (see `KillOutcome`: the agent, as that user, can stop or kill it, or
 * fork faster than it kills), the whole container, killed by the engine, which nothing in it can
 * resist. Throws only when even that fails (the engine does not answer).
 */
export async function killTagged(
  container: Docker.Container,
  execId: string,
  reach: KillReach,
  user: string | undefined,
): Promise<KillOutcome> {
  return killOrTakeSandbox(container, () => runBounded(container, killScriptArgv(execId, reach), user));
}

/**
 * A timeout's kill under gVisor, where the command runs traced by the exec helper (`--traced`,
 * see gym-exec.c): the helper's `--kill-tracer` ends the tracer, and the kernel every process it
 * traces. The whole container is killed instead when that does not take effect (the tracer's pid
 * is unknown, or the kill's exec failed), as with the kill script.
 */
export function killTracer(
  container: Docker.Container,
  helperPath: string,
  tracerPid: () => Promise<number | 'ended' | null>,
): Promise<KillOutcome> {
  return killOrTakeSandbox(container, async () => {
    const pid = await tracerPid();
    if (pid === 'ended') return true;
    return pid !== null && runBounded(container, [helperPath, '--kill-tracer', String(pid)], '0');
  });
}

/**
 * The pid of an exec's tracer from its ready token, waited for (bounded: a loaded engine starts an
 * exec late); `ended` when the exec ended without one (nothing of it runs).
 */
export async function tracerPidOf(
  ready: { seen: Promise<unknown>; nsPid: number | null },
  ended: Promise<void>,
): Promise<number | 'ended' | null> {
  const first = await Promise.race([
    ready.seen.then(() => 'seen' as const),
    ended.then(() => 'ended' as const),
    sleep(KILL_SCRIPT_WAIT_MS),
  ]);
  return ready.nsPid ?? (first === 'ended' ? 'ended' : null);
}

/** Runs `attempt`; when it did not take effect, kills the whole container (see `killTagged`). */
async function killOrTakeSandbox(
  container: Docker.Container,
  attempt: () => Promise<boolean>,
): Promise<KillOutcome> {
  // Read before the script runs: should the agent stop its exec half-started (its `runc init`),
  // the engine holds the container until that exec goes on, and an inspect would wait forever.
  const first = await withTimeout(container.inspect(), KILL_GRACE_MS).then(
    (inspected) => (inspected === null ? null : { id: inspected.Id, pid: inspected.State.Pid }),
    () => null,
  );
  if (await attempt()) return 'killed';
  await killContainer(container, first);
  return 'sandbox_killed';
}

/**
 * Runs `cmd` in the container, bounded; whether it exited 0 in time. Creating and starting its
 * exec are bounded too: an engine held by a stuck exec answers neither.
 */
async function runBounded(
  container: Docker.Container,
  cmd: string[],
  user: string | undefined,
): Promise<boolean> {
  const deadline = performance.now() + KILL_SCRIPT_WAIT_MS;
  const ran = await withTimeout(runUntil(container, cmd, user, deadline), KILL_SCRIPT_WAIT_MS + 2_000);
  return ran === true;
}

async function runUntil(
  container: Docker.Container,
  cmd: string[],
  user: string | undefined,
  deadline: number,
): Promise<boolean> {
  try {
    const exec = await container.exec({
      Cmd: cmd,
      AttachStdout: true,
      AttachStderr: true,
      ...(user === undefined ? {} : { User: user }),
    });
    const stream = (await exec.start({ hijack: true, stdin: false })) as Duplex;
    stream.resume();
    const ended = await Promise.race([
      streamDone(stream).then(() => 'ended' as const),
      sleep(Math.max(0, deadline - performance.now())),
    ]);
    stream.destroy();
    if (ended !== 'ended') return false;
    // The engine may record the exit a moment after the stream closed.
    for (let attempt = 0; attempt < 20; attempt++) {
      const inspected = await exec.inspect();
      if (!inspected.Running) return inspected.ExitCode === 0;
      await sleep(50);
    }
    return false;
  } catch {
    return false;
  }
}

/**
 * Kills the container (SIGKILL to its first process: its pid namespace dies, everything in it
 * with it) and waits (bounded) until the engine says it has stopped; throws when it cannot tell.
 *
 * From the host first, when the daemon runs where the engine does and may signal the container's
 * processes: the engine cannot kill a container while an exec in it is stuck half-started (the
 * agent stopped its `runc init`), and answers nothing for it until then. The pid is checked to
 * still be that container's (its cgroup names it) before it is signalled.
 */
async function killContainer(
  container: Docker.Container,
  first: { id: string; pid: number } | null,
): Promise<void> {
  if (first !== null && first.pid > 0) {
    try {
      if ((await readFile(`/proc/${first.pid}/cgroup`, 'utf8')).includes(first.id))
        process.kill(first.pid, 'SIGKILL');
    } catch {
      // Another host (a remote engine), gone already, or not ours to signal: the engine's kill follows.
    }
  }
  await withTimeout(
    container.kill().catch((error: { statusCode?: number }) => {
      // 404: already removed; 409: not running. Both are what the kill is for.
      if (error.statusCode !== 404 && error.statusCode !== 409) throw error;
    }),
    KILL_GRACE_MS,
  ).catch(() => {});
  const deadline = performance.now() + KILL_GRACE_MS;
  for (;;) {
    const state = await withTimeout(
      container.inspect().then(
        (inspected) => inspected.State,
        (error: { statusCode?: number }) => (error.statusCode === 404 ? { Running: false } : null),
      ),
      KILL_GRACE_MS,
    );
    if (state !== null && !state.Running) return;
    if (performance.now() > deadline)
      throw new GymError(
        'PROVIDER_ERROR',
        'the timeout kill of a command did not take effect, and its container, killed, still runs: the sandbox is unusable',
        { details: { container: first?.id ?? null } },
      );
    await sleep(50);
  }
}

/**
 * The host pid of a started exec, once it runs: from the helper's ready token when it came (its
 * pid in the sandbox, looked up on the host), else from the engine's inspect, asked with a
 * growing pause so a loaded engine is not flooded. Throws when the exec ended without running,
 * or showed no pid within {@link PID_WAIT_MS}.
 */
export async function startedHostPid(
  exec: Pick<Docker.Exec, 'inspect'>,
  confinement: Pick<ExecConfinement, 'cgroup'>,
  ready: { seen: Promise<unknown>; nsPid: number | null } | null,
  waitMs = PID_WAIT_MS,
): Promise<number> {
  const deadline = performance.now() + waitMs;
  let isTokenPending = ready !== null;
  ready?.seen.then(
    () => {
      isTokenPending = false;
    },
    () => {
      isTokenPending = false;
    },
  );
  // Once the helper said it runs (and its pid in the sandbox), its host pid is read on the host.
  if (ready !== null) await Promise.race([ready.seen, sleep(READY_WAIT_MS)]);
  for (let pause = 5; ; pause = Math.min(pause * 2, PID_POLL_MAX_MS)) {
    const nsPid = ready?.nsPid ?? null;
    const fromHost = nsPid === null ? null : await confinement.cgroup.hostPidOf(nsPid);
    if (fromHost !== null) return fromHost;
    const inspected = await exec.inspect();
    if (inspected.Pid > 0) return inspected.Pid;
    if (!inspected.Running && inspected.ExitCode !== null && inspected.ExitCode !== undefined)
      throw new ExecNotStarted(inspected.ExitCode);
    if (performance.now() > deadline) throw new Error(`the exec showed no pid within ${waitMs} ms`);
    await (isTokenPending && ready !== null ? Promise.race([ready.seen, sleep(pause)]) : sleep(pause));
  }
}

/**
 * Moves a started, waiting exec helper into a new child cgroup `name`; when that fails, why (the
 * caller fails closed and reports it).
 */
export async function confineExec(
  exec: Docker.Exec,
  confinement: ExecConfinement,
  name: string,
  ready: { seen: Promise<unknown>; nsPid: number | null } | null = null,
  waitMs = PID_WAIT_MS,
): Promise<{ cgroup: string; pid: number } | { failure: string; notStarted?: number }> {
  // The child cgroup is made while the helper starts (it needs no pid), not after its token: the
  // time between the token and the go byte is what confinement adds to a command.
  const child = confinement.cgroup.createChild(name);
  child.catch(() => {});
  try {
    const pid = await startedHostPid(exec, confinement, ready, waitMs);
    const cgroup = await child;
    await confinement.cgroup.move(pid, cgroup);
    return { cgroup, pid };
  } catch (error) {
    // Nothing was moved into it (or the move failed): an empty child, removed at once.
    await child.then(
      (cgroup) => confinement.cgroup.remove(cgroup),
      () => {},
    );
    return {
      failure: (error as Error)?.message ?? String(error),
      ...(error instanceof ExecNotStarted ? { notStarted: error.exitCode } : {}),
    };
  }
}

export async function runOneShotExec(
  container: Docker.Container,
  request: ExecRequest,
  options: ExecOptions,
  hooks: ExecHooks,
  confinement: ExecConfinement | null = null,
  /** Under gVisor: the exec helper's path when `request` runs through its `--traced` (see `killTracer`). */
  tracer: string | null = null,
): Promise<ExecResult> {
  const execId = createId('exec');
  const input = stdinBytes(request);
  const argv = request.argv ?? ['sh', '-c', request.command!];
  // The helper always reads its go byte from stdin, so stdin is always attached with it.
  const attachStdin = confinement !== null || input !== null;
  // The helper prints this token first thing (then drops the variable): proof that it runs.
  const readyToken =
    confinement === null && tracer === null ? null : `gym-ready-${randomBytes(12).toString('hex')}`;
  const exec = await container.exec({
    Cmd: confinement === null ? argv : [confinement.helperPath, ...argv],
    Env: [
      `${EXEC_ID_ENV}=${execId}`,
      ...(readyToken === null ? [] : [`GYM_EXEC_READY=${readyToken}`]),
      ...envList(request.env),
    ],
    AttachStdin: attachStdin,
    AttachStdout: true,
    AttachStderr: true,
    Tty: false,
    ...(request.cwd === undefined ? {} : { WorkingDir: request.cwd }),
    ...(request.user === undefined ? {} : { User: request.user }),
  });
  const output = new ExecOutput(request, options);
  const stream = (await exec.start({ hijack: true, stdin: attachStdin })) as Duplex;
  const ready = new ReadyToken(readyToken, (name, payload) => output.push(name, payload));
  const demuxer = new DockerStreamDemuxer((name, payload) => ready.push(name, payload));
  stream.on('data', (chunk: Buffer) => demuxer.push(chunk));
  stream.on('error', () => {});
  // The command's own timer bounds its whole wait, the wait for its exec to start included: a
  // start held up (an engine busy with a stopper an earlier command left) is this command's time.
  const startedMs = performance.now();
  const attempt =
    confinement === null
      ? null
      : await confineExec(
          exec,
          confinement,
          `gym-${execId}`,
          {
            seen: Promise.race([ready.seen, streamDone(stream)]),
            get nsPid() {
              return ready.nsPid;
            },
          },
          Math.min(PID_WAIT_MS, request.timeoutMs),
        );
  const confined = attempt !== null && 'cgroup' in attempt ? attempt : null;
  if (attempt !== null && 'failure' in attempt) {
    // Fail closed: an unconfined command could outlive its timeout. Closing the helper's stdin
    // before the go byte makes it exit (125) without running anything.
    if (attempt.notStarted !== undefined) {
      // The runtime refused to start it (a cwd or user the sandbox lacks; its message is on the
      // exec's stdout): the sandbox's contents, so a result. The exec has ended: its output with it.
      await withTimeout(streamDone(stream), KILL_GRACE_MS);
      stream.destroy();
      ready.flush();
      output.push('stderr', notStartedNote(attempt.notStarted));
      return output.result('ok', attempt.notStarted);
    }
    stream.end();
    stream.destroy();
    // Its time ran out before it could start: nothing of it ran (no go byte), so a timeout.
    if (performance.now() - startedMs >= request.timeoutMs) return output.result('timeout', null);
    // Most often the sandbox went away under the exec: that is a result, not an error.
    // Or it was OOM-killed before it could start (a sandbox whose memory is full): the command's `oom`.
    const end = await hooks.classifyAbnormalEnd();
    if (end !== 'killed') return abnormalEndResult(output, end, null);
    throw new GymError('PROVIDER_ERROR', 'could not move the command into its own cgroup; it was not run', {
      details: { reason: attempt.failure },
    });
  }
  if (confinement !== null) stream.write(GO_BYTE);
  if (input !== null) stream.end(input);
  else if (attachStdin) stream.end();

  let killing: Promise<KillOutcome> | null = null;
  let isCancelled = false;
  const kill = () => {
    if (killing !== null) return;
    killing =
      tracer !== null
        ? killTracer(container, tracer, () => tracerPidOf(ready, streamDone(stream)))
        : confined === null || confinement === null
          ? killTagged(container, execId, 'tagged-and-their-sessions', request.user)
          : confinement.cgroup.kill(confined.cgroup).then(
              () => 'killed' as const,
              () => 'killed' as const,
            );
    killing.then(
      () => sleep(KILL_GRACE_MS).then(() => stream.destroy()),
      () => stream.destroy(),
    );
  };
  const timer = setTimeout(kill, Math.max(0, request.timeoutMs - (performance.now() - startedMs)));
  // A caller that gives up (a streaming client that went away) cancels exactly as a timeout would.
  const cancel = () => {
    isCancelled = true;
    kill();
  };
  if (options.signal?.aborted) cancel();
  else options.signal?.addEventListener('abort', cancel, { once: true });
  try {
    await streamDone(stream);
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener('abort', cancel);
    ready.flush();
  }
  const timedOut = killing !== null;
  // The result says "timeout" only once the kill has finished: nothing it started runs on.
  // When the kill had to take the container, the command ran on until then, and resisting its
  // kill cost it the sandbox: its own doing, not the engine's.
  if (killing !== null && (await killing) === 'sandbox_killed') {
    output.push('stderr', KILL_FAILED_NOTE);
    return output.lost(isCancelled ? 'killed' : 'timeout', KILL_FAILED_REASON);
  }
  // The exit code is asked of the engine while the cgroup is cleaned up, not after: the two do
  // not depend on each other (the stream has ended, so has the exec), and both finish before the
  // result is returned.
  const exitCodeRead = timedOut ? null : exitCodeOf(exec);
  if (confined !== null && confinement !== null) {
    // Background jobs a command left on purpose outlive it, as they would without a cgroup.
    if (!timedOut) await confinement.cgroup.evacuate(confined.cgroup);
    await confinement.cgroup.remove(confined.cgroup);
  }
  if (exitCodeRead === null) return output.result(isCancelled ? 'killed' : 'timeout', null);
  const exitCode = await exitCodeRead;
  if (exitCode === null || exitCode === SIGKILL_EXIT_CODE) {
    return abnormalEndResult(output, await hooks.classifyAbnormalEnd(), exitCode);
  }
  return output.result('ok', exitCode);
}

/** An ended exec's exit code; null when the engine has none (the exec record disappears with its container). */
async function exitCodeOf(exec: Pick<Docker.Exec, 'inspect'>): Promise<number | null> {
  try {
    const inspected = await exec.inspect();
    return inspected.Running ? null : inspected.ExitCode;
  } catch {
    return null;
  }
}

/**
 * Takes the helper's ready token off the front of stdout and passes everything else through. An
 * older helper prints no token: the first stdout bytes then differ from it and pass unchanged.
 */
export class ReadyToken {
  readonly seen: Promise<void>;
  /** The helper's pid in the sandbox's pid namespace, once its token came. */
  nsPid: number | null = null;
  readonly #onData: (name: 'stdout' | 'stderr', payload: Buffer) => void;
  #token: Buffer | null;
  #held: Buffer = Buffer.alloc(0);
  #markSeen!: () => void;

  constructor(token: string | null, onData: (name: 'stdout' | 'stderr', payload: Buffer) => void) {
    this.#token = token === null ? null : Buffer.from(token);
    this.#onData = onData;
    this.seen = new Promise((resolve) => {
      this.#markSeen = resolve;
    });
  }

  push(name: 'stdout' | 'stderr', payload: Buffer): void {
    const token = this.#token;
    if (token === null || name !== 'stdout') {
      this.#onData(name, payload);
      return;
    }
    const held = this.#held.length === 0 ? payload : Buffer.concat([this.#held, payload]);
    const compared = Math.min(held.length, token.length);
    const isPrefix = held.subarray(0, compared).equals(token.subarray(0, compared));
    const length = token.length + READY_PID_DIGITS;
    if (isPrefix && held.length < length) {
      this.#held = held;
      return;
    }
    this.#token = null;
    this.#held = Buffer.alloc(0);
    let rest = held;
    if (isPrefix) {
      const digits = held.subarray(token.length, length).toString('latin1');
      if (/^\d+$/.test(digits)) {
        this.nsPid = Number(digits);
        rest = held.subarray(length);
      } else rest = held.subarray(token.length);
    }
    this.#markSeen();
    if (rest.length > 0) this.#onData('stdout', rest);
  }

  /** At the end of the stream: what was held back as a possible token was output after all. */
  flush(): void {
    this.#token = null;
    if (this.#held.length > 0) this.#onData('stdout', this.#held);
    this.#held = Buffer.alloc(0);
  }
}
