import type { GymClient } from '../client/client.ts';
import type { SandboxHandle } from './harness.ts';

/** A sandbox handle over the daemon's HTTP API. */
export function clientSandboxHandle(client: GymClient, id: string): SandboxHandle {
  return {
    id,
    exec: (request) => client.exec(id, request),
    writeFile: (path, content, mode) => client.writeFile(id, path, content, mode),
    readFile: async (path) => {
      const chunks: Buffer[] = [];
      for await (const chunk of await client.readFile(id, path)) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks);
    },
    forwardGateway: (port) => client.forwardGateway(id, port),
  };
}
