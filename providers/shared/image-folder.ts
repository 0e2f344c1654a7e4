/**
 * How a provider that keeps images as folders or files (SSH runtimes, the bwrap test provider)
 * names them, and the record it keeps beside each one (`<name>.image.json`).
 */
import { randomBytes } from 'node:crypto';
import { readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { GymError } from '../../core/errors.ts';
import type { ImageConfig, ImageFilter, ImageInfo } from '../sandbox-provider.ts';

/**
 * The folder an image reference names (`/`, `:` and `@` become `_`). A name of dots only would
 * be the images folder itself or its parent (the host's work directory, with every sandbox's state
 * file), and one starting with a dot would hide among the partial and record files: refused.
 */
export function imageFolderName(reference: string): string {
  const name = reference.replace(/[/:@]/g, '_');
  if (name === '' || name.startsWith('.'))
    throw new GymError('VALIDATION_FAILED', `image reference "${reference}" cannot name an image folder`);
  return name;
}

/** What is kept beside an image: `<path>.image.json`. */
export interface ImageRecord {
  reference: string;
  config: ImageConfig;
  createdAt: string;
}

/** The record beside the image at `path`; null when there is none. */
export async function readImageRecord<R extends ImageRecord = ImageRecord>(path: string): Promise<R | null> {
  const text = await readFile(`${path}.image.json`, 'utf8').catch(() => null);
  return text === null ? null : (JSON.parse(text) as R);
}

export async function writeImageRecord(path: string, record: ImageRecord, mode = 0o600): Promise<void> {
  await writeFile(`${path}.image.json`, JSON.stringify(record), { mode });
}

/** The images recorded in `directory` that carry every label key of the filter, newest first. */
export async function listImageRecords(directory: string, filter: ImageFilter = {}): Promise<ImageInfo[]> {
  const names = await readdir(directory).catch(() => [] as string[]);
  const images: ImageInfo[] = [];
  for (const name of names.filter((item) => item.endsWith('.image.json'))) {
    const { reference, config, createdAt } = JSON.parse(
      await readFile(join(directory, name), 'utf8'),
    ) as ImageRecord;
    if ((filter.labelKeys ?? []).every((key) => key in config.labels))
      images.push({ reference, labels: config.labels, createdAt });
  }
  return images.sort((left, right) => right.createdAt!.localeCompare(left.createdAt!));
}

/** Makes `file` by `make` beside it (at the path it is given), then renames it in: never half a file. */
export async function makeBeside(file: string, make: (partial: string) => Promise<void>): Promise<void> {
  const partial = `${file}.partial-${randomBytes(4).toString('hex')}`;
  try {
    await make(partial);
    await rename(partial, file);
  } finally {
    await rm(partial, { recursive: true, force: true });
  }
}
