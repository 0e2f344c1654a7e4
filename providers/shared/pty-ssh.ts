/**
 * A terminal over SSH, for the providers that enter their sandboxes over SSH (Apptainer, Enroot,
 * the SSH runtimes): the command was started on a channel of its own with a pty request around
 * the provider's entry into the container, so the program inside has the channel's terminal as
 * its own. Resize is the channel's window-change request; the end is the channel's exit status (a
 * signal's end reported as 128 + its number, as a shell would).
 */
import { constants } from 'node:os';
import type { PtyChannel, PtyEnd } from './pty-channel.ts';

/** What the adapter needs of a started remote command (`providers/ssh/remote-process.ts`). */
export interface RemoteTerminal {
  write(data: Buffer): void;
  close(): void;
  resize?(rows: number, cols: number): void;
  done: Promise<{ code: number | null; signal: string | null }>;
}

export function sshPtyChannel(
  remote: RemoteTerminal,
  options: { tty: boolean; isGone: () => Promise<boolean> },
): PtyChannel {
  const ended = remote.done.then(
    async (exit): Promise<PtyEnd> => {
      if (exit.code !== null) return { exitCode: exit.code };
      const number = exit.signal === null ? undefined : constants.signals[exit.signal as NodeJS.Signals];
      if (number !== undefined) return { exitCode: 128 + number };
      return (await options.isGone().catch(() => true))
        ? { exitCode: null, lost: 'the sandbox is gone' }
        : { exitCode: null, lost: 'the host did not say how the program ended' };
    },
    (error: unknown): PtyEnd => ({ exitCode: null, lost: `the connection failed: ${String(error)}` }),
  );
  return {
    write: (data) => remote.write(data),
    resize: async (rows, cols) => {
      if (options.tty) remote.resize?.(rows, cols);
    },
    ended,
    close: () => remote.close(),
  };
}
