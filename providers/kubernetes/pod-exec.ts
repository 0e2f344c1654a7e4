/**
 * One command in a Pod over pods/exec (the WebSocket channel protocol), through client-node's
 * `Exec`, wrapped so that the call ends when the command ends.
 *
 * client-node's `exec()` resolves when the socket opens, reports the exit status only through a
 * callback (channel 3, a `Status`), and says nothing when the socket closes without one (a Pod
 * deleted mid-command, a dropped connection). Here the socket's own close settles the call too,
 * as "ended without a status". Ending stdin is only safe on `v5.channel.k8s.io`, where its end is
 * a CLOSE signal; on v4 (Kubernetes before 1.30) it closes the whole socket and loses the status.
 * So a caller either never ends stdin (`keepStdinOpen`: a session, a relay, or a command that
 * reads a known number of bytes, `head -c N | ...`), which works on both, or needs v5: such a
 * command refuses to run on a server that negotiates v4.
 *
 * client-node reads stdin as fast as it comes and queues it on the WebSocket, which never says
 * no: a command that stops reading its stdin (an agent can stop the gateway relay) would have
 * the daemon queue without end. So stdin is read only while the socket holds less than
 * `MAX_STDIN_QUEUED_BYTES` unsent; above it the stream feeding stdin fills and its writer waits.
 */
import { PassThrough, Readable, type Writable } from 'node:stream';
import type { KubeConfig, V1Status } from '@kubernetes/client-node';
import WebSocket from 'ws';
import { GymError } from '../../core/errors.ts';

/** The target of an exec. */
export interface PodTarget {
  namespace: string;
  pod: string;
  container: string;
}

/** How a command ended. */
export type PodExecEnd =
  /** The server sent a status: the command ran and exited with this code. */
  | { kind: 'exited'; exitCode: number }
  /** The server sent a failure without an exit code (the runtime could not run it), or none at all. */
  | { kind: 'broken'; reason: string };

export interface PodExecIo {
  onStdout?: (chunk: Buffer) => void;
  onStderr?: (chunk: Buffer) => void;
  /** Bytes for stdin, ended after them; null: no stdin (the command reads end-of-file). */
  stdin?: Buffer | Readable | null;
  /**
   * Never end the command's stdin (its end is not forwarded): the command stops reading by
   * itself, or lives until the stream is dropped. Works on v4 as on v5.
   */
  keepStdinOpen?: boolean;
}

export interface RunningPodExec {
  /** Settles when the command ended, or its stream did. Never rejects. */
  done: Promise<PodExecEnd>;
  /** The negotiated subprotocol. */
  protocol: string;
  /** Drops the stream (the command may live on in the Pod: kill it first). */
  abandon(): void;
  /**
   * Stops reading the stream (backpressure: the server, and then the command's stdout, fill up);
   * `onStdout` may still see the few messages already received.
   */
  pause(): void;
  /** Reads the stream again after `pause()`. */
  resume(): void;
}

/** The exec could not even open: the HTTP status the server answered the upgrade with, if any. */
export class PodExecRefused extends Error {
  readonly httpStatus: number | null;

  constructor(message: string, httpStatus: number | null) {
    super(message);
    this.httpStatus = httpStatus;
  }
}

/** The exit code in a v4+ status: 0 on Success, the `ExitCode` cause on NonZeroExitCode. */
export function exitCodeOf(status: V1Status): number | null {
  if (status.status === 'Success') return 0;
  const cause = status.details?.causes?.find((each) => each.reason === 'ExitCode');
  const code = cause?.message === undefined ? Number.NaN : Number.parseInt(cause.message, 10);
  return Number.isInteger(code) ? code : null;
}

/** Bytes of stdin the exec's socket may hold unsent before stdin is no longer read. */
export const MAX_STDIN_QUEUED_BYTES = 1024 * 1024;
/** How often a paused stdin looks whether the socket has sent enough to take more. */
const STDIN_POLL_MS = 10;
/** How long after its status an exec stream is waited for to close, at most. */
const STATUS_CLOSE_GRACE_MS = 2_000;

/**
 * Copies `source` into `target` (what the socket sends) while `queued()` (the socket's unsent
 * bytes) is at most `maxQueued`; above it, `source` is paused until the socket has sent half of
 * that, or `isClosed()`. Ends `target` after `source`, unless `keepOpen`.
 */
export function pumpStdin(
  source: Readable,
  target: Writable,
  queued: () => number,
  isClosed: () => boolean,
  maxQueued = MAX_STDIN_QUEUED_BYTES,
  keepOpen = false,
): void {
  let timer: NodeJS.Timeout | undefined;
  source.on('data', (chunk: Buffer) => {
    target.write(chunk);
    if (timer !== undefined || queued() <= maxQueued) return;
    source.pause();
    timer = setInterval(() => {
      if (!isClosed() && queued() > maxQueued / 2) return;
      clearInterval(timer);
      timer = undefined;
      if (!isClosed()) source.resume();
    }, STDIN_POLL_MS);
  });
  source.on('end', () => {
    if (!keepOpen) target.end();
  });
}

/** The channels of the pods/exec stream protocol (the first byte of each binary frame). */
const [STDIN, STDOUT, STDERR, STATUS, CLOSE] = [0, 1, 2, 3, 255];
/** The subprotocols offered, newest first, as client-node offers them. */
const EXEC_PROTOCOLS = [
  'v5.channel.k8s.io',
  'v4.channel.k8s.io',
  'v3.channel.k8s.io',
  'v2.channel.k8s.io',
  'channel.k8s.io',
];

/** The pods/exec path of a command (never a TTY here: terminals have their own). */
function execPath(target: PodTarget, argv: string[], streams: { stdin: boolean }): string {
  const query = new URLSearchParams({
    stdout: 'true',
    stderr: 'true',
    stdin: String(streams.stdin),
    tty: 'false',
    container: target.container,
  });
  for (const arg of argv) query.append('command', arg);
  return `/api/v1/namespaces/${encodeURIComponent(target.namespace)}/pods/${encodeURIComponent(target.pod)}/exec?${query}`;
}

/**
 * Opens a pods/exec WebSocket with the kubeconfig's server, TLS and credentials (what client-node's
 * handler does), each binary frame handed to `onFrame` by channel; the socket is never closed here
 * on a frame, unlike client-node's, which closed it at the status.
 */
async function openExecSocket(
  kubeConfig: KubeConfig,
  path: string,
  onFrame: (channel: number, data: Buffer) => void,
): Promise<WebSocket> {
  const server = kubeConfig.getCurrentCluster()?.server;
  if (server === undefined) throw new Error('the kubeconfig names no cluster');
  const options: Record<string, unknown> = {};
  await kubeConfig.applyToHTTPSOptions(options);
  const url = `${server.replace(/^http/, 'ws')}${path}`;
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url, EXEC_PROTOCOLS, options);
    socket.on('message', (data: Buffer, isBinary: boolean) => {
      if (isBinary && data.length > 0) onFrame(data[0]!, data.subarray(1));
    });
    socket.once('open', () => resolve(socket));
    socket.once('error', reject);
  });
}

/** Sends what `stdin` gives as channel-0 frames, and its end as v5's CLOSE of channel 0. */
function sendStdin(stdin: Readable, socket: WebSocket): void {
  stdin.on('data', (chunk: Buffer) => socket.send(Buffer.concat([Buffer.from([STDIN]), chunk])));
  stdin.on('end', () => socket.send(Buffer.from([CLOSE, STDIN])));
}

function parseStatus(data: Buffer): V1Status {
  try {
    return JSON.parse(data.toString('utf8')) as V1Status;
  } catch {
    return { status: 'Failure', message: `an unreadable status: ${data.toString('utf8').slice(0, 200)}` };
  }
}

function statusReason(data: Buffer): string {
  const status = parseStatus(data);
  return status.message ?? status.reason ?? 'a failure without an exit code';
}

/** Opens the exec; resolves once the stream is open, with a promise of its end. */
export async function startPodExec(
  kubeConfig: KubeConfig,
  target: PodTarget,
  argv: string[],
  io: PodExecIo = {},
): Promise<RunningPodExec> {
  let settle!: (end: PodExecEnd) => void;
  let ended: PodExecEnd | undefined;
  const done = new Promise<PodExecEnd>((resolve) => {
    settle = resolve;
  });
  // Stdin is sent as it is read and closed (under v5) at its end: the bytes are held back until
  // the protocol is known, so nothing is sent on a v4 socket.
  const stdin = io.stdin === undefined || io.stdin === null ? null : new PassThrough();
  const [onStdout, onStderr] = [io.onStdout, io.onStderr];
  let socket: WebSocket;
  try {
    socket = await openExecSocket(
      kubeConfig,
      execPath(target, argv, { stdin: stdin !== null }),
      (channel, data) => {
        if (channel === STDOUT) onStdout?.(data);
        else if (channel === STDERR) onStderr?.(data);
        else if (channel === STATUS && ended === undefined) {
          const exitCode = exitCodeOf(parseStatus(data));
          ended =
            exitCode === null ? { kind: 'broken', reason: statusReason(data) } : { kind: 'exited', exitCode };
          // The end is told once the server closes the stream (it does right after the status), so
          // output frames it sends after the status are still taken: client-node closed the socket
          // at the status and ended the output there, and once a real cluster's exec ended with
          // exit 0 and 17.5 of its 20 MB of stdout. A server that keeps the stream open is waited
          // for no longer than this.
          setTimeout(() => settle(ended!), STATUS_CLOSE_GRACE_MS).unref();
        }
      },
    );
  } catch (error) {
    const message = (error as { message?: string }).message ?? String(error);
    const status = /Unexpected server response: (\d{3})/.exec(message);
    throw new PodExecRefused(message, status === null ? null : Number(status[1]));
  }
  // The status frame is handled before the close that follows it; a close alone means no status.
  socket.on('close', () =>
    setImmediate(() =>
      settle(ended ?? { kind: 'broken', reason: 'the exec stream closed without a status' }),
    ),
  );
  socket.on('error', () => {});
  const protocol = socket.protocol;
  if (stdin !== null) {
    if (protocol !== 'v5.channel.k8s.io' && io.keepStdinOpen !== true) {
      socket.terminate();
      throw new GymError(
        'PROVIDER_ERROR',
        `the API server negotiated ${protocol || 'an old protocol'}, which cannot close stdin without losing the exit status; stdin needs v5.channel.k8s.io (Kubernetes 1.30 or later)`,
      );
    }
    sendStdin(stdin, socket);
    const source = io.stdin instanceof Readable ? io.stdin : Readable.from([io.stdin as Buffer]);
    pumpStdin(
      source,
      stdin,
      () => socket.bufferedAmount,
      () => socket.readyState !== socket.OPEN,
      MAX_STDIN_QUEUED_BYTES,
      io.keepStdinOpen === true,
    );
  }
  return {
    done,
    protocol,
    abandon: () => socket.terminate(),
    pause: () => socket.pause(),
    resume: () => socket.resume(),
  };
}

/** Runs a command to its end and collects its stdout (bounded by `maxBytes`). */
export async function runPodCommand(
  kubeConfig: KubeConfig,
  target: PodTarget,
  argv: string[],
  options: { stdin?: Buffer | Readable | null; maxBytes?: number; timeoutMs?: number } = {},
): Promise<{ end: PodExecEnd; stdout: Buffer; stderr: string }> {
  const maxBytes = options.maxBytes ?? 1024 * 1024;
  const out: Buffer[] = [];
  let outBytes = 0;
  const err: Buffer[] = [];
  const running = await startPodExec(kubeConfig, target, argv, {
    stdin: options.stdin ?? null,
    onStdout: (chunk) => {
      if (outBytes < maxBytes) out.push(chunk);
      outBytes += chunk.length;
    },
    onStderr: (chunk) => {
      if (err.length < 64) err.push(chunk);
    },
  });
  let timer: NodeJS.Timeout | undefined;
  const end = await Promise.race([
    running.done,
    new Promise<PodExecEnd>((resolve) => {
      timer = setTimeout(() => resolve({ kind: 'broken', reason: 'timed out' }), options.timeoutMs ?? 60_000);
    }),
  ]);
  clearTimeout(timer);
  if (end.kind === 'broken') running.abandon();
  return { end, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString('utf8') };
}
