import { PassThrough } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import {
  type ImageProgress,
  InspectImageQuerySchema,
  ListImagesQuerySchema,
  PrepareImageQuerySchema,
  PrepareImageRequestSchema,
} from '../../core/schemas/image.ts';
import { parseOrThrow } from '../../core/validate.ts';
import { toApiError } from '../errors.ts';
import { readPlanUpload } from '../image-upload.ts';
import type { ImageService } from '../images.ts';

/**
 * `GET /v1/images` lists what a provider has of ours, `GET /v1/images/inspect` shows one image;
 * `POST /v1/images` builds a definition or derives an image (JSON), or carries out a build plan
 * (`application/x-tar`: plan.json, then one tar per files step; see daemon/image-upload.ts).
 */
export function registerImageRoutes(app: FastifyInstance, images: ImageService): void {
  app.get('/v1/images', async (request) => {
    const query = parseOrThrow(ListImagesQuerySchema, request.query, 'query');
    return images.list(query.provider);
  });

  app.get('/v1/images/inspect', async (request) => {
    const query = parseOrThrow(InspectImageQuerySchema, request.query, 'query');
    return images.inspect(query.reference, query.provider);
  });

  app.post('/v1/images', async (request, reply) => {
    const query = parseOrThrow(PrepareImageQuerySchema, request.query, 'query');
    const upload = request.headers['content-type']?.startsWith('application/x-tar')
      ? await readPlanUpload(request.raw)
      : undefined;
    const prepare = (onProgress?: (progress: ImageProgress) => void) =>
      upload === undefined
        ? images.prepare(request.body ?? {}, { onProgress })
        : images.preparePlan(upload, { onProgress }).finally(() => upload.dispose());
    if (query.stream === undefined) return prepare();
    // A bad request is an ordinary error response; from here on, errors are events.
    try {
      const provider =
        upload !== undefined
          ? upload.request.provider
          : parseOrThrow(PrepareImageRequestSchema, request.body ?? {}, 'image request').provider;
      images.check(provider);
    } catch (error) {
      await upload?.dispose();
      throw error;
    }
    const output = new PassThrough();
    const write = (event: Record<string, unknown>) => output.write(`${JSON.stringify(event)}\n`);
    prepare((progress) => write({ type: 'progress', ...progress }))
      .then(
        (result) => write({ type: 'result', result }),
        (error: unknown) => write({ type: 'error', error: toApiError(error).toJSON().error }),
      )
      .finally(() => output.end());
    reply.hijack();
    reply.raw.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-cache' });
    reply.raw.flushHeaders();
    output.pipe(reply.raw);
    return reply;
  });
}
