import type { FastifyInstance } from 'fastify';
import type { PoolManager } from '../pools/pool-manager.ts';

export function registerPoolRoutes(app: FastifyInstance, pools: PoolManager): void {
  app.put('/v1/pools/:name', async (request, reply) => {
    const { name } = request.params as { name: string };
    const { stats, isNew } = await pools.define(name, request.body ?? {});
    reply.status(isNew ? 201 : 200);
    return stats;
  });

  app.get('/v1/pools', async () => ({ pools: pools.list() }));

  app.get('/v1/pools/:name', async (request) => pools.stats((request.params as { name: string }).name));

  app.delete('/v1/pools/:name', async (request, reply) => {
    await pools.remove((request.params as { name: string }).name);
    reply.status(204);
  });
}
