/**
 * Where a sandbox's connections to the gateway arrive: a unix socket of its own for each sandbox
 * with gateway reach (`<stateDir>/gw/<sandbox id>.sock`), which its provider's relay joins every
 * connection to (`exposeGateway`'s `socketPath`). Each connection is handed to the gateway's
 * server marked with the sandbox it came through, so what serves it (the egress proxy) knows which
 * sandbox asks from the path the bytes took, not from anything the sandbox says.
 *
 * A credential a sandbox holds is worth nothing elsewhere: a fork child, or a sandbox started from
 * a snapshot whose files (or, live, whose memory) hold its parent's `HTTP_PROXY`, reaches the
 * daemon through its own relay and so its own socket, and the parent's credential does not match
 * it.
 */
import { mkdir, rm } from 'node:fs/promises';
import type { Server as HttpServer } from 'node:http';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { GymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';

/** The longest unix socket path Linux takes (sun_path is 108 bytes with its NUL). */
const MAX_SOCKET_PATH_BYTES = 107;

interface Listener {
  server: Server;
  connections: Set<Socket>;
}

export class GatewayArrivals {
  readonly #directory: string;
  readonly #logger: Logger;
  readonly #listeners = new Map<string, Promise<Listener>>();
  readonly #arrivedThrough = new WeakMap<object, string>();
  #server: HttpServer | undefined;

  /** @param options.directory where the sockets are made (mode 0700; the daemon's user alone reaches them). */
  constructor(options: { directory: string; logger: Logger }) {
    this.#directory = options.directory;
    this.#logger = options.logger;
  }

  /**
   * The server that serves every arrival (the gateway's). Until it is set, a connection that
   * arrives is closed: the relay's client sees it refused, as before the gateway listened.
   */
  serve(server: HttpServer): void {
    this.#server = server;
  }

  /**
   * The socket of sandbox `sandboxId`, listening: made on the first call, the same path after.
   * @throws GymError `INTERNAL` when the path is too long for a unix socket, or it cannot listen.
   */
  async open(sandboxId: string): Promise<string> {
    let listening = this.#listeners.get(sandboxId);
    if (listening === undefined) {
      listening = this.#listen(sandboxId);
      this.#listeners.set(sandboxId, listening);
      listening.catch(() => {
        if (this.#listeners.get(sandboxId) === listening) this.#listeners.delete(sandboxId);
      });
    }
    await listening;
    return this.#pathOf(sandboxId);
  }

  /**
   * Removes every socket a previous daemon on this state directory left (those of sandboxes gone
   * meanwhile would stay forever); the start, before reach is restored, calls it.
   */
  async clear(): Promise<void> {
    await rm(this.#directory, { recursive: true, force: true });
  }

  /** The sandbox a connection arrived through; undefined for any other (the shared gateway socket). */
  sandboxOf(socket: object | undefined): string | undefined {
    return socket === undefined ? undefined : this.#arrivedThrough.get(socket);
  }

  /** Stops listening for the sandbox and ends its connections (it is gone). Idempotent. */
  close(sandboxId: string): void {
    const listening = this.#listeners.get(sandboxId);
    if (listening === undefined) return;
    this.#listeners.delete(sandboxId);
    void listening
      .then(async ({ server, connections }) => {
        server.close();
        for (const socket of connections) socket.destroy();
        await rm(this.#pathOf(sandboxId), { force: true });
      })
      .catch(() => {});
  }

  closeAll(): void {
    for (const sandboxId of [...this.#listeners.keys()]) this.close(sandboxId);
  }

  #pathOf(sandboxId: string): string {
    return join(this.#directory, `${sandboxId}.sock`);
  }

  async #listen(sandboxId: string): Promise<Listener> {
    const path = this.#pathOf(sandboxId);
    if (Buffer.byteLength(path) > MAX_SOCKET_PATH_BYTES) {
      throw new GymError(
        'INTERNAL',
        `the gateway socket ${path} is longer than a unix socket path may be (${MAX_SOCKET_PATH_BYTES} bytes); choose a shorter stateDir`,
        { details: { sandboxId } },
      );
    }
    await mkdir(this.#directory, { recursive: true, mode: 0o700 });
    // One a killed daemon left behind.
    await rm(path, { force: true });
    const connections = new Set<Socket>();
    // Half-open like the http server's own sockets: a client may end its side and read the answer.
    const server = createServer({ allowHalfOpen: true }, (socket) => {
      const target = this.#server;
      if (target === undefined) {
        socket.destroy();
        return;
      }
      this.#arrivedThrough.set(socket, sandboxId);
      connections.add(socket);
      socket.once('close', () => connections.delete(socket));
      target.emit('connection', socket);
    });
    server.on('error', (error) =>
      this.#logger.warn({ sandboxId, error: error.message }, 'a sandbox gateway socket failed'),
    );
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(path, () => {
          server.off('error', reject);
          resolve();
        });
      });
    } catch (error) {
      throw new GymError(
        'INTERNAL',
        `cannot listen on the gateway socket ${path}: ${(error as Error).message}`,
        {
          cause: error,
          details: { sandboxId },
        },
      );
    }
    return { server, connections };
  }
}
