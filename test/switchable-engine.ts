/**
 * A unix socket relaying to the Docker engine that can be cut and restored, for tests of an engine
 * that stops answering without touching the real one (point a Docker provider's `socketPath` at it).
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';

export class SwitchableEngine {
  readonly path: string;
  #server: Server | null = null;
  readonly #connections = new Set<Socket>();

  constructor(directory: string) {
    this.path = join(directory, 'engine.sock');
  }

  async up(): Promise<void> {
    // Half-open like the engine's own socket: an exec whose stdin was closed still sends its output.
    this.#server = createServer({ allowHalfOpen: true }, (client) => {
      const engine = createConnection({ path: '/var/run/docker.sock', allowHalfOpen: true });
      this.#connections.add(client).add(engine);
      client.pipe(engine).pipe(client);
      const drop = () => {
        client.destroy();
        engine.destroy();
      };
      client.on('error', drop).on('close', drop);
      engine.on('error', drop).on('close', drop);
    });
    await new Promise<void>((resolve) => this.#server!.listen(this.path, resolve));
  }

  async down(): Promise<void> {
    for (const socket of this.#connections) socket.destroy();
    this.#connections.clear();
    await new Promise((resolve) =>
      this.#server === null ? resolve(undefined) : this.#server.close(resolve),
    );
    this.#server = null;
  }
}
