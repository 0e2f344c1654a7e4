import type { FastifyInstance } from 'fastify';
import { ListImagesQuerySchema } from '../../core/schemas/image.ts';
import { parseOrThrow } from '../../core/validate.ts';
import type { ImageService } from '../images.ts';

/** `GET /v1/images` lists what a provider has of ours; `POST /v1/images` builds a definition or derives an image. */
export function registerImageRoutes(app: FastifyInstance, images: ImageService): void {
  app.get('/v1/images', async (request) => {
    const query = parseOrThrow(ListImagesQuerySchema, request.query, 'query');
    return images.list(query.provider);
  });

  app.post('/v1/images', async (request) => images.prepare(request.body ?? {}));
}
