import { spawn } from 'node:child_process';
import { createReadStream, createWriteStream } from 'node:fs';
import { rm, stat } from 'node:fs/promises';
import { basename, posix } from 'node:path';
import { type Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { GymClient } from '../../../client/client.ts';
import { GymError, isGymError } from '../../../core/errors.ts';
import { type CommandOf, UsageError } from '../../command.ts';
import { connectWith } from '../../connect.ts';
import type { sandboxCp } from './definitions.ts';
import { downloadTooLarge, unpackDownload } from './unpack.ts';

interface Location {
  sandboxId?: string;
  path: string;
}

function parseLocation(text: string): Location {
  const match = /^(sbx-[a-z0-9]+):(\/.*)$/.exec(text);
  return match ? { sandboxId: match[1]!, path: match[2]! } : { path: text };
}

/** Runs local `tar` with a stream on one side; rejects with tar's message if it fails. */
function runTar(args: string[], input?: Readable): { output: Readable; done: Promise<void> } {
  const child = spawn('tar', args, { stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
  let errors = '';
  child.stderr!.on('data', (chunk: Buffer) => {
    errors += chunk.toString();
  });
  if (input !== undefined) input.pipe(child.stdin!);
  const done = new Promise<void>((resolve, reject) =>
    child.on('close', (code) =>
      code === 0
        ? resolve()
        : reject(new GymError('INTERNAL', `tar ${args.join(' ')} failed: ${errors.trim()}`)),
    ),
  );
  return { output: child.stdout!, done };
}

async function upload(
  client: GymClient,
  source: string,
  target: Location & { sandboxId: string },
): Promise<void> {
  const info = await stat(source).catch(() => {
    throw new GymError('VALIDATION_FAILED', `${source} does not exist`);
  });
  if (info.isDirectory()) {
    const tar = runTar(['-C', source, '-c', '.']);
    await Promise.all([client.writeArchive(target.sandboxId, target.path, tar.output), tar.done]);
    return;
  }
  // Copying a file onto a path ending in / puts it inside that directory, like cp.
  const path = target.path.endsWith('/') ? posix.join(target.path, basename(source)) : target.path;
  await client.writeFile(
    target.sandboxId,
    path,
    { stream: createReadStream(source), sizeBytes: info.size },
    info.mode & 0o7777,
  );
}

/** Copies `input` to `target`, at most `maxBytes`; past it FILE_TOO_LARGE and the partial file is removed. */
async function writeBounded(input: Readable, target: string, maxBytes: number, what: string): Promise<void> {
  let written = 0;
  const bound = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      written += chunk.length;
      callback(written > maxBytes ? downloadTooLarge(what, maxBytes) : null, chunk);
    },
  });
  try {
    await pipeline(input, bound, createWriteStream(target));
  } catch (error) {
    if (isGymError(error, 'FILE_TOO_LARGE')) await rm(target, { force: true });
    throw error;
  }
}

async function download(
  client: GymClient,
  source: Location & { sandboxId: string },
  target: string,
  maxBytes: number,
): Promise<void> {
  let stream: Readable;
  try {
    stream = await client.readFile(source.sandboxId, source.path);
  } catch (error) {
    if (!isGymError(error, 'PATH_KIND_MISMATCH')) throw error;
    // A directory: its tar, unpacked here with no path the archive chose resolved by the kernel.
    await unpackDownload(await client.readArchive(source.sandboxId, source.path), target, { maxBytes });
    return;
  }
  const isDirectoryTarget = (await stat(target).catch(() => null))?.isDirectory() ?? false;
  const path = isDirectoryTarget ? posix.join(target, posix.basename(source.path)) : target;
  await writeBounded(stream, path, maxBytes, `${source.path} in sandbox ${source.sandboxId}`);
}

export const sandboxCpCommand: CommandOf<typeof sandboxCp> = {
  async run({ options: values, args, env }) {
    const [source, target] = args.map(parseLocation) as [Location, Location];
    if ((source.sandboxId === undefined) === (target.sandboxId === undefined))
      throw new UsageError('exactly one of SRC and DST must be a sandbox path (ID:/absolute/path)');
    const client = await connectWith(values, env);
    if (target.sandboxId !== undefined)
      await upload(client, source.path, { ...target, sandboxId: target.sandboxId });
    else
      await download(
        client,
        { ...source, sandboxId: source.sandboxId! },
        target.path,
        values.maxMib * 1024 * 1024,
      );
    return 0;
  },
};
