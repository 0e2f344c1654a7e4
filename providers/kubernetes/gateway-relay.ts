/**
 * Gateway reach for a daemon outside the cluster: a relay carried over one pods/exec stream.
 *
 * The provider copies a small static relay (`relay-helper/gym-relay.c`, built by
 * scripts/setup.sh into `.tools/gym-relay`) into the Pod and runs it as one long-lived exec. It
 * listens on the Pod's loopback and frames every connection over its stdin and stdout; here each
 * connection is joined to the daemon's gateway socket, and to nothing else. So:
 *
 * - only that sandbox: the port is on the Pod's own loopback, and its other end is this exec;
 * - only the gateway: this side connects to `socketPath` alone, whatever the frames say;
 * - released by `close()` (the exec dropped and the relay killed by its tag); a daemon killed
 *   with -9 drops the stream, the relay's stdin ends and it exits.
 *
 * The relay needs a Linux Pod of the daemon's CPU architecture (it is a static binary of this
 * host); `/tmp` must be writable.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { PassThrough } from 'node:stream';
import { fileURLToPath } from 'node:url';
import type { KubeConfig } from '@kubernetes/client-node';
import { GymError } from '../../core/errors.ts';
import type { RelayStats } from '../sandbox-provider.ts';
import { type PodTarget, type RunningPodExec, startPodExec } from './pod-exec.ts';

/** Where scripts/setup.sh builds the relay, from a checkout or a built package. */
export const DEFAULT_RELAY_HELPER_PATH = ['../../.tools/gym-relay', '../../../.tools/gym-relay']
  .map((relative) => fileURLToPath(new URL(relative, import.meta.url)))
  .reduce((found, candidate) => (existsSync(found) ? found : existsSync(candidate) ? candidate : found));

/** Where the relay is copied in the Pod. */
export const RELAY_PATH_IN_POD = '/tmp/.gym-relay';

const HEADER = 9;
const CHUNK = 32_768;
/** How long a relay may take to say it listens. */
const READY_TIMEOUT_MS = 15_000;

function frame(type: string, id: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const header = Buffer.alloc(HEADER);
  header.write(type, 0, 'latin1');
  header.writeUInt32BE(id, 1);
  header.writeUInt32BE(payload.length, 5);
  return Buffer.concat([header, payload]);
}

/** One sandbox's relay: the exec stream and the gateway connections it carries. */
export class PodRelay {
  readonly port: number;
  readonly #exec: RunningPodExec;
  readonly #input: PassThrough;
  readonly #sockets: Map<number, Socket>;
  readonly #stats: { refusedTotal: number };
  #isOpen = true;

  private constructor(
    port: number,
    exec: RunningPodExec,
    input: PassThrough,
    sockets: Map<number, Socket>,
    stats: { refusedTotal: number },
  ) {
    this.port = port;
    this.#exec = exec;
    this.#input = input;
    this.#sockets = sockets;
    this.#stats = stats;
    exec.done.then(() => this.close());
  }

  /**
   * Starts the relay (already copied to `RELAY_PATH_IN_POD`) through `wrapper` (which tags it for
   * the kill script), on `port` (0: any free one), and resolves once it listens.
   */
  static async start(
    kubeConfig: KubeConfig,
    target: PodTarget,
    wrapper: string[],
    port: number,
    socketPath: string,
    maxConnections: number,
    stats: { refusedTotal: number },
  ): Promise<PodRelay> {
    const input = new PassThrough();
    const sockets = new Map<number, Socket>();
    let pending: Buffer = Buffer.alloc(0);
    let onReady!: (port: number) => void;
    const ready = new Promise<number>((resolve) => {
      onReady = resolve;
    });
    const send = (type: string, id: number, payload?: Buffer) => {
      if (!input.writableEnded) input.write(frame(type, id, payload));
    };
    const handleFrame = (type: string, id: number, payload: Buffer) => {
      if (type === 'R') {
        onReady(payload.readUInt16BE(0));
        return;
      }
      if (type === 'O') {
        if (sockets.size >= maxConnections) {
          stats.refusedTotal += 1;
          send('X', id);
          return;
        }
        // The gateway socket and nothing else, whatever the sandbox sends.
        const socket = connect(socketPath);
        sockets.set(id, socket);
        let ended = false;
        socket.on('data', (chunk: Buffer) => {
          for (let offset = 0; offset < chunk.length; offset += CHUNK) {
            send('D', id, chunk.subarray(offset, offset + CHUNK));
          }
        });
        socket.on('end', () => {
          ended = true;
          send('E', id);
        });
        socket.on('error', () => {});
        socket.on('close', () => {
          sockets.delete(id);
          if (!ended) send('X', id);
        });
        return;
      }
      const socket = sockets.get(id);
      if (socket === undefined) return;
      if (type === 'D') socket.write(payload);
      else if (type === 'E') socket.end();
    };
    const exec = await startPodExec(kubeConfig, target, [...wrapper, RELAY_PATH_IN_POD, String(port)], {
      stdin: input,
      onStdout: (chunk) => {
        pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
        let offset = 0;
        while (pending.length - offset >= HEADER) {
          const length = pending.readUInt32BE(offset + 5);
          if (pending.length - offset < HEADER + length) break;
          handleFrame(
            pending.toString('latin1', offset, offset + 1),
            pending.readUInt32BE(offset + 1),
            Buffer.from(pending.subarray(offset + HEADER, offset + HEADER + length)),
          );
          offset += HEADER + length;
        }
        pending = pending.subarray(offset);
      },
    });
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      ready,
      exec.done.then((end) => new Error(`the relay ended before it listened (${JSON.stringify(end)})`)),
      new Promise<Error>((resolve) => {
        timer = setTimeout(() => resolve(new Error('the relay did not listen in time')), READY_TIMEOUT_MS);
      }),
    ]);
    clearTimeout(timer);
    if (outcome instanceof Error) {
      exec.abandon();
      throw new GymError('PROVIDER_ERROR', `gateway relay in ${target.pod}: ${outcome.message}`, {
        details: { pod: target.pod, port },
      });
    }
    return new PodRelay(outcome, exec, input, sockets, stats);
  }

  get isOpen(): boolean {
    return this.#isOpen;
  }

  get connections(): number {
    return this.#sockets.size;
  }

  /** Drops the stream and every connection (the relay exits when its stdin ends). */
  close(): void {
    if (!this.#isOpen) return;
    this.#isOpen = false;
    this.#input.end();
    this.#exec.abandon();
    for (const socket of this.#sockets.values()) socket.destroy();
    this.#sockets.clear();
  }
}

/** Reads the relay binary once; null when scripts/setup.sh has not built it. */
export async function loadRelayBinary(path: string): Promise<Buffer | null> {
  return readFile(path).catch(() => null);
}

export function relayStatsOf(relays: Iterable<PodRelay>, refusedTotal: number): RelayStats {
  let listeners = 0;
  let connections = 0;
  for (const relay of relays) {
    if (!relay.isOpen) continue;
    listeners += 1;
    connections += relay.connections;
  }
  return { listeners, connections, refusedTotal };
}
