/**
 * Scoped access (docs/api.md, "Scoped access"): the token holder mints, lists and revokes
 * credentials that lend sandboxes with named rights; a credential may revoke itself (NeMo Gym's
 * `disconnect`), and do nothing else here.
 */
import type { FastifyInstance } from 'fastify';
import {
  AccessGrantCreatedSchema,
  AccessGrantListSchema,
  AccessGrantRequestSchema,
} from '../../core/schemas/access.ts';
import type { AccessGrants, ScopedGrant, ScopedRouteRight } from '../access/grants.ts';
import { emptyAnswer, errorAnswers, jsonAnswer } from '../openapi.ts';

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
  app.post(
    '/v1/access',
    {
      schema: {
        summary:
          'lend sandboxes: mint a scoped credential with named rights, expiring no later than their leases (token only; the credential is shown once)',
        body: AccessGrantRequestSchema,
        response: {
          201: jsonAnswer('the grant and its credential', AccessGrantCreatedSchema),
          ...errorAnswers(400, 404, 409),
        },
      },
    },
    async (request, reply) => {
      const created = await grants.mint(request.body ?? {});
      reply.status(201).header('cache-control', 'no-store');
      return created;
    },
  );

  app.get(
    '/v1/access',
    {
      schema: {
        summary: 'the live grants, without their credentials (token only)',
        response: { 200: jsonAnswer('grants', AccessGrantListSchema) },
      },
    },
    async () => ({ grants: grants.list() }),
  );

  app.delete(
    '/v1/access/:id',
    {
      config: { scoped: 'own-grant' },
      schema: {
        summary: "revoke a grant (idempotent); the token, or the grant's own credential",
        response: { 204: emptyAnswer('revoked'), ...errorAnswers(403) },
      },
    },
    async (request, reply) => {
      await grants.revoke((request.params as { id: string }).id);
      reply.status(204);
    },
  );
}
