/**
 * Relays a port on a sandbox's loopback to a unix socket of the host (the model gateway), from
 * inside the daemon's own event loop.
 *
 * A helper (`netns-listener.ts`) is started once per forward in the sandbox's network namespace
 * (`nsenter -t <pid> -n`); it listens on 127.0.0.1:<port>, hands the listening socket to the
 * daemon over an IPC channel and exits. From then on no host process exists for the relay: the
 * daemon accepts each connection and pipes it to the unix socket. So:
 *
 * - **Cost**: one listening descriptor per forwarded port while the sandbox lives; per open
 *   connection two sockets (sandbox side, gateway side): measured here about 4 KiB of heap and
 *   9 KiB of RSS when idle (socat took a 2.4 MiB process per connection), and at most the
 *   streams' buffers (64 KiB each way) under backpressure. The helper costs one short-lived Node
 *   process per forward, not per connection: a forward takes 150-200 ms on a busy 2-core host.
 * - **Bound**: at most `maxConnections` open connections per sandbox (over all its ports); one
 *   beyond is accepted and closed at once (counted in `refusedTotal`). A connection with no
 *   traffic either way for `idleTimeoutMs` is closed.
 * - **Crash**: the listening socket lives only in the daemon's descriptor table, so when the
 *   daemon dies (even by kill -9) the kernel closes it and nothing stays on the host.
 */
import { spawn } from 'node:child_process';
import { connect, type Server, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { GymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import type { RelayStats } from '../sandbox-provider.ts';

/** The helper sits beside this module, with the same extension (`.ts` from source, `.js` when built). */
const LISTENER_PATH = fileURLToPath(
  new URL(`./netns-listener${import.meta.url.slice(import.meta.url.lastIndexOf('.'))}`, import.meta.url),
);
/** nsenter, then Node starting the helper: under 200 ms here; beyond this something is wrong. */
const HANDOVER_TIMEOUT_MS = 15_000;

export interface GatewayRelayOptions {
  /** Open connections per sandbox, over all its forwarded ports. */
  maxConnections: number;
  /** A connection with no bytes either way for this long is closed. */
  idleTimeoutMs: number;
  logger: Logger;
}

interface SandboxRelay {
  /** Listening (or about to) per port. */
  listeners: Map<number, Promise<Server>>;
  /** Each open connection, by the function that aborts both of its sockets. */
  connections: Set<() => void>;
  isClosed: boolean;
}

type HelperMessage = { type: 'listening' } | { type: 'error'; code: string | null; message: string };

export class GatewayRelays {
  readonly #options: GatewayRelayOptions;
  readonly #bySandbox = new Map<string, SandboxRelay>();
  #refusedTotal = 0;

  constructor(options: GatewayRelayOptions) {
    this.#options = options;
  }

  /**
   * Listens on 127.0.0.1:`port` in the network namespace of process `pid` (the sandbox's init)
   * and relays each connection to `socketPath`. Idempotent per sandbox and port.
   * @throws GymError `CAPABILITY_UNSUPPORTED` (no nsenter, or not root), `PROVIDER_ERROR` (the
   *   port is taken in the sandbox, or the helper failed).
   */
  async open(sandboxId: string, pid: number, port: number, socketPath: string): Promise<void> {
    let relay = this.#bySandbox.get(sandboxId);
    if (relay === undefined) {
      relay = { listeners: new Map(), connections: new Set(), isClosed: false };
      this.#bySandbox.set(sandboxId, relay);
    }
    const existing = relay.listeners.get(port);
    if (existing !== undefined) {
      await existing;
      return;
    }
    const listening = this.#listenInNamespace(pid, port);
    relay.listeners.set(port, listening);
    let server: Server;
    try {
      server = await listening;
    } catch (error) {
      if (relay.listeners.get(port) === listening) relay.listeners.delete(port);
      throw error;
    }
    const owner = relay;
    // Destroyed while the helper was starting: let go of the socket at once.
    if (owner.isClosed) {
      server.close();
      return;
    }
    // A client may half-close after its request and still read the answer.
    // (Node reads this property of the server for every accepted socket; its types omit it.)
    (server as Server & { allowHalfOpen: boolean }).allowHalfOpen = true;
    server.on('connection', (socket) => this.#accept(owner, socket, socketPath));
    server.on('error', (error) =>
      this.#options.logger.warn({ sandboxId, port, error: error.message }, 'gateway relay listener failed'),
    );
  }

  /** Stops listening and closes every connection of the sandbox. Idempotent. */
  close(sandboxId: string): void {
    const relay = this.#bySandbox.get(sandboxId);
    if (relay === undefined) return;
    this.#bySandbox.delete(sandboxId);
    relay.isClosed = true;
    for (const listening of relay.listeners.values())
      listening.then((server) => server.close()).catch(() => {});
    for (const abort of relay.connections) abort();
    relay.connections.clear();
  }

  closeAll(): void {
    for (const sandboxId of [...this.#bySandbox.keys()]) this.close(sandboxId);
  }

  stats(): RelayStats {
    let listeners = 0;
    let connections = 0;
    for (const relay of this.#bySandbox.values()) {
      listeners += relay.listeners.size;
      connections += relay.connections.size;
    }
    return { listeners, connections, refusedTotal: this.#refusedTotal };
  }

  #accept(relay: SandboxRelay, inbound: Socket, socketPath: string): void {
    if (relay.isClosed || relay.connections.size >= this.#options.maxConnections) {
      this.#refusedTotal += 1;
      inbound.destroy();
      return;
    }
    const outbound = connect({ path: socketPath, allowHalfOpen: true });
    const abort = () => {
      inbound.destroy();
      outbound.destroy();
    };
    relay.connections.add(abort);
    // A side that ends normally ends the other through pipe(), which first flushes what it holds;
    // only an error or the idle timeout cuts both at once. The slot frees when both are closed.
    let openSockets = 2;
    for (const socket of [inbound, outbound]) {
      socket.setTimeout(this.#options.idleTimeoutMs, abort);
      socket.on('error', abort);
      socket.once('close', () => {
        openSockets -= 1;
        if (openSockets === 0) relay.connections.delete(abort);
      });
    }
    // pipe() keeps each direction's buffer bounded: a reader that stops pauses the writer.
    inbound.pipe(outbound);
    outbound.pipe(inbound);
  }

  #listenInNamespace(pid: number, port: number): Promise<Server> {
    return new Promise<Server>((resolve, reject) => {
      const child = spawn(
        'nsenter',
        ['-t', String(pid), '-n', process.execPath, LISTENER_PATH, String(port)],
        {
          stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
        },
      );
      let errors = '';
      let isSettled = false;
      const settle = (outcome: () => void) => {
        if (isSettled) return;
        isSettled = true;
        clearTimeout(timer);
        if (child.connected) child.disconnect();
        outcome();
      };
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        settle(() =>
          reject(
            new GymError('PROVIDER_ERROR', `the relay helper did not start within ${HANDOVER_TIMEOUT_MS} ms`),
          ),
        );
      }, HANDOVER_TIMEOUT_MS);
      child.stderr?.on('data', (chunk: Buffer) => {
        errors = (errors + chunk.toString()).slice(-2000);
      });
      child.once('error', (error) =>
        settle(() =>
          reject(
            new GymError(
              'CAPABILITY_UNSUPPORTED',
              `cannot start the gateway relay (nsenter is needed, as root): ${error.message}`,
            ),
          ),
        ),
      );
      child.on('message', (message: HelperMessage, handle: unknown) => {
        if (message.type === 'listening' && handle !== undefined) {
          settle(() => resolve(handle as Server));
        } else if (message.type === 'error') {
          settle(() =>
            reject(
              new GymError(
                'PROVIDER_ERROR',
                `the gateway relay cannot listen on port ${port}: ${message.message}`,
                {
                  details: { port, code: message.code },
                },
              ),
            ),
          );
        }
      });
      child.once('exit', (code) =>
        settle(() =>
          reject(
            new GymError(
              code === 1 && /Operation not permitted|Permission denied/i.test(errors)
                ? 'CAPABILITY_UNSUPPORTED'
                : 'PROVIDER_ERROR',
              `the gateway relay helper exited with ${code}: ${errors.trim()}`,
            ),
          ),
        ),
      );
    });
  }
}
