/**
 * Relays a port on a sandbox's loopback to a unix socket of the host (the model gateway), from
 * inside the daemon's own event loop: how the Docker provider gives a sandbox gateway reach.
 *
 * A helper (`netns-listener.ts`) is started once per sandbox in its network namespace
 * (`nsenter -t <pid> -n`); it listens on 127.0.0.1 (on a given port, or any free one), hands the
 * listening socket to the daemon over an IPC channel and exits. From then on no host process
 * exists for the relay: the daemon accepts each connection and pipes it to the unix socket. A
 * sandbox has a network namespace of its own, so ports never collide between sandboxes. So:
 *
 * - **Cost**: one listening descriptor per sandbox with gateway reach; per open
 *   connection two sockets (sandbox side, gateway side): measured here about 4 KiB of heap and
 *   9 KiB of RSS when idle (socat took a 2.4 MiB process per connection), and at most the
 *   streams' buffers (64 KiB each way) under backpressure. The helper costs one short-lived Node
 *   process per sandbox, not per connection: opening a relay takes 150-200 ms on a busy 2-core host.
 * - **Bound**: at most `maxConnections` open connections per sandbox; one
 *   beyond is accepted and closed at once (counted in `refusedTotal`). A connection with no
 *   traffic either way for `idleTimeoutMs` is closed.
 * - **Crash**: the listening socket lives only in the daemon's descriptor table, so when the
 *   daemon dies (even by kill -9) the kernel closes it and nothing stays on the host. A restarted
 *   daemon opens the relay again on the same port (the agent inside has its URL configured).
 */
import { spawn } from 'node:child_process';
import { connect, type Server, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import type Docker from 'dockerode';
import { GymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import type { RelayStats } from '../sandbox-provider.ts';
import { loopbackGatewayUrl, recordedGatewayPort } from '../shared/gateway-url.ts';
import { RelayTable, type TableRelay } from '../shared/relay-table.ts';
import { wrapDockerError } from './docker-errors.ts';

/** The helper sits beside this module, with the same extension (`.ts` from source, `.js` when built). */
const LISTENER_PATH = fileURLToPath(
  new URL(`./netns-listener${import.meta.url.slice(import.meta.url.lastIndexOf('.'))}`, import.meta.url),
);
/** nsenter, then Node starting the helper: under 200 ms here; beyond this something is wrong. */
const HANDOVER_TIMEOUT_MS = 15_000;

export interface GatewayRelayOptions {
  /** Open connections per sandbox. */
  maxConnections: number;
  /** A connection with no bytes either way for this long is closed. */
  idleTimeoutMs: number;
  logger: Logger;
}

/** One sandbox's relay: the listening socket the helper handed over, and its open connections. */
class SandboxRelay implements TableRelay {
  readonly server: Server;
  readonly port: number;
  /** Each open connection, by the function that aborts both of its sockets. */
  readonly connections = new Set<() => void>();
  /** Whether a connection past the cap was refused already (logged once per relay, not per refusal). */
  hasRefused = false;
  #isOpen = true;

  constructor(server: Server, port: number) {
    this.server = server;
    this.port = port;
  }

  get isOpen(): boolean {
    return this.#isOpen;
  }

  /** Stops listening and closes every connection. Idempotent. */
  close(): void {
    if (!this.#isOpen) return;
    this.#isOpen = false;
    this.server.close();
    for (const abort of this.connections) abort();
    this.connections.clear();
  }
}

type HelperMessage =
  | { type: 'listening'; port: number }
  | { type: 'error'; code: string | null; message: string };

export class GatewayRelays {
  readonly #options: GatewayRelayOptions;
  /** The relays by sandbox (`../shared/relay-table.ts`: one opening shared, released once). */
  readonly #table = new RelayTable<SandboxRelay>();
  #refusedTotal = 0;

  constructor(options: GatewayRelayOptions) {
    this.#options = options;
  }

  /**
   * The port the sandbox's relay listens on (once it does), or undefined when it has none: no
   * call to the engine, so a repeated `open` of a live relay costs nothing.
   */
  async portOf(sandboxId: string): Promise<number | undefined> {
    return (await this.#table.current(sandboxId))?.port;
  }

  /**
   * Listens on 127.0.0.1:`port` (0: any free port) in the network namespace of process `pid`
   * (the sandbox's init) and relays each connection to `socketPath`; resolves with the port.
   * One relay per sandbox: while it is open (or opening), another call answers its port.
   * @throws GymError `CAPABILITY_UNSUPPORTED` (no nsenter, or not root), `PROVIDER_ERROR` (the
   *   port is taken in the sandbox, or the helper failed), `SANDBOX_NOT_FOUND` (closed while
   *   opening: the sandbox was destroyed).
   */
  async open(sandboxId: string, pid: number, port: number, socketPath: string): Promise<number> {
    const relay = await this.#table.open(sandboxId, async () => {
      const opened = await this.#listenInNamespace(pid, port);
      const relay = new SandboxRelay(opened.server, opened.port);
      const { server } = opened;
      // A client may half-close after its request and still read the answer.
      // (Node reads this property of the server for every accepted socket; its types omit it.)
      (server as Server & { allowHalfOpen: boolean }).allowHalfOpen = true;
      server.on('connection', (socket) => this.#accept(sandboxId, relay, socket, socketPath));
      server.on('error', (error) =>
        this.#options.logger.warn(
          { sandboxId, port: opened.port, error: error.message },
          'gateway relay listener failed',
        ),
      );
      return relay;
    });
    return relay.port;
  }

  /**
   * The gateway's URL inside the sandbox of `container`: its relay's if it has one, else a new
   * relay's, on the port of `options.url` (a restart restores the URL the sandbox had) or any
   * free port.
   */
  async expose(
    sandboxId: string,
    container: Docker.Container,
    options: { socketPath: string; url?: string },
  ): Promise<string> {
    const open = await this.portOf(sandboxId);
    if (open !== undefined) return loopbackGatewayUrl(open);
    const port = recordedGatewayPort(options.url);
    let pid: number;
    try {
      pid = (await container.inspect()).State.Pid;
    } catch (error) {
      throw wrapDockerError(error, { operation: 'expose gateway', sandboxId });
    }
    if (!pid) throw new GymError('SANDBOX_NOT_READY', `sandbox ${sandboxId} is not running`);
    // The listener lives in the sandbox's network namespace (its loopback only); the daemon
    // reaches the host's socket through the filesystem, which no network namespace fences.
    return loopbackGatewayUrl(await this.open(sandboxId, pid, port, options.socketPath));
  }

  /**
   * Stops listening and closes every connection of the sandbox (one still opening is closed as
   * soon as it opens). Idempotent.
   */
  close(sandboxId: string): void {
    void this.#table.release(sandboxId);
  }

  closeAll(): void {
    for (const sandboxId of this.#table.sandboxIds) this.close(sandboxId);
  }

  stats(): RelayStats {
    let listeners = 0;
    let connections = 0;
    for (const relay of this.#table.openRelays) {
      listeners += 1;
      connections += relay.connections.size;
    }
    return { listeners, connections, refusedTotal: this.#refusedTotal };
  }

  #accept(sandboxId: string, relay: SandboxRelay, inbound: Socket, socketPath: string): void {
    if (!relay.isOpen || relay.connections.size >= this.#options.maxConnections) {
      this.#refusedTotal += 1;
      inbound.destroy();
      // Once per relay: a sandbox that opens connections without end must not grow the log.
      if (relay.isOpen && !relay.hasRefused) {
        relay.hasRefused = true;
        this.#options.logger.warn(
          { sandboxId, maxConnections: this.#options.maxConnections },
          'gateway relay refused a connection past its cap (the docker provider option relayMaxConnections); further refusals are counted, not logged',
        );
      }
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

  #listenInNamespace(pid: number, port: number): Promise<{ server: Server; port: number }> {
    return new Promise((resolve, reject) => {
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
          settle(() => resolve({ server: handle as Server, port: message.port }));
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
