/**
 * Reads a build plan's upload (`POST /v1/images` as `application/x-tar`): the first entry
 * `plan.json` (the request, `kind: 'plan'`), then for each `files` step, in order, an entry
 * `step-<index>.tar` holding what that step unpacks. Each inner tar is checked and spooled to a
 * temporary file as it arrives (providers/shared/archive.ts: no entry or link may climb out of
 * its target), so memory stays bounded whatever the context's size; the whole upload is capped
 * at `MAX_PLAN_UPLOAD_BYTES`.
 */
import { Readable, Transform } from 'node:stream';
import * as tar from 'tar-stream';
import { GymError } from '../core/errors.ts';
import {
  type CheckedImagePlan,
  MAX_PLAN_JSON_BYTES,
  MAX_PLAN_UPLOAD_BYTES,
  PrepareImageRequestSchema,
} from '../core/schemas/image.ts';
import { parseOrThrow } from '../core/validate.ts';
import { type SpooledArchive, spoolSafeArchive } from '../providers/shared/archive.ts';

export interface PlanUpload {
  request: CheckedImagePlan;
  /** The spooled tar of each `files` step, by the step's index. */
  archives: Map<number, SpooledArchive>;
  dispose(): Promise<void>;
}

function invalid(message: string): GymError {
  return new GymError('VALIDATION_FAILED', `image plan upload: ${message}`);
}

/** Fails the stream once more than `limit` bytes went through it. */
function byteLimit(limit: number): Transform {
  let seen = 0;
  return new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      seen += chunk.length;
      if (seen > limit) callback(invalid(`larger than ${limit} bytes`));
      else callback(null, chunk);
    },
  });
}

async function readAll(stream: Readable, limit: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream) {
    size += (chunk as Buffer).length;
    if (size > limit) throw invalid(`plan.json is larger than ${limit} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

export async function readPlanUpload(input: Readable): Promise<PlanUpload> {
  const archives = new Map<number, SpooledArchive>();
  const dispose = async () => {
    for (const archive of archives.values()) await archive.dispose();
  };
  let request: CheckedImagePlan | undefined;
  let pending: number[] = [];
  const extract = tar.extract();
  extract.on('entry', (header, stream, next) => {
    const entry = Readable.from(stream as AsyncIterable<Buffer>, { objectMode: false });
    const handle = async () => {
      if (header.type !== 'file' && header.type !== 'contiguous-file')
        throw invalid(`entry "${header.name}" is not a file`);
      if (request === undefined) {
        if (header.name !== 'plan.json') throw invalid('the first entry must be plan.json');
        let parsed: unknown;
        try {
          parsed = JSON.parse((await readAll(entry, MAX_PLAN_JSON_BYTES)).toString('utf8'));
        } catch (error) {
          if (error instanceof GymError) throw error;
          throw invalid(`plan.json is not JSON: ${(error as Error).message}`);
        }
        const checked = parseOrThrow(PrepareImageRequestSchema, parsed, 'image plan');
        if (checked.kind !== 'plan') throw invalid('plan.json must be a request of kind "plan"');
        request = checked;
        pending = checked.steps.flatMap((step, index) => (step.kind === 'files' ? [index] : []));
        return;
      }
      const index = pending.shift();
      if (index === undefined) throw invalid(`entry "${header.name}" belongs to no files step`);
      if (header.name !== `step-${index}.tar`)
        throw invalid(`expected step-${index}.tar, got "${header.name}"`);
      // Spooled at `/` but unpacked at the step's path: links get the strict rule.
      archives.set(index, await spoolSafeArchive(entry, '/', { extractedAtTarget: false }));
    };
    handle().then(
      () => next(),
      (error: unknown) => {
        stream.resume();
        next(error as Error);
      },
    );
  });
  try {
    await new Promise<void>((resolve, reject) => {
      const limited = byteLimit(MAX_PLAN_UPLOAD_BYTES);
      const fail = (error: Error) => {
        input.destroy();
        reject(error);
      };
      extract.on('finish', () => resolve());
      extract.on('error', fail);
      limited.on('error', (error) => extract.destroy(error));
      input.on('error', (error) => extract.destroy(error));
      input.pipe(limited).pipe(extract as unknown as NodeJS.WritableStream);
    });
    if (request === undefined) throw invalid('the upload holds no plan.json');
    if (pending.length > 0) throw invalid(`missing step-${pending[0]}.tar`);
  } catch (error) {
    await dispose();
    if (error instanceof GymError) throw error;
    throw invalid(`not a valid tar archive: ${(error as Error).message}`);
  }
  return { request, archives, dispose };
}
