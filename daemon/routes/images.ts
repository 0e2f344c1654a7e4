import { PassThrough } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import {
  ListImagesQuerySchema,
  PrepareImageQuerySchema,
  PrepareImageRequestSchema,
} from '../../core/schemas/image.ts';
import { parseOrThrow } from '../../core/validate.ts';
import { toApiError } from '../errors.ts';
import type { ImageService } from '../images.ts';

/** `GET /v1/images` lists what a provider has of ours; `POST /v1/images` builds a definition or derives an image. */
export function registerImageRoutes(app: FastifyInstance, images: ImageService): void {
  app.get('/v1/images', async (request) => {
    const query = parseOrThrow(ListImagesQuerySchema, request.query, 'query');
    return images.list(query.provider);
  });

  app.post('/v1/images', async (request, reply) => {
    const query = parseOrThrow(PrepareImageQuerySchema, request.query, 'query');
    if (query.stream === undefined) return images.prepare(request.body ?? {});
    // A bad request is an ordinary error response; from here on, errors are events.
    const body = parseOrThrow(PrepareImageRequestSchema, request.body ?? {}, 'image request');
    images.check(body.provider);
    const output = new PassThrough();
    const write = (event: Record<string, unknown>) => output.write(`${JSON.stringify(event)}\n`);
    images
      .prepare(body, { onProgress: (progress) => write({ type: 'progress', ...progress }) })
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
