/**
 * A command run on an SSH host, as the connection gives it to its callers: how it ended, what it
 * is fed and where its output goes, and a started one's handle. The same whether the command
 * went through the connection's command runner or a channel of its own (`connection.ts`).
 */

export interface RemoteExit {
  /** Null when the command ended by a signal, or the server said nothing of its end. */
  code: number | null;
  /** `SIGKILL` and so on, when a signal ended it. */
  signal: string | null;
}

export interface RemoteExecOptions {
  stdin?: Buffer | NodeJS.ReadableStream;
  onStdout?: (chunk: Buffer) => void;
  onStderr?: (chunk: Buffer) => void;
  /**
   * Aborting closes the command: through the runner its process group is SIGKILLed; on a channel
   * of its own the channel is closed (OpenSSH hangs up on it).
   */
  signal?: AbortSignal;
  /**
   * `start` only: the command runs on a channel of its own (never the command runner), with a
   * terminal of this size and `TERM` when not null (a pty request), else on plain pipes.
   */
  terminal?: { rows: number; cols: number; term: string } | null;
}

/** A command started with `start`: its stdin, its end, and a way to close it early. */
export interface RemoteProcess {
  /** The channel as a writable stream (to pipe into). */
  stdin: NodeJS.WritableStream;
  write(data: string | Buffer): void;
  /** Ends stdin (after `data`, when given). */
  end(data?: Buffer): void;
  /** Closes it early (through the runner: SIGKILL to its process group; else the channel closes). */
  close(): void;
  /** Resizes its terminal (a window-change request); only a command started with a `terminal` has it. */
  resize?(rows: number, cols: number): void;
  /**
   * Stops and restarts reading its stdout (the server stops sending while the window is full;
   * through the runner, at most the rest of the command's 1 MiB output window still arrives).
   */
  pause(): void;
  resume(): void;
  done: Promise<RemoteExit>;
}
