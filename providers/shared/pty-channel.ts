/**
 * Terminals (PTY sessions), as a provider opens them and the daemon drives them.
 *
 * A provider's part is the transport only (`SandboxProvider.openPty`): start one program inside
 * the sandbox on a terminal (or on pipes), carry its output and input, resize the terminal, and
 * say when the program ended with its exit code. Docker: an exec with `Tty` and the engine's exec
 * resize; Kubernetes: pods/exec with `tty` and the resize channel; the SSH runtimes: an ssh2
 * channel with a pty request around the provider's exec into the container.
 *
 * Signals and the end of a session are the daemon's part, the same on every provider: the program
 * runs with `GYM_EXEC_ID` set to a tag of its own (as every exec does, see `kill-script.ts`), and
 * the daemon runs {@link ptySignalArgv} (a signal) or the kill script (a close) through the
 * provider's ordinary exec. Closing the transport alone would not do: an engine keeps an exec's
 * process running when its client goes away.
 */
import { EXEC_ID_ENV } from './kill-script.ts';

/** What a provider starts on a terminal. */
export interface PtyOpenRequest {
  /** The program and its arguments (the daemon wraps a command or the shell in `sh -c`). */
  argv: string[];
  /** The whole environment to add, `GYM_EXEC_ID` (the tag) and `TERM` included. */
  env: Record<string, string>;
  cwd?: string;
  /** A user name or uid; absent: the sandbox's user. */
  user?: string;
  rows: number;
  cols: number;
  /** false: no terminal, stdout and stderr on pipes (`rows`/`cols` ignored). */
  tty: boolean;
}

/** How a session's program ended, as its transport saw it. */
export interface PtyEnd {
  /** Its exit code; null when the transport was lost first, or the program died of a signal the transport did not report. */
  exitCode: number | null;
  /** Set when the transport broke before the program ended (the sandbox or its host went away). */
  lost?: string;
}

export interface PtyOpenOptions {
  /** Each chunk of output as it arrives (`stderr` only without a terminal). */
  onOutput(stream: 'stdout' | 'stderr', chunk: Buffer): void;
}

/** One open terminal's transport. */
export interface PtyChannel {
  /** Bytes to the program's standard input (the terminal's keyboard). */
  write(data: Buffer): void;
  /** Sets the terminal's size (the program gets SIGWINCH). A no-op without a terminal. */
  resize(rows: number, cols: number): Promise<void>;
  /** Settles once, after the last output was given to `onOutput`. Never rejects. */
  readonly ended: Promise<PtyEnd>;
  /** Drops the transport (idempotent). The program may live on: the daemon kills it by its tag first. */
  close(): void;
}

/**
 * The shell a session without a command runs: bash when the sandbox has it (what agents expect of
 * a terminal), else the POSIX shell, interactive either way.
 */
export const INTERACTIVE_SHELL_ARGV = [
  'sh',
  '-c',
  'if command -v bash >/dev/null 2>&1; then exec bash -i; fi; exec sh -i',
];

/** The argv of a session: its command under `sh -c` (as NeMo Gym's facade runs it), or the shell. */
export function ptyArgv(command: string | null | undefined): string[] {
  return command === undefined || command === null ? [...INTERACTIVE_SHELL_ARGV] : ['sh', '-c', command];
}

/** The variables every session gets, under what the caller set (the tag always wins). */
export function ptyEnvironment(
  env: Record<string, string>,
  tag: string,
  tty: boolean,
): Record<string, string> {
  return { ...(tty ? { TERM: 'xterm-256color' } : {}), ...env, [EXEC_ID_ENV]: tag };
}

/**
 * Sends a signal to every process of one session: each process whose environment carries the
 * session's tag (the program and all it started, whatever process group a job-control shell put
 * them in). Builtins only, as the kill script (`kill-script.ts`), so an agent that replaced the
 * sandbox's programs changes nothing. Exit 0 when it reached at least one process, 1 when none
 * carried the tag (the program had ended).
 *
 * Arguments: `$1` the tag, `$2` the signal's name without `SIG`.
 */
export const PTY_SIGNAL_SCRIPT = `
id="$1"; sig="$2"; reached=1
for dir in /proc/[0-9]*; do
  pid="\${dir#/proc/}"
  [ "$pid" = "$$" ] && continue
  environment=""; line=""
  { while IFS= read -r line; do environment="$environment $line"; done; } 2>/dev/null < "$dir/environ" || continue
  environment="$environment $line"
  case "$environment" in
    *"GYM_EXEC_ID=$id"*) kill -s "$sig" "$pid" 2>/dev/null && reached=0 ;;
  esac
done
exit $reached
`;

/** The command that sends `signal` (a name without `SIG`) to a session's processes, through any exec. */
export function ptySignalArgv(tag: string, signal: string): string[] {
  return ['sh', '-c', PTY_SIGNAL_SCRIPT, 'gym-pty-signal', tag, signal];
}
