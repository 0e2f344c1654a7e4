/**
 * Files and archives in a Pod: tar streams over exec (`tar -x` / `tar -c`), each awaited to its
 * exit status, with the same archive checks as Docker before a byte reaches the Pod. An
 * extraction first checks, in the same shell, that no directory on its way is a symbolic link.
 */
import { posix } from 'node:path';
import { PassThrough, type Readable, type Writable } from 'node:stream';
import type { KubeConfig } from '@kubernetes/client-node';
import { GymError } from '../../core/errors.ts';
import type { FileContent, WriteFileOptions } from '../sandbox-provider.ts';
import { firstEntry, packSingleFile, rebaseArchive, spoolSafeArchive } from '../shared/archive.ts';
import { shellQuote } from '../shared/shell.ts';
import { wrapApiError } from './errors.ts';
import { PodExecRefused, type PodTarget, startPodExec } from './pod-exec.ts';

/** Directories checked per exec before an extraction (their paths travel in the exec's URL). */
const EXTRACT_CHECK_BATCH = 200;

/** A tar to send, with its size (a command reads exactly that many bytes of its stdin). */
interface SizedArchive {
  stream: Buffer | Readable;
  sizeBytes: number;
}

export class PodFiles {
  readonly #kubeConfig: KubeConfig;
  readonly #target: (id: string) => PodTarget;
  /** The provider's `get`: throws SANDBOX_NOT_FOUND when the sandbox is not there. */
  readonly #get: (id: string) => Promise<unknown>;

  constructor(
    kubeConfig: KubeConfig,
    target: (id: string) => PodTarget,
    get: (id: string) => Promise<unknown>,
  ) {
    this.#kubeConfig = kubeConfig;
    this.#target = target;
    this.#get = get;
  }

  /**
   * Runs a tar (or other helper) command in the Pod as root, to its end; throws on a refused exec.
   * Its stdout goes into `output`, with backpressure: while `output` is full the exec stream is
   * not read (so the Pod's command waits, not the daemon's memory), and an `output` destroyed
   * before its end drops the stream.
   */
  async #runHelper(
    id: string,
    argv: string[],
    stdin: Buffer | Readable | null,
    output?: Writable,
  ): Promise<{ exitCode: number; stderr: string }> {
    const errors: Buffer[] = [];
    let running: Awaited<ReturnType<typeof startPodExec>> | undefined;
    let isFull = false;
    const onStdout = (chunk: Buffer) => {
      if (output!.destroyed || output!.write(chunk) || isFull) return;
      isFull = true;
      running?.pause();
      output!.once('drain', () => {
        isFull = false;
        running?.resume();
      });
    };
    try {
      running = await startPodExec(this.#kubeConfig, this.#target(id), argv, {
        stdin,
        // Helpers read a known length of stdin (`head -c`): never ended, so v4 works too.
        keepStdinOpen: true,
        ...(output === undefined ? {} : { onStdout }),
        onStderr: (chunk) => {
          if (errors.length < 64) errors.push(chunk);
        },
      });
    } catch (error) {
      if (error instanceof PodExecRefused && (error.httpStatus === 404 || error.httpStatus === 400)) {
        await this.#get(id);
        throw new GymError('SANDBOX_NOT_READY', `sandbox ${id} is not running`, {
          details: { sandboxId: id },
        });
      }
      throw error instanceof GymError ? error : wrapApiError(error, 'exec', id);
    }
    // Full before the stream was known: pause it now.
    if (isFull) running.pause();
    const opened = running;
    output?.once('close', () => {
      if (!output.writableFinished) opened.abandon();
    });
    const end = await running.done;
    if (end.kind === 'broken') {
      throw new GymError('PROVIDER_ERROR', `a file transfer in sandbox ${id} broke off: ${end.reason}`, {
        details: { sandboxId: id },
      });
    }
    return { exitCode: end.exitCode, stderr: Buffer.concat(errors).toString('utf8') };
  }

  /**
   * Extracts a tar at `/` after checking, in the same shell, that none of `directories` that
   * exists is a symbolic link or not a directory: tar would follow such a link out of the target.
   */
  async #extractAt(id: string, directories: string[], archive: SizedArchive): Promise<void> {
    const check = [
      'command -v head >/dev/null || { echo "gym-nohead" >&2; exit 94; }',
      'for d in "$@"; do',
      '  if [ -L "$d" ]; then echo "gym-link $d" >&2; exit 90; fi',
      '  if [ -e "$d" ] && [ ! -d "$d" ]; then echo "gym-notdir $d" >&2; exit 91; fi',
      'done',
    ];
    // The command travels in the exec's URL: many directories are checked in batches first,
    // the last batch in the same shell that extracts.
    const batches: string[][] = [];
    for (let start = 0; start < directories.length || batches.length === 0; start += EXTRACT_CHECK_BATCH) {
      batches.push(directories.slice(start, start + EXTRACT_CHECK_BATCH));
    }
    let result: { exitCode: number; stderr: string } = { exitCode: 0, stderr: '' };
    for (const [index, batch] of batches.entries()) {
      const isLast = index === batches.length - 1;
      // -o: files belong to the user extracting them, not to ids from the archive.
      // stdin is never ended (see `boundedStdin`): tar reads exactly the archive's bytes.
      const extract = `head -c ${archive.sizeBytes} | tar -x -o -f - -C /`;
      const script = [...check, ...(isLast ? [extract] : [])].join('\n');
      result = await this.#runHelper(
        id,
        ['sh', '-c', script, 'gym-extract', ...batch],
        isLast ? archive.stream : null,
      );
      if (result.exitCode !== 0) break;
    }
    const { exitCode, stderr } = result;
    if (exitCode === 94) {
      throw new GymError('PROVIDER_ERROR', `sandbox ${id}'s image has no \`head\`, which uploads need`, {
        details: { sandboxId: id },
      });
    }
    if (exitCode === 90 || exitCode === 91) {
      const path = stderr.split(' ').slice(1).join(' ').trim();
      throw new GymError(
        'PATH_KIND_MISMATCH',
        exitCode === 90
          ? `${path} is a symbolic link in sandbox ${id}; uploads never pass through links, write to the real path instead`
          : `${path} is not a directory in sandbox ${id}`,
        { details: { sandboxId: id, path } },
      );
    }
    if (exitCode !== 0) {
      if (/directory|not a dir|cannot (create|open)|exists/i.test(stderr)) {
        throw new GymError('PATH_KIND_MISMATCH', `cannot write in sandbox ${id}: ${stderr.trim()}`, {
          details: { sandboxId: id },
        });
      }
      throw new GymError(
        'PROVIDER_ERROR',
        `tar failed in sandbox ${id} (exit ${exitCode}): ${stderr.trim()}`,
        {
          details: { sandboxId: id },
        },
      );
    }
  }

  async writeFile(
    id: string,
    path: string,
    content: FileContent,
    options: WriteFileOptions = {},
  ): Promise<void> {
    const normalized = posix.normalize(path);
    if (normalized === '/') throw new GymError('PATH_KIND_MISMATCH', 'cannot write a file at /');
    const parents: string[] = [];
    for (let dir = posix.dirname(normalized); dir !== '/'; dir = posix.dirname(dir)) parents.unshift(dir);
    // The file itself must not be a directory (tar would fail) nor a link (tar would replace it, which is fine).
    const script = `if [ -d ${shellQuote(normalized)} ] && [ ! -L ${shellQuote(normalized)} ]; then echo "gym-notfile" >&2; exit 92; fi`;
    const check = await this.#runHelper(id, ['sh', '-c', script], null);
    if (check.exitCode === 92)
      throw new GymError('PATH_KIND_MISMATCH', `${path} is a directory in sandbox ${id}`);
    const packed = packSingleFile(normalized.slice(1), content, options.mode ?? 0o644);
    if (content instanceof Uint8Array) {
      // In memory already: so is its tar, whose size is then known.
      const archive = Buffer.concat(await packed.toArray());
      await this.#extractAt(id, parents, { stream: archive, sizeBytes: archive.length });
      return;
    }
    // A stream: its tar is spooled to learn its size, by the spooler archive uploads use (the
    // one entry is re-packed unchanged at `/`).
    const spooled = await spoolSafeArchive(packed, '/');
    try {
      await this.#extractAt(id, parents, { stream: spooled.open(), sizeBytes: spooled.sizeBytes });
    } finally {
      await spooled.dispose();
    }
  }

  /** A tar of `path` as `tar -c` in the Pod makes it, streamed; FILE_NOT_FOUND when it is not there. */
  async #tarOf(id: string, path: string, follow: boolean): Promise<Readable> {
    const normalized = posix.normalize(path);
    const parent = posix.dirname(normalized);
    const base = normalized === '/' ? '.' : posix.basename(normalized);
    const script = [
      `[ -e ${shellQuote(normalized)} ] || [ -L ${shellQuote(normalized)} ] || { echo gym-missing >&2; exit 93; }`,
      `exec tar -c ${follow ? '-h ' : ''}-f - -C ${shellQuote(normalized === '/' ? '/' : parent)} ${shellQuote(base)}`,
    ].join('\n');
    const stream = new PassThrough();
    const ended = this.#runHelper(id, ['sh', '-c', script], null, stream);
    // Wait for the first bytes or the end, so a missing file is an error, not an empty stream.
    const first = await Promise.race([
      new Promise<'data'>((resolve) => stream.once('readable', () => resolve('data'))),
      ended.then((result) => result),
    ]);
    if (first !== 'data' && first.exitCode === 93) {
      throw new GymError('FILE_NOT_FOUND', `${path} does not exist in sandbox ${id}`, {
        details: { sandboxId: id, path },
      });
    }
    ended.then(
      (result) => {
        if (result.exitCode === 0) stream.end();
        else
          stream.destroy(
            new GymError('PROVIDER_ERROR', `tar failed in sandbox ${id}: ${result.stderr.trim()}`),
          );
      },
      (error: unknown) => stream.destroy(error as Error),
    );
    return stream;
  }

  async readFile(id: string, path: string): Promise<Readable> {
    // tar -h follows symbolic links, the file's own and those on its path.
    const { header, content } = await firstEntry(await this.#tarOf(id, path, true));
    if (content !== null) return content;
    if (header.type === 'directory')
      throw new GymError('PATH_KIND_MISMATCH', `${path} is a directory, not a file`);
    throw new GymError('PATH_KIND_MISMATCH', `${path} is a ${header.type}, not a regular file`);
  }

  async writeArchive(id: string, directory: string, archive: Readable): Promise<void> {
    // Check the sandbox first, so an upload to a missing one does not spool for nothing.
    await this.#get(id);
    const spooled = await spoolSafeArchive(archive, directory);
    try {
      await this.#extractAt(id, [...spooled.directories], {
        stream: spooled.open(),
        sizeBytes: spooled.sizeBytes,
      });
    } finally {
      await spooled.dispose();
    }
  }

  async readArchive(id: string, directory: string): Promise<Readable> {
    return rebaseArchive(await this.#tarOf(id, directory, false));
  }
}
