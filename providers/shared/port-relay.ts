/**
 * The daemon's half of a sandbox's declared ports: the static relay (`relay-helper/gym-relay.c`)
 * runs in the sandbox in connect mode over one long-lived channel (an exec with its stdin and
 * stdout carried apart, as for gateway reach), and each connection the daemon opens here is
 * connected by the relay to 127.0.0.1:PORT inside the sandbox. The same frames as the gateway
 * relay (`gateway-relay.ts`), the other way round. So:
 *
 * - every provider that can run a command with streamed stdin reaches a port the same way, and
 *   a sandbox whose network is `none` stays without network (nothing listens outside it);
 * - only that sandbox's loopback: the relay can name a port, never a host;
 * - the channel's other end is in the sandbox (the agent may replace the relay or write into its
 *   stdout), so what comes back is held to the protocol: a frame longer than 32 KiB, an open or a
 *   second ready frame, an unknown type close the channel; bytes for a connection the caller does
 *   not read pause the channel rather than pile up here;
 * - released by `close()`; a daemon killed with -9 drops the channel, the relay's stdin ends and
 *   it exits.
 */
import { Duplex, PassThrough } from 'node:stream';
import { GymError } from '../../core/errors.ts';
import {
  relayFrame as frame,
  type OpenRelayChannel,
  type RelayChannel,
  untilRelayReady,
} from './gateway-relay.ts';

const HEADER = 9;
const CHUNK = 32_768;
/** Connections one sandbox's relay carries at once; the relay itself holds at most 64. */
export const MAX_PORT_CONNECTIONS = 64;

/** One connection to a port in the sandbox, as a stream (what `http.request` takes as its socket). */
class PortConnection extends Duplex {
  readonly #relay: PortRelay;
  readonly id: number;
  #isPaused = false;

  constructor(relay: PortRelay, id: number) {
    super({ allowHalfOpen: true });
    this.#relay = relay;
    this.id = id;
    // A relay that closes under a connection nobody listens to any more must not crash the daemon;
    // whoever listens still hears the error.
    this.on('error', () => {});
  }

  /** Bytes from the sandbox; false when the caller reads no more (the channel pauses). */
  deliver(payload: Buffer): void {
    if (!this.push(payload)) {
      this.#isPaused = true;
      this.#relay.blocked(this, true);
    }
  }

  override _read(): void {
    if (!this.#isPaused) return;
    this.#isPaused = false;
    this.#relay.blocked(this, false);
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.#relay.send('D', this.id, chunk, callback);
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.#relay.send('E', this.id, Buffer.alloc(0), callback);
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.#relay.forget(this);
    callback(error);
  }

  // Socket-like no-ops that `http` calls on its connection.
  setNoDelay(): this {
    return this;
  }
  setKeepAlive(): this {
    return this;
  }
  setTimeout(): this {
    return this;
  }
  ref(): this {
    return this;
  }
  unref(): this {
    return this;
  }
}

/** One sandbox's port relay: the channel and the connections it carries. */
export class PortRelay {
  readonly #input = new PassThrough();
  readonly #connections = new Map<number, PortConnection>();
  readonly #blocked = new Set<PortConnection>();
  #channel: RelayChannel | undefined;
  #nextId = 1;
  #isOpen = true;
  #broken: string | null = null;
  #onReady: (() => void) | undefined;
  #onBroken: ((error: Error) => void) | undefined;
  readonly #chunks: Buffer[] = [];
  #pendingBytes = 0;

  private constructor() {}

  /**
   * Starts the relay in connect mode through `open` and resolves once it says it is ready.
   * `where` names the sandbox in errors.
   * @throws GymError `PROVIDER_ERROR` when it never becomes ready or breaks the protocol.
   */
  static async start(
    open: OpenRelayChannel,
    where: { label: string; details: Record<string, unknown> },
  ): Promise<PortRelay> {
    const relay = new PortRelay();
    const ready = new Promise<Error | null>((resolve) => {
      relay.#onReady = () => resolve(null);
      relay.#onBroken = resolve;
    });
    relay.#channel = await open({ stdin: relay.#input, onStdout: (chunk) => relay.#receive(chunk) });
    const channel = relay.#channel;
    await untilRelayReady({
      name: 'port relay',
      where,
      ready: [ready],
      done: channel.done,
      readyWords: { before: 'was ready', late: 'was not ready' },
      abandon: () => relay.close(),
    });
    relay.#onBroken = undefined;
    channel.done.then(() => relay.close());
    return relay;
  }

  get isOpen(): boolean {
    return this.#isOpen;
  }

  get connections(): number {
    return this.#connections.size;
  }

  /**
   * A new connection to 127.0.0.1:`port` in the sandbox. Nothing listening there shows as the
   * stream's error (`ECONNREFUSED`).
   * @throws GymError `PROVIDER_ERROR` when the relay is closed, `CAPACITY_EXCEEDED` when it
   *   carries {@link MAX_PORT_CONNECTIONS} already.
   */
  connect(port: number): Duplex {
    if (!this.#isOpen) throw new GymError('PROVIDER_ERROR', 'the port relay is closed');
    if (this.#connections.size >= MAX_PORT_CONNECTIONS)
      throw new GymError(
        'CAPACITY_EXCEEDED',
        `the sandbox's port relay carries ${MAX_PORT_CONNECTIONS} connections already`,
      );
    const id = this.#nextId++;
    const connection = new PortConnection(this, id);
    this.#connections.set(id, connection);
    const payload = Buffer.alloc(2);
    payload.writeUInt16BE(port, 0);
    this.send('O', id, payload, () => {});
    return connection;
  }

  /** Sends a frame (payloads split into CHUNK-byte frames); `callback` once the relay's stdin takes more. */
  send(type: string, id: number, payload: Buffer, callback: (error?: Error | null) => void): void {
    if (!this.#isOpen || this.#input.writableEnded) {
      callback(new Error('the port relay is closed'));
      return;
    }
    let isBelowMark = true;
    if (type === 'D') {
      for (let offset = 0; offset < payload.length; offset += CHUNK)
        isBelowMark = this.#input.write(frame('D', id, payload.subarray(offset, offset + CHUNK)));
    } else {
      isBelowMark = this.#input.write(frame(type, id, payload));
    }
    if (isBelowMark) callback();
    else this.#input.once('drain', () => callback());
  }

  /** A connection whose reader takes no more pauses the whole channel until it reads again. */
  blocked(connection: PortConnection, isBlocked: boolean): void {
    if (isBlocked) {
      this.#blocked.add(connection);
      if (this.#blocked.size === 1) this.#channel?.pause();
    } else if (this.#blocked.delete(connection) && this.#blocked.size === 0) {
      this.#channel?.resume();
    }
  }

  forget(connection: PortConnection): void {
    if (this.#connections.get(connection.id) !== connection) return;
    this.#connections.delete(connection.id);
    this.blocked(connection, false);
    // The relay's side goes too; ids are never reused, so a late frame for it is dropped.
    if (this.#isOpen && !this.#input.writableEnded) this.#input.write(frame('X', connection.id));
  }

  /** Drops the channel and every connection (the relay exits when its stdin ends). */
  close(): void {
    if (!this.#isOpen) return;
    this.#isOpen = false;
    this.#input.end();
    this.#channel?.abandon();
    const connections = [...this.#connections.values()];
    this.#connections.clear();
    for (const connection of connections) connection.destroy(new Error('the port relay closed'));
  }

  #breakProtocol(reason: string): void {
    if (this.#broken !== null) return;
    this.#broken = reason;
    this.#chunks.length = 0;
    this.#onBroken?.(new Error(`the relay broke the protocol: ${reason}`));
    this.close();
  }

  #receive(chunk: Buffer): void {
    if (this.#broken !== null || chunk.length === 0) return;
    this.#chunks.push(chunk);
    this.#pendingBytes += chunk.length;
    while (this.#broken === null && this.#pendingBytes >= HEADER) {
      const head = this.#chunks[0] as Buffer;
      const header = head.length >= HEADER ? head : Buffer.concat(this.#chunks.slice(0, HEADER));
      const length = header.readUInt32BE(5);
      if (length > CHUNK) {
        this.#breakProtocol(`a frame of ${length} bytes (at most ${CHUNK})`);
        return;
      }
      if (this.#pendingBytes < HEADER + length) return;
      const whole = this.#take(HEADER + length);
      this.#handle(whole.toString('latin1', 0, 1), whole.readUInt32BE(1), whole.subarray(HEADER));
    }
  }

  #take(count: number): Buffer {
    const out = Buffer.allocUnsafe(count);
    let filled = 0;
    while (filled < count) {
      const first = this.#chunks[0] as Buffer;
      const used = Math.min(first.length, count - filled);
      first.copy(out, filled, 0, used);
      filled += used;
      if (used === first.length) this.#chunks.shift();
      else this.#chunks[0] = first.subarray(used);
    }
    this.#pendingBytes -= count;
    return out;
  }

  #handle(type: string, id: number, payload: Buffer): void {
    if (type === 'R') {
      if (this.#onReady === undefined) {
        this.#breakProtocol('a second ready frame');
        return;
      }
      // A relay built before connect mode listens instead, and says on which port.
      if (payload.length !== 2 || payload.readUInt16BE(0) !== 0) {
        this.#breakProtocol(
          'it listens instead of connecting (a relay older than connect mode: run scripts/setup.sh)',
        );
        return;
      }
      this.#onReady();
      this.#onReady = undefined;
      return;
    }
    if (this.#onReady !== undefined) {
      this.#breakProtocol(`a '${type}' frame before the ready frame`);
      return;
    }
    if (type !== 'D' && type !== 'E' && type !== 'X') {
      this.#breakProtocol(`a frame of type ${JSON.stringify(type)}, which the relay never sends here`);
      return;
    }
    // An id not open (any more) is a frame that crossed our 'X': dropped.
    const connection = this.#connections.get(id);
    if (connection === undefined) return;
    if (type === 'D') connection.deliver(payload);
    else if (type === 'E') connection.push(null);
    else {
      this.#connections.delete(id);
      this.blocked(connection, false);
      const refused = Object.assign(new Error('nothing accepts connections on that port in the sandbox'), {
        code: 'ECONNREFUSED',
      });
      connection.destroy(refused);
    }
  }
}
