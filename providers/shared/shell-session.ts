/**
 * The session shell protocol: one long-lived `sh` in a sandbox runs command after command, so a
 * command skips the cost of a new exec channel (about 50 ms on Docker) and costs well under a
 * millisecond. It needs only a channel that carries the shell's stdin, stdout and stderr apart
 * (`docker exec`, `kubectl exec`, an SSH channel): each backend brings the channel and how a
 * timed-out command is killed; framing, markers, parsing and the rules below are here.
 *
 * Each command runs in a subshell (`( ... )`), so it sees exactly what a one-shot exec would:
 * its own env and cwd, stdin from the request (or /dev/null, never the session's own input), and
 * nothing it does (`exit`, `cd`, `export`) changes the session. After it the shell prints a
 * random end marker with the exit code on stdout, and the marker on stderr; output is everything
 * before the markers, so it is exact to the byte, trailing newline or not.
 */

import { createId, pooledRandomBytes } from '../../core/ids.ts';
import type { ExecRequest, ExecResult } from '../../core/schemas/exec.ts';
import type { ExecOptions } from '../sandbox-provider.ts';
import { type AbnormalEnd, abnormalEndResult, type ExecHooks } from './abnormal-end.ts';
import { ExecOutput, SIGKILL_EXIT_CODE, stdinBytes } from './exec-output.ts';
import { EXEC_ID_ENV, KILL_FAILED_NOTE, KILL_FAILED_REASON, type KillOutcome } from './kill-script.ts';
import { printfFormatFor, shellJoin, shellQuote } from './shell.ts';

/** After a kill of tagged processes, how long the session may take to print its markers before it is dropped. */
export const SESSION_KILL_GRACE_MS = 5_000;

/** Finds a marker in a byte stream split into arbitrary chunks, passing through what comes before it. */
export class MarkerScanner {
  readonly #marker: Buffer;
  readonly #onData: (chunk: Buffer) => void;
  #pending: Buffer = Buffer.alloc(0);
  #after: Buffer | null = null;

  constructor(marker: Buffer, onData: (chunk: Buffer) => void) {
    this.#marker = marker;
    this.#onData = onData;
  }

  /** The bytes after the marker up to (not including) a newline, once they have all arrived. */
  get trailer(): string | null {
    if (this.#after === null) return null;
    const newline = this.#after.indexOf(0x0a);
    return newline === -1 ? null : this.#after.subarray(0, newline).toString('utf8');
  }

  push(chunk: Buffer): void {
    if (this.#after !== null) {
      this.#after = Buffer.concat([this.#after, chunk]);
      return;
    }
    const buffer = this.#pending.length === 0 ? chunk : Buffer.concat([this.#pending, chunk]);
    const index = buffer.indexOf(this.#marker);
    if (index !== -1) {
      this.#onData(buffer.subarray(0, index));
      this.#after = Buffer.from(buffer.subarray(index + this.#marker.length));
      this.#pending = Buffer.alloc(0);
      return;
    }
    // Hold back only an end that may be the start of a marker split across chunks: the rest is
    // output now (a command killed before its marker keeps all it printed, see `flush`).
    const keep = this.#markerStartAtEnd(buffer);
    this.#onData(buffer.subarray(0, buffer.length - keep));
    this.#pending = Buffer.from(buffer.subarray(buffer.length - keep));
  }

  /** The length of the longest end of `buffer` that begins the marker (0 when none does). */
  #markerStartAtEnd(buffer: Buffer): number {
    for (let length = Math.min(buffer.length, this.#marker.length - 1); length > 0; length -= 1) {
      if (buffer.subarray(buffer.length - length).equals(this.#marker.subarray(0, length))) return length;
    }
    return 0;
  }

  /** No marker will come (the stream ended): what was held back as a possible one is output. */
  flush(): void {
    if (this.#after === null && this.#pending.length > 0) this.#onData(this.#pending);
    this.#pending = Buffer.alloc(0);
  }
}

/** The text the session shell reads for one command: the subshell, then the two end markers. */
export function sessionScript(
  request: ExecRequest,
  execId: string,
  marker: string,
  input: Buffer | null,
): string {
  const assignments = [
    `${EXEC_ID_ENV}=${execId}`,
    ...Object.entries(request.env).map(([k, v]) => `${k}=${shellQuote(v)}`),
  ];
  const changeDirectory = request.cwd === undefined ? '' : `cd ${shellQuote(request.cwd)} || exit 126; `;
  const target = request.argv ? shellJoin(request.argv) : `sh -c ${shellQuote(request.command!)}`;
  const body = `( export ${assignments.join(' ')}; ${changeDirectory}exec ${target} )`;
  const withInput = input === null ? `${body} </dev/null` : `printf ${printfFormatFor(input)} | ${body}`;
  return `${withInput}\n__gym_rc=$?; printf '%s%s\\n' '${marker}' "$__gym_rc"; printf '%s\\n' '${marker}' >&2\n`;
}

/** The shell's stdin, as the backend's channel carries it. */
export interface ShellChannel {
  write(text: string): void;
  /** Tears the channel down; the shell goes with it (or is killed by the backend). */
  close(): void;
}

/**
 * How a timed-out (or cancelled) command is killed.
 *
 * - `whole-session`: the backend kills the shell and all it ever started (Docker: the session's
 *   own cgroup), then calls `drop` to close the channel; the result waits for the kill, so
 *   nothing the command started runs on after it. After a command that ended normally,
 *   `releaseBackground` lets go of what it left running, so a later kill spares it, as it would
 *   a one-shot exec's jobs.
 * - `tagged`: the backend kills the processes tagged with the command's exec id (the kill script,
 *   `tagged-only`: the shell shares their session and must live); the result waits for the
 *   script. When the markers do not come within `SESSION_KILL_GRACE_MS` after it, the shell is
 *   wedged (or taken over) and the session is dropped. When the script did not take effect the
 *   backend killed the whole sandbox (`sandbox_killed`, see `kill-script.ts`): the session is
 *   dropped and the result says the command lost its sandbox (`sandboxLost`).
 */
export type SessionKill =
  | {
      kind: 'whole-session';
      /** Resolves with how: `sandbox_killed` when the backend had to kill the whole sandbox instead. */
      kill(drop: () => void): Promise<KillOutcome>;
      releaseBackground(): Promise<void>;
    }
  | { kind: 'tagged'; kill(execId: string, user: string | undefined): Promise<KillOutcome> };

interface RunningCommand {
  stdout: MarkerScanner;
  stderr: MarkerScanner;
  settle: (outcome: 'done' | 'lost') => void;
}

/** One session shell over one channel. The backend feeds it the shell's output with `receive`. */
export class ShellSession {
  readonly #channel: ShellChannel;
  readonly #user: string | undefined;
  readonly #kill: SessionKill;
  readonly #graceMs: number;
  #running: RunningCommand | null = null;
  #queue: Promise<unknown> = Promise.resolve();
  #isAlive = true;
  /** Whether a command has run to its end marker: before one has, the shell may never have started. */
  #hasRun = false;
  /** How the shell's process exited, when the backend said. */
  #exitCode: number | undefined;

  constructor(
    channel: ShellChannel,
    options: { user: string | undefined; kill: SessionKill; killGraceMs?: number },
  ) {
    this.#channel = channel;
    this.#user = options.user;
    this.#kill = options.kill;
    this.#graceMs = options.killGraceMs ?? SESSION_KILL_GRACE_MS;
  }

  /** Output of the shell; output with no command running (a straggling background job) belongs to no one. */
  receive(stream: 'stdout' | 'stderr', payload: Buffer): void {
    const running = this.#running;
    if (running === null) return;
    running[stream].push(payload);
    if (running.stdout.trailer !== null && running.stderr.trailer !== null) running.settle('done');
  }

  /**
   * The channel ended or broke: the running command, and every later one, is lost. `exitCode`:
   * how the shell's process exited, when the backend knows.
   */
  channelLost(exitCode?: number): void {
    this.#isAlive = false;
    if (exitCode !== undefined) this.#exitCode = exitCode;
    this.#running?.settle('lost');
  }

  get isAlive(): boolean {
    return this.#isAlive;
  }

  /** Runs one command; commands on one session run one after another. */
  run(request: ExecRequest, options: ExecOptions, hooks: ExecHooks): Promise<ExecResult> {
    const result = this.#queue.then(() => this.#runNow(request, options, hooks));
    this.#queue = result.catch(() => {});
    return result;
  }

  close(): void {
    this.#isAlive = false;
    this.#channel.close();
  }

  /**
   * Kills the command (with `whole-session`, every process of the session, the shell too).
   * Resolves when the kill itself has finished, with how; the result waits for that.
   */
  #killCommand(execId: string, user: string | undefined, running: RunningCommand): Promise<KillOutcome> {
    const kill = this.#kill;
    if (kill.kind === 'whole-session') return kill.kill(() => this.close());
    // The backend escalates itself when the script did not take effect; it throws only when
    // even that failed (the backend does not answer), and the command's result is that error.
    const killing = kill.kill(execId, user);
    killing
      .then(
        (outcome) => outcome,
        () => 'sandbox_killed' as const,
      )
      .then((outcome) => {
        if (outcome === 'sandbox_killed' && this.#running === running) {
          this.close();
          running.settle('lost');
        }
        return new Promise((resolve) => setTimeout(resolve, this.#graceMs).unref());
      })
      .then(() => {
        // The markers never came: the shell is wedged (or taken over). Drop it; the next call
        // opens a new one.
        if (this.#running === running) {
          this.close();
          running.settle('lost');
        }
      });
    return killing;
  }

  /**
   * A lost session is the sandbox's end when the sandbox died (taken away, or of what ran in it),
   * else `killed` (the shell itself died).
   */
  async #lostCause(hooks: ExecHooks): Promise<AbnormalEnd> {
    const end = await hooks.classifyAbnormalEnd();
    return end === 'sandbox_gone' || typeof end === 'object' ? end : 'killed';
  }

  async #runNow(request: ExecRequest, options: ExecOptions, hooks: ExecHooks): Promise<ExecResult> {
    const output = new ExecOutput(request, options);
    // Cancelled while it waited its turn: it never starts.
    if (options.signal?.aborted) return output.result('killed', null);
    if (!this.#isAlive) return abnormalEndResult(output, await this.#lostCause(hooks), null);
    const execId = createId('exec');
    const marker = `__gym_end_${pooledRandomBytes(12).toString('hex')}__`;
    const markerBytes = Buffer.from(marker);
    let settle!: (outcome: 'done' | 'lost') => void;
    const finished = new Promise<'done' | 'lost'>((resolve) => {
      settle = resolve;
    });
    const running: RunningCommand = {
      stdout: new MarkerScanner(markerBytes, (chunk) => output.push('stdout', chunk)),
      stderr: new MarkerScanner(markerBytes, (chunk) => output.push('stderr', chunk)),
      settle,
    };
    this.#running = running;
    this.#channel.write(sessionScript(request, execId, marker, stdinBytes(request)));

    let killing: Promise<KillOutcome> | undefined;
    let isCancelled = false;
    const kill = () => {
      killing ??= this.#killCommand(execId, request.user ?? this.#user, running);
    };
    const timer = setTimeout(kill, request.timeoutMs);
    // A caller that gives up (a streaming client that went away) cancels exactly as a timeout would.
    const cancel = () => {
      isCancelled = true;
      kill();
    };
    options.signal?.addEventListener('abort', cancel, { once: true });
    const outcome = await finished;
    clearTimeout(timer);
    options.signal?.removeEventListener('abort', cancel);
    this.#running = null;
    // No marker is coming for a command killed or lost: what was held back as one is its output.
    if (killing !== undefined || outcome === 'lost') {
      running.stdout.flush();
      running.stderr.flush();
    }

    if (killing !== undefined) {
      // The result says "timeout" only once the kill has finished: nothing it reached runs on.
      if ((await killing) === 'sandbox_killed') {
        output.push('stderr', KILL_FAILED_NOTE);
        return output.lost(isCancelled ? 'killed' : 'timeout', KILL_FAILED_REASON);
      }
      return output.result(isCancelled ? 'killed' : 'timeout', null);
    }
    if (this.#kill.kind === 'whole-session' && outcome === 'done') await this.#kill.releaseBackground();
    if (outcome === 'lost' && !this.#hasRun && (this.#exitCode === 126 || this.#exitCode === 127)) {
      // The shell never started (its wrapper could not become the user, say): a command that
      // cannot start, as a shell says it (126, 127), with the wrapper's message.
      output.push(
        'stderr',
        Buffer.from(
          `\n[gym: the session's shell could not start (exit ${this.#exitCode}): its user or working directory is missing or not usable]\n`,
        ),
      );
      return output.result('ok', this.#exitCode);
    }
    if (outcome === 'lost') {
      // The OOM killer may have ended the shell with the command (a Kubernetes container killed
      // whole under `memory.oom.group`): that is the command's `oom`.
      return abnormalEndResult(output, await hooks.classifyAbnormalEnd(), null);
    }
    this.#hasRun = true;
    const exitCode = Number.parseInt(running.stdout.trailer ?? '', 10);
    if (!Number.isInteger(exitCode)) return output.result('killed', null);
    if (exitCode === SIGKILL_EXIT_CODE) {
      return abnormalEndResult(output, await hooks.classifyAbnormalEnd(), exitCode);
    }
    return output.result('ok', exitCode);
  }
}
