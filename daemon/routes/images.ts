import { PassThrough } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import {
  ImageInfoSchema,
  ImageListSchema,
  type ImageProgress,
  ImageStreamEventSchema,
  InspectImageQuerySchema,
  ListImagesQuerySchema,
  PrepareImageQuerySchema,
  PrepareImageRequestSchema,
  PrepareImageResponseSchema,
} from '../../core/schemas/image.ts';
import { parseOrThrow } from '../../core/validate.ts';
import { toApiError } from '../errors.ts';
import { readPlanUpload } from '../image-upload.ts';
import type { ImageService } from '../images.ts';
import { BYTES, contentAnswer, contentBody, errorAnswers, jsonAnswer } from '../openapi.ts';

/**
 * `GET /v1/images` lists what a provider has of ours, `GET /v1/images/inspect` shows one image;
 * `POST /v1/images` builds a definition or derives an image (JSON), or carries out a build plan
 * (`application/x-tar`: plan.json, then one tar per files step; see daemon/image-upload.ts).
 */
export function registerImageRoutes(app: FastifyInstance, images: ImageService): void {
  app.get(
    '/v1/images',
    {
      schema: {
        summary:
          "the images the project built on a provider (default: the default provider), and whether it has each built-in definition's current image",
        querystring: ListImagesQuerySchema,
        response: { 200: jsonAnswer('images and definitions', ImageListSchema), ...errorAnswers(400, 501) },
      },
    },
    async (request) => {
      const query = parseOrThrow(ListImagesQuerySchema, request.query, 'query');
      return images.list(query.provider);
    },
  );

  app.get(
    '/v1/images/inspect',
    {
      schema: {
        summary: 'one image the provider has, with the directory its sandboxes start in',
        querystring: InspectImageQuerySchema,
        response: { 200: jsonAnswer('the image', ImageInfoSchema), ...errorAnswers(400, 404, 501) },
      },
    },
    async (request) => {
      const query = parseOrThrow(InspectImageQuerySchema, request.query, 'query');
      return images.inspect(query.reference, query.provider);
    },
  );

  app.post(
    '/v1/images',
    {
      schema: {
        summary:
          'build a built-in definition, or derive an image (a base with files and a command), or (as application/x-tar: plan.json, then step-<index>.tar per files step) carry out a build plan; the provider turns it into what it runs. Content-addressed: an image the provider has is not built again',
        querystring: PrepareImageQuerySchema,
        body: contentBody({ 'application/json': PrepareImageRequestSchema, 'application/x-tar': BYTES }),
        response: {
          200: contentAnswer('what was built or found (or, with stream=ndjson, one event per line)', {
            'application/json': PrepareImageResponseSchema,
            'application/x-ndjson': ImageStreamEventSchema,
          }),
          ...errorAnswers(400, 404, 501),
        },
      },
    },
    async (request, reply) => {
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
    },
  );
}
