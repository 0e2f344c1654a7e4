/**
 * A sandbox's files, moved as tar streams through a static busybox of the host's bound into the
 * sandbox, so no program of the sandbox's own takes part; and the users its /etc/passwd names.
 * For any provider that runs such a busybox in its sandboxes (the SSH runtimes, the bwrap test provider).
 */
import { posix } from 'node:path';
import { PassThrough, type Readable } from 'node:stream';
import { GymError } from '../../core/errors.ts';
import type { FileContent, WriteFileOptions } from '../sandbox-provider.ts';
import { packSingleFile, readFileThroughLinks, rebaseArchive, spoolSafeArchive } from './archive.ts';
import { guardedExtractArgs } from './guarded-extract.ts';
import { resolveUserIds, type UserIds } from './passwd.ts';

/** How a run of the bound busybox ended: its exit code, all of stdout, and stderr. */
export interface ToolsResult {
  code: number | null;
  stdout: Buffer;
  stderr: string;
}

/** Runs the bound busybox with `args` in sandbox `id`; SANDBOX_NOT_FOUND when the sandbox is gone. */
export type RunTools = (id: string, args: string[], stdin?: Readable) => Promise<ToolsResult>;

export class BusyboxFiles {
  /** Where the busybox is bound in every sandbox. */
  readonly #busybox: string;
  readonly #tools: RunTools;
  /** Throws SANDBOX_NOT_FOUND for a sandbox that is not there (before an archive is spooled). */
  readonly #check: (id: string) => Promise<unknown>;

  constructor(busybox: string, tools: RunTools, check: (id: string) => Promise<unknown>) {
    this.#busybox = busybox;
    this.#tools = tools;
    this.#check = check;
  }

  /** The uid and gid a `user` names (`providers/shared/passwd.ts`), read from the sandbox's own /etc/passwd. */
  resolveUser(id: string, user: string): Promise<UserIds> {
    return resolveUserIds(user, async () =>
      (await this.#tools(id, ['cat', '/etc/passwd'])).stdout.toString(),
    );
  }

  async #extract(
    id: string,
    directories: Iterable<string>,
    archive: Readable,
    target: string,
  ): Promise<void> {
    const result = await this.#tools(id, guardedExtractArgs(this.#busybox, directories), archive);
    if (result.code !== 0)
      throw new GymError('PATH_KIND_MISMATCH', `cannot write ${target}: ${result.stderr.trim()}`);
  }

  async writeFile(
    id: string,
    path: string,
    content: FileContent,
    options: WriteFileOptions = {},
  ): Promise<void> {
    const normalized = posix.normalize(path);
    if (normalized === '/') throw new GymError('PATH_KIND_MISMATCH', 'cannot write a file at /');
    const archive = packSingleFile(normalized.slice(1), content, options.mode ?? 0o644);
    await this.#extract(id, [posix.dirname(normalized)], archive, path);
  }

  async #archive(id: string, path: string): Promise<Readable> {
    const result = await this.#tools(id, [
      'tar',
      '-c',
      '-f',
      '-',
      '-C',
      posix.dirname(path),
      posix.basename(path) || '.',
    ]);
    if (result.code !== 0) {
      if (/no such file|not found/i.test(result.stderr))
        throw new GymError('FILE_NOT_FOUND', `${path} does not exist in sandbox ${id}`, {
          details: { sandboxId: id, path },
        });
      throw new GymError('PROVIDER_ERROR', `reading ${path}: ${result.stderr.trim()}`);
    }
    const stream = new PassThrough();
    stream.end(result.stdout);
    return stream;
  }

  readFile(id: string, path: string): Promise<Readable> {
    return readFileThroughLinks(path, (current) => this.#archive(id, current));
  }

  async writeArchive(id: string, directory: string, archive: Readable): Promise<void> {
    await this.#check(id);
    const spooled = await spoolSafeArchive(archive, directory);
    try {
      await this.#extract(id, [directory, ...spooled.directories], spooled.open(), directory);
    } finally {
      await spooled.dispose();
    }
  }

  async readArchive(id: string, directory: string): Promise<Readable> {
    return rebaseArchive(await this.#archive(id, posix.normalize(directory)));
  }
}
