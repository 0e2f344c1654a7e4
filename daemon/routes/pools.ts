import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { PoolDefinitionSchema, PoolStatsSchema } from '../../core/schemas/pool.ts';
import { emptyAnswer, errorAnswers, jsonAnswer } from '../openapi.ts';
import type { PoolManager } from '../pools/pool-manager.ts';

export function registerPoolRoutes(app: FastifyInstance, pools: PoolManager): void {
  app.put(
    '/v1/pools/:name',
    {
      schema: {
        summary: 'define or redefine a pool (it fills in the background)',
        body: PoolDefinitionSchema,
        response: {
          200: jsonAnswer('redefined', PoolStatsSchema),
          201: jsonAnswer('created', PoolStatsSchema),
          ...errorAnswers(400),
        },
      },
    },
    async (request, reply) => {
      const { name } = request.params as { name: string };
      const { stats, isNew } = await pools.define(name, request.body ?? {});
      reply.status(isNew ? 201 : 200);
      return stats;
    },
  );

  app.get(
    '/v1/pools',
    {
      schema: {
        summary: 'list pools with their stats',
        response: { 200: jsonAnswer('pools', z.object({ pools: z.array(PoolStatsSchema) })) },
      },
    },
    async () => ({ pools: pools.list() }),
  );

  app.get(
    '/v1/pools/:name',
    {
      schema: {
        summary: "a pool's stats",
        response: { 200: jsonAnswer('stats', PoolStatsSchema), ...errorAnswers(404) },
      },
    },
    async (request) => pools.stats((request.params as { name: string }).name),
  );

  app.delete(
    '/v1/pools/:name',
    {
      schema: {
        summary: 'drain a pool: idle members destroyed, leased ones keep their leases (idempotent)',
        response: { 204: emptyAnswer('drained') },
      },
    },
    async (request, reply) => {
      await pools.remove((request.params as { name: string }).name);
      reply.status(204);
    },
  );
}
