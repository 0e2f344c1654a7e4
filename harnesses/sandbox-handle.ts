import type { GymClient } from '../client/client.ts';
import { DEFAULT_READ_FILE_MAX_BYTES, type SandboxHandle } from './harness.ts';

/** A sandbox handle over the daemon's HTTP API. */
export function clientSandboxHandle(client: GymClient, id: string): SandboxHandle {
  return {
    id,
    exec: (request) => client.exec(id, request),
    writeFile: (path, content, mode) => client.writeFile(id, path, content, mode),
    readFile: (path, options) =>
      client.readFileBytes(id, path, { maxBytes: options?.maxBytes ?? DEFAULT_READ_FILE_MAX_BYTES }),
    exposeGateway: () => client.exposeGateway(id),
    stopProcesses: () => client.stopProcesses(id),
    checkToolchain: (tools, workdirs = []) =>
      client.checkToolchain(id, { tools: [...tools], workdirs: [...workdirs] }),
  };
}
