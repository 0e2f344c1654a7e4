/**
 * The daemon's half of gateway reach through a relay in the sandbox, for any backend that can
 * run a long-lived command with its stdin and stdout carried apart (a pods/exec stream, an SSH
 * channel): the static relay (`relay-helper/gym-relay.c`, built by scripts/setup.sh
 * into `.tools/gym-relay`) listens on the sandbox's loopback and frames every connection over
 * its stdin and stdout; here each connection is joined to the daemon's gateway socket, and to
 * nothing else. So:
 *
 * - only that sandbox: the port is on the sandbox's own loopback, and its other end is this channel;
 * - only the gateway: this side connects to `socketPath` alone, whatever the frames say;
 * - bounded: the agent can write frames into the stream too, so a frame the relay never sends
 *   (longer than 32 KiB, an open of a live id, an unknown type) closes the relay, and a gateway
 *   socket that takes no more pauses the channel instead of buffering it here; the other way, a
 *   channel whose stdin takes no more (the agent stopped the relay, or it stopped reading) pauses
 *   the gateway sockets, so what the gateway answers waits in the gateway, not here, and a relay
 *   that sends on while over 1 MiB is queued for it (forged opens, each owed a refusal) is closed;
 * - released by `close()`; a daemon killed with -9 drops the channel, the relay's stdin ends and
 *   it exits.
 *
 * The relay needs a Linux sandbox of the daemon's CPU architecture (it is a static binary of this host).
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { PassThrough } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { GymError } from '../../core/errors.ts';
import type { RelayStats } from './relay-stats.ts';

/** Where scripts/setup.sh builds the relay, from a checkout or a built package. */
export const DEFAULT_RELAY_HELPER_PATH = ['../../.tools/gym-relay', '../../../.tools/gym-relay']
  .map((relative) => fileURLToPath(new URL(relative, import.meta.url)))
  .reduce((found, candidate) => (existsSync(found) ? found : existsSync(candidate) ? candidate : found));

const HEADER = 9;
const CHUNK = 32_768;
/**
 * Bytes queued for a relay that does not read its stdin, at most. Gateway bytes stop at the
 * stream's high-water mark (the gateway sockets pause), so what passes this is frames the daemon
 * owes the relay for frames it keeps sending (refusals of opens past maxConnections): a real
 * relay holds at most 64 connections, so it can never make that many.
 */
const MAX_QUEUED_FOR_RELAY = 1024 * 1024;
/** How long a relay may take to say it listens. */
const READY_TIMEOUT_MS = 15_000;

/**
 * What the relay's first ready line said, or, when its channel ended first or it stayed silent
 * READY_TIMEOUT_MS, a PROVIDER_ERROR naming the relay and the sandbox (after `abandon`).
 */
export async function untilRelayReady<T>(given: {
  name: string;
  where: { label: string; details: Record<string, unknown> };
  ready: Array<Promise<T | Error>>;
  done: Promise<unknown>;
  /** How the failures say it: "ended before it <before>", "the relay <late> in time". */
  readyWords: { before: string; late: string };
  abandon: () => void;
}): Promise<T> {
  const { name, where, readyWords } = given;
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    ...given.ready,
    given.done.then(
      (end) => new Error(`the relay ended before it ${readyWords.before} (${JSON.stringify(end)})`),
    ),
    new Promise<Error>((resolve) => {
      timer = setTimeout(() => resolve(new Error(`the relay ${readyWords.late} in time`)), READY_TIMEOUT_MS);
    }),
  ]);
  clearTimeout(timer);
  if (outcome instanceof Error) {
    given.abandon();
    throw new GymError('PROVIDER_ERROR', `${name} in ${where.label}: ${outcome.message}`, {
      details: where.details,
    });
  }
  return outcome;
}

/** One frame of the relays' protocol: its type letter, the connection's id, the payload's length, the payload. */
export function relayFrame(type: string, id: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const header = Buffer.alloc(HEADER);
  header.write(type, 0, 'latin1');
  header.writeUInt32BE(id, 1);
  header.writeUInt32BE(payload.length, 5);
  return Buffer.concat([header, payload]);
}

/**
 * The channel a relay runs over, as the backend opens it: the relay's stdout arrives through
 * `onStdout`, reading pauses and resumes (backpressure), `abandon` drops it, `done` settles when
 * it ends. The channel reads `stdin` only as fast as the relay takes it (a pipe into a stream
 * that says when it is full), so a relay that stops reading fills `stdin` and pauses the gateway.
 */
export interface RelayChannel {
  done: Promise<unknown>;
  pause(): void;
  resume(): void;
  abandon(): void;
}

/** Opens the channel that runs the relay, its stdin fed from `stdin`. */
export type OpenRelayChannel = (io: {
  stdin: PassThrough;
  onStdout: (chunk: Buffer) => void;
}) => Promise<RelayChannel>;

/** One sandbox's relay: the channel and the gateway connections it carries. */
export class GatewayRelay {
  readonly port: number;
  readonly #exec: RelayChannel;
  readonly #input: PassThrough;
  readonly #sockets: Map<number, Socket>;
  #isOpen = true;

  private constructor(port: number, exec: RelayChannel, input: PassThrough, sockets: Map<number, Socket>) {
    this.port = port;
    this.#exec = exec;
    this.#input = input;
    this.#sockets = sockets;
    exec.done.then(() => this.close());
  }

  /**
   * Starts the relay through `open` (which runs the relay binary, listening on the port the
   * caller chose) and resolves once it listens. `where` names the sandbox in errors.
   */
  static async start(
    open: OpenRelayChannel,
    where: { label: string; details: Record<string, unknown> },
    socketPath: string,
    maxConnections: number,
    stats: { refusedTotal: number },
  ): Promise<GatewayRelay> {
    const input = new PassThrough();
    const sockets = new Map<number, Socket>();
    let exec: RelayChannel | undefined;
    let relay: GatewayRelay | undefined;
    let listening = false;
    let broken: string | null = null;
    let onReady!: (port: number) => void;
    let onBroken!: (error: Error) => void;
    const ready = new Promise<number>((resolve) => {
      onReady = resolve;
    });
    const brokenBeforeReady = new Promise<Error>((resolve) => {
      onBroken = resolve;
    });
    // The stream's other end is in the sandbox: the agent can write frames into it (as root, or as
    // the relay's user, through /proc/<pid>/fd/1). A frame the relay would never send ends it all.
    const breakProtocol = (reason: string) => {
      if (broken !== null) return;
      broken = reason;
      chunks.length = 0;
      if (relay === undefined) onBroken(new Error(`the relay broke the protocol: ${reason}`));
      else relay.close();
    };
    // Backpressure toward the relay: while its stdin takes no more, no gateway socket is read (what
    // the gateway answers then waits in its own socket); all resume when stdin drains.
    let isInputFull = false;
    const send = (type: string, id: number, payload?: Buffer) => {
      if (input.writableEnded) return;
      const isBelowMark = input.write(relayFrame(type, id, payload));
      // The agent stalled the relay and forges opens into its stdout: each would queue one more
      // refusal here without end.
      if (input.writableLength + input.readableLength > MAX_QUEUED_FOR_RELAY) {
        breakProtocol(`it read none of the ${MAX_QUEUED_FOR_RELAY} bytes queued for it while it sent more`);
        return;
      }
      if (isBelowMark || isInputFull) return;
      isInputFull = true;
      for (const socket of sockets.values()) socket.pause();
      input.once('drain', () => {
        isInputFull = false;
        for (const socket of sockets.values()) socket.resume();
      });
    };
    // Backpressure: while a gateway socket does not take more, the stream is not read (the
    // relay's stdout fills and it stops reading its connections), so nothing piles up here.
    const blocked = new Set<Socket>();
    const unblock = (socket: Socket) => {
      if (blocked.delete(socket) && blocked.size === 0) exec?.resume();
    };
    const block = (socket: Socket) => {
      if (blocked.has(socket)) return;
      blocked.add(socket);
      if (blocked.size === 1) exec?.pause();
      socket.once('drain', () => unblock(socket));
    };
    const handleFrame = (type: string, id: number, payload: Buffer) => {
      if (type === 'R') {
        if (listening || payload.length !== 2) {
          breakProtocol(listening ? 'a second ready frame' : 'a ready frame without a 2-byte port');
          return;
        }
        listening = true;
        onReady(payload.readUInt16BE(0));
        return;
      }
      if (!listening) {
        breakProtocol(`a '${type}' frame before the ready frame`);
        return;
      }
      if (type === 'O') {
        if (sockets.has(id)) {
          // Else each one would open another gateway socket past maxConnections.
          breakProtocol(`an open frame for the live connection ${id}`);
          return;
        }
        if (sockets.size >= maxConnections) {
          stats.refusedTotal += 1;
          send('X', id);
          return;
        }
        // The gateway socket and nothing else, whatever the sandbox sends.
        const socket = connect(socketPath);
        sockets.set(id, socket);
        if (isInputFull) socket.pause();
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
          if (sockets.get(id) === socket) sockets.delete(id);
          unblock(socket);
          if (!ended) send('X', id);
        });
        return;
      }
      if (type !== 'D' && type !== 'E') {
        breakProtocol(`an unknown frame type ${JSON.stringify(type)}`);
        return;
      }
      // An id not open (any more) is a frame that crossed an 'X': dropped.
      const socket = sockets.get(id);
      if (socket === undefined) return;
      if (type === 'E') socket.end();
      else if (!socket.write(payload)) block(socket);
    };
    // The bytes not yet parsed, as the chunks they came in: each byte is copied once.
    const chunks: Buffer[] = [];
    let pendingBytes = 0;
    const take = (count: number): Buffer => {
      const out = Buffer.allocUnsafe(count);
      let filled = 0;
      while (filled < count) {
        const first = chunks[0] as Buffer;
        const used = Math.min(first.length, count - filled);
        first.copy(out, filled, 0, used);
        filled += used;
        if (used === first.length) chunks.shift();
        else chunks[0] = first.subarray(used);
      }
      pendingBytes -= count;
      return out;
    };
    const headerLength = (): number => {
      const first = chunks[0] as Buffer;
      if (first.length >= HEADER) return first.readUInt32BE(5);
      // A header split over chunks: at most HEADER of them, since each holds a byte or more.
      return Buffer.concat(chunks.slice(0, HEADER)).readUInt32BE(5);
    };
    exec = await open({
      stdin: input,
      onStdout: (chunk) => {
        if (broken !== null || (relay !== undefined && !relay.isOpen) || chunk.length === 0) return;
        chunks.push(chunk);
        pendingBytes += chunk.length;
        while (broken === null && pendingBytes >= HEADER) {
          const length = headerLength();
          // The relay sends at most CHUNK bytes a frame; more is refused before it is buffered.
          if (length > CHUNK) {
            breakProtocol(`a frame of ${length} bytes (at most ${CHUNK})`);
            return;
          }
          if (pendingBytes < HEADER + length) break;
          const whole = take(HEADER + length);
          handleFrame(whole.toString('latin1', 0, 1), whole.readUInt32BE(1), whole.subarray(HEADER));
        }
      },
    });
    if (blocked.size > 0) exec.pause();
    const outcome = await untilRelayReady({
      name: 'gateway relay',
      where,
      ready: [ready, brokenBeforeReady],
      done: exec.done,
      readyWords: { before: 'listened', late: 'did not listen' },
      abandon: () => exec.abandon(),
    });
    relay = new GatewayRelay(outcome, exec, input, sockets);
    if (broken !== null) relay.close();
    return relay;
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

export function relayStatsOf(relays: Iterable<GatewayRelay>, refusedTotal: number): RelayStats {
  let listeners = 0;
  let connections = 0;
  for (const relay of relays) {
    if (!relay.isOpen) continue;
    listeners += 1;
    connections += relay.connections;
  }
  return { listeners, connections, refusedTotal };
}
