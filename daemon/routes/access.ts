/**
 * Scoped access (docs/api.md, "Scoped access"): the token holder mints, lists and revokes
 * credentials that lend sandboxes with named rights; a credential may revoke itself (NeMo Gym's
 * `disconnect`), and do nothing else here.
 */
import type { FastifyInstance } from 'fastify';
import type { AccessGrants, ScopedGrant, ScopedRouteRight } from '../access/grants.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** What a scoped credential may do on this route; absent, none may call it. */
    scoped?: ScopedRouteRight;
  }
  interface FastifyRequest {
    /** The scoped grant the request authenticated with; undefined for the daemon's token. */
    accessGrant?: ScopedGrant;
  }
}

export function registerAccessRoutes(app: FastifyInstance, grants: AccessGrants): void {
  app.post('/v1/access', async (request, reply) => {
    const created = await grants.mint(request.body ?? {});
    reply.status(201).header('cache-control', 'no-store');
    return created;
  });

  app.get('/v1/access', async () => ({ grants: grants.list() }));

  app.delete('/v1/access/:id', { config: { scoped: 'own-grant' } }, async (request, reply) => {
    await grants.revoke((request.params as { id: string }).id);
    reply.status(204);
  });
}
