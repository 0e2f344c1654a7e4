/**
 * Files and archives of a Docker sandbox through the engine's archive API (`putArchive`,
 * `getArchive`): nothing runs in the container. Uploads never pass through a symbolic link
 * (`path-guard.ts`), and archives get the shared checks before a byte reaches the engine.
 */
import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import type Docker from 'dockerode';
import { GymError } from '../../core/errors.ts';
import type { SandboxSpec } from '../../core/schemas/sandbox.ts';
import type { FileContent, WriteFileOptions } from '../sandbox-provider.ts';
import { packSingleFile, readFileThroughLinks, rebaseArchive, spoolSafeArchive } from '../shared/archive.ts';
import { wrapDockerError } from './docker-errors.ts';
import { refuseLinkedDirectories } from './path-guard.ts';

/** A new sandbox's seed files (`spec.files`), written before anything runs in it. */
export async function writeSeedFiles(container: Docker.Container, spec: SandboxSpec): Promise<void> {
  for (const file of spec.files) {
    const content = Buffer.from(file.content, file.encoding === 'base64' ? 'base64' : 'utf8');
    await container.putArchive(packSingleFile(file.path.slice(1), content, file.mode), { path: '/' });
  }
}

export class ContainerFiles {
  readonly #container: (id: string) => Docker.Container;
  /** The provider's `get`: throws SANDBOX_NOT_FOUND when the sandbox is not there. */
  readonly #get: (id: string) => Promise<unknown>;

  constructor(container: (id: string) => Docker.Container, get: (id: string) => Promise<unknown>) {
    this.#container = container;
    this.#get = get;
  }

  async writeFile(
    id: string,
    path: string,
    content: FileContent,
    options: WriteFileOptions = {},
  ): Promise<void> {
    const container = this.#container(id);
    const normalized = posix.normalize(path);
    if (normalized === '/') throw new GymError('PATH_KIND_MISMATCH', 'cannot write a file at /');
    await refuseLinkedDirectories(container, id, [posix.dirname(normalized)]);
    try {
      // Extracting at / with the full relative name creates missing parent directories.
      await container.putArchive(packSingleFile(normalized.slice(1), content, options.mode ?? 0o644), {
        path: '/',
      });
    } catch (error) {
      const wrapped = wrapDockerError(error, { operation: 'write file', sandboxId: id });
      if (
        wrapped.code === 'PROVIDER_ERROR' &&
        /directory|not a dir|cannot overwrite/i.test(wrapped.message)
      ) {
        throw new GymError('PATH_KIND_MISMATCH', `cannot write file ${path}: ${wrapped.message}`, {
          cause: wrapped,
        });
      }
      throw wrapped;
    }
  }

  async #getArchive(id: string, path: string): Promise<Readable> {
    const container = this.#container(id);
    try {
      return (await container.getArchive({ path })) as unknown as Readable;
    } catch (error) {
      const wrapped = wrapDockerError(error, { operation: 'read', sandboxId: id });
      if (
        wrapped.code === 'SANDBOX_NOT_FOUND' &&
        /path|file|directory/i.test(wrapped.details.engineMessage as string)
      ) {
        throw new GymError('FILE_NOT_FOUND', `${path} does not exist in sandbox ${id}`, {
          details: { sandboxId: id, path },
        });
      }
      throw wrapped;
    }
  }

  async readFile(id: string, path: string): Promise<Readable> {
    return readFileThroughLinks(path, (current) => this.#getArchive(id, current));
  }

  async writeArchive(id: string, directory: string, archive: Readable): Promise<void> {
    const container = this.#container(id);
    // Check the sandbox first, so an upload to a missing one does not spool for nothing.
    await this.#get(id);
    const spooled = await spoolSafeArchive(archive, directory);
    try {
      await refuseLinkedDirectories(container, id, spooled.directories);
      await container.putArchive(spooled.open(), { path: '/' });
    } catch (error) {
      throw wrapDockerError(error, { operation: 'write archive', sandboxId: id });
    } finally {
      await spooled.dispose();
    }
  }

  async readArchive(id: string, directory: string): Promise<Readable> {
    return rebaseArchive(await this.#getArchive(id, posix.normalize(directory)));
  }
}
