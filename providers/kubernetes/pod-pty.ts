/**
 * A terminal in a Pod: pods/exec with `tty` (the runtime makes the PTY), its stdin kept open for
 * the terminal's keyboard (never ended: under v4 its end would close the socket), and the size on
 * the resize channel (4), which client-node feeds from a "resizable" stdout: a stream with `rows`
 * and `columns` that emits `resize`. The program runs under the same wrapper as every command
 * (`exec.ts`: env, cwd, user, and the tag the daemon signals and kills it by).
 */
import { PassThrough, Writable } from 'node:stream';
import { Exec, type KubeConfig, type V1Status } from '@kubernetes/client-node';
import { EXEC_ID_ENV } from '../shared/kill-script.ts';
import type { PtyChannel, PtyEnd, PtyOpenOptions, PtyOpenRequest } from '../shared/pty-channel.ts';
import { wrapperScript } from './exec.ts';
import { exitCodeOf, PodExecRefused, type PodTarget } from './pod-exec.ts';

/** A stdout sink client-node takes for a terminal: its size, and `resize` when it changes. */
class TerminalSink extends Writable {
  rows: number;
  columns: number;

  constructor(rows: number, columns: number, onChunk: (chunk: Buffer) => void) {
    super({
      write(chunk: Buffer, _encoding, callback) {
        onChunk(chunk);
        callback();
      },
    });
    this.rows = rows;
    this.columns = columns;
  }

  setSize(rows: number, columns: number): void {
    this.rows = rows;
    this.columns = columns;
    this.emit('resize');
  }
}

function sink(onChunk: (chunk: Buffer) => void): Writable {
  return new Writable({
    write(chunk: Buffer, _encoding, callback) {
      onChunk(chunk);
      callback();
    },
  });
}

export async function openPodPty(
  kubeConfig: KubeConfig,
  target: PodTarget,
  request: PtyOpenRequest,
  options: PtyOpenOptions,
): Promise<PtyChannel> {
  const { [EXEC_ID_ENV]: tag = '', ...env } = request.env;
  const argv = [
    'sh',
    '-c',
    wrapperScript(env),
    'gym-pty',
    tag,
    request.cwd ?? '',
    request.user ?? '',
    ...request.argv,
  ];
  const stdout = request.tty
    ? new TerminalSink(request.rows, request.cols, (chunk) => options.onOutput('stdout', chunk))
    : sink((chunk) => options.onOutput('stdout', chunk));
  const stdin = new PassThrough();
  let settle!: (end: PtyEnd) => void;
  const ended = new Promise<PtyEnd>((resolve) => {
    settle = resolve;
  });
  let socket: Awaited<ReturnType<Exec['exec']>>;
  try {
    socket = await new Exec(kubeConfig).exec(
      target.namespace,
      target.pod,
      target.container,
      argv,
      stdout,
      request.tty ? null : sink((chunk) => options.onOutput('stderr', chunk)),
      stdin,
      request.tty,
      (status: V1Status) => {
        const exitCode = exitCodeOf(status);
        settle(
          exitCode === null
            ? { exitCode: null, lost: status.message ?? status.reason ?? 'a failure without an exit code' }
            : { exitCode },
        );
      },
    );
  } catch (error) {
    const message = (error as { message?: string }).message ?? String(error);
    const status = /Unexpected server response: (\d{3})/.exec(message);
    throw new PodExecRefused(message, status === null ? null : Number(status[1]));
  }
  // The status frame comes before the close that follows it; a close alone means no status.
  socket.on('close', () =>
    setImmediate(() => settle({ exitCode: null, lost: 'the exec stream closed without a status' })),
  );
  socket.on('error', () => {});
  return {
    write: (data) => {
      if (socket.readyState === socket.OPEN) stdin.write(data);
    },
    resize: async (rows, cols) => {
      if (stdout instanceof TerminalSink) stdout.setSize(rows, cols);
    },
    ended,
    close: () => socket.terminate(),
  };
}
