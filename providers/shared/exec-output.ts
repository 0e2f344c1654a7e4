import { GymError } from '../../core/errors.ts';
import {
  type ExecRequest,
  type ExecResult,
  type ExecStatus,
  MAX_EXEC_REASON_CHARS,
} from '../../core/schemas/exec.ts';
import type { ExecOptions } from '../sandbox-provider.ts';
import { OutputCapture } from './output-capture.ts';

/** Collects both streams of one command under the request's cap and builds its result. */
export class ExecOutput {
  readonly #stdout: OutputCapture;
  readonly #stderr: OutputCapture;
  readonly #onOutput: ExecOptions['onOutput'];
  readonly #startedMs = performance.now();

  constructor(request: Pick<ExecRequest, 'maxOutputBytes'>, options: ExecOptions = {}) {
    this.#stdout = new OutputCapture(request.maxOutputBytes);
    this.#stderr = new OutputCapture(request.maxOutputBytes);
    this.#onOutput = options.onOutput;
  }

  push(stream: 'stdout' | 'stderr', chunk: Buffer): void {
    if (chunk.length === 0) return;
    (stream === 'stdout' ? this.#stdout : this.#stderr).push(chunk);
    this.#onOutput?.(stream, chunk);
  }

  /**
   * The result of a command whose sandbox did not survive it, by its own doing (see
   * `ExecResult.sandboxLost`): `status` is how the command ended, `reason` why the sandbox died.
   */
  lost(status: SandboxLossStatus, reason: string): ExecResult {
    return markSandboxLost(this.result(status, null), status, reason);
  }

  result(status: ExecStatus, exitCode: number | null): ExecResult {
    return {
      status,
      exitCode,
      stdout: this.#stdout.toString(),
      stderr: this.#stderr.toString(),
      stdoutTruncated: this.#stdout.isTruncated,
      stderrTruncated: this.#stderr.isTruncated,
      stdoutBytes: this.#stdout.totalBytes,
      stderrBytes: this.#stderr.totalBytes,
      durationMs: Math.round((performance.now() - this.#startedMs) * 1000) / 1000,
    };
  }
}

/** How a command ended whose sandbox it ended too. */
export type SandboxLossStatus = 'oom' | 'timeout' | 'killed';

/** `result` as the command's own loss of its sandbox: the output kept, no exit code. */
export function markSandboxLost(result: ExecResult, status: SandboxLossStatus, reason: string): ExecResult {
  return {
    ...result,
    status,
    exitCode: null,
    sandboxLost: true,
    reason:
      reason.length > MAX_EXEC_REASON_CHARS ? `${reason.slice(0, MAX_EXEC_REASON_CHARS - 3)}...` : reason,
  };
}

/**
 * A command the sandbox's contents do not let start (a user its /etc/passwd lacks): a result, as
 * a shell gives one (exit 126 with the message), never an error an evaluation would retry as an
 * infrastructure fault. Thrown where it is found, made a result at the provider's exec.
 */
export class CommandCannotStart extends GymError {
  constructor(message: string) {
    super('VALIDATION_FAILED', message);
  }
}

/** What `run` resolves with, or the result of a command that cannot start when it throws `CommandCannotStart`. */
export async function orCannotStart(run: Promise<ExecResult>): Promise<ExecResult> {
  try {
    return await run;
  } catch (error) {
    if (error instanceof CommandCannotStart) return cannotStartResult(error.message);
    throw error;
  }
}

/** The result of a command that could not start: exit 126 (a shell's "cannot run"), the message on stderr. */
export function cannotStartResult(message: string): ExecResult {
  const text = `${message}\n`;
  return {
    status: 'ok',
    exitCode: 126,
    stdout: '',
    stderr: text,
    stdoutTruncated: false,
    stderrTruncated: false,
    stdoutBytes: 0,
    stderrBytes: Buffer.byteLength(text),
    durationMs: 0,
  };
}

/** Exit code of a process killed by SIGKILL, as shells and container runtimes report it. */
export const SIGKILL_EXIT_CODE = 137;

/** Decodes the request's stdin, or returns null when it has none. */
export function stdinBytes(request: Pick<ExecRequest, 'stdin' | 'stdinEncoding'>): Buffer | null {
  if (request.stdin === undefined) return null;
  return Buffer.from(request.stdin, request.stdinEncoding === 'base64' ? 'base64' : 'utf8');
}

/** Parses the OOM-kill counter out of cgroup v1 `memory.oom_control` or v2 `memory.events`. */
export function parseOomKillCount(text: string): number | null {
  const match = /^oom_kill (\d+)$/m.exec(text);
  return match ? Number(match[1]) : null;
}

/** Prints the container's own OOM-kill counter; works from inside the sandbox on cgroup v1 and v2. */
export const OOM_COUNTER_COMMAND =
  'cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null; true';
