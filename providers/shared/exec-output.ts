import type { ExecRequest, ExecResult, ExecStatus } from '../../core/schemas/exec.ts';
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
