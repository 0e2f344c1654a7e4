import { PassThrough } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { GymError } from '../../core/errors.ts';
import { OpenRolloutRequestSchema } from '../../core/schemas/api.ts';
import { parseOrThrow } from '../../core/validate.ts';
import type { ModelApi, ModelGateway } from '../gateway/gateway.ts';

/** Model requests carry whole conversations; allow them to be large. */
const MODEL_BODY_LIMIT_BYTES = 64 * 1024 * 1024;

/** Paths an agent calls with its rollout key (not the daemon token). */
export const GATEWAY_MODEL_PATH = /^\/v1\/gateway\/[^/]+\/v1\//;

function bearer(request: FastifyRequest): string {
  const header = request.headers.authorization ?? '';
  if (header.startsWith('Bearer ')) return header.slice('Bearer '.length);
  // Anthropic-style clients send the key as x-api-key.
  return (request.headers['x-api-key'] as string | undefined) ?? '';
}

export function registerGatewayRoutes(app: FastifyInstance, gateway: ModelGateway): void {
  app.post('/v1/gateway/rollouts', async (request, reply) => {
    const body = parseOrThrow(OpenRolloutRequestSchema, request.body ?? {}, 'rollout request');
    reply.status(201);
    return gateway.openRollout(body);
  });

  app.get('/v1/gateway/rollouts/:rolloutId/records', async (request) => ({
    records: await gateway.records((request.params as { rolloutId: string }).rolloutId),
  }));

  app.delete('/v1/gateway/rollouts/:rolloutId', async (request, reply) => {
    await gateway.closeRollout((request.params as { rolloutId: string }).rolloutId);
    reply.status(204);
  });

  const forward = (api: ModelApi) => async (request: FastifyRequest, reply: FastifyReply) => {
    const rollout = gateway.authorize((request.params as { rolloutId: string }).rolloutId, bearer(request));
    const body = request.body;
    if (typeof body !== 'object' || body === null || Array.isArray(body))
      throw new GymError('VALIDATION_FAILED', 'the request body must be a JSON object');
    if ((body as Record<string, unknown>).stream !== true)
      return gateway.forward(rollout, api, body as Record<string, unknown>);
    // Streamed: headers go out only with the first event, so an upstream that fails at once is an ordinary error response.
    const output = new PassThrough();
    let isStarted = false;
    const start = () => {
      if (isStarted) return;
      isStarted = true;
      reply.header('content-type', 'text/event-stream').header('cache-control', 'no-cache').send(output);
    };
    try {
      await gateway.forward(rollout, api, body as Record<string, unknown>, {
        event: (name, data) => {
          start();
          output.write(`${name === null ? '' : `event: ${name}\n`}data: ${JSON.stringify(data)}\n\n`);
        },
        end: (trailer) => {
          start();
          output.end(trailer);
        },
      });
    } catch (error) {
      if (!isStarted) throw error;
      const gymError =
        error instanceof GymError ? error : new GymError('MODEL_UPSTREAM_ERROR', String(error));
      output.end(`event: error\ndata: ${JSON.stringify(gymError.toJSON())}\n\n`);
    }
    return reply;
  };

  app.post(
    '/v1/gateway/:rolloutId/v1/chat/completions',
    { bodyLimit: MODEL_BODY_LIMIT_BYTES },
    forward('chat.completions'),
  );
  app.post(
    '/v1/gateway/:rolloutId/v1/responses',
    { bodyLimit: MODEL_BODY_LIMIT_BYTES },
    forward('responses'),
  );
  app.get('/v1/gateway/:rolloutId/v1/models', async (request) => {
    const rollout = gateway.authorize((request.params as { rolloutId: string }).rolloutId, bearer(request));
    const id = rollout.upstream.model ?? 'gateway';
    return { object: 'list', data: [{ id, object: 'model', created: 0, owned_by: 'gym-gateway' }] };
  });
}
