/** A sandbox's service: `GET /v1/sandboxes/{id}/service/output`, the latest of what it printed. */
import type { FastifyInstance } from 'fastify';
import { GymError } from '../../core/errors.ts';
import { SANDBOX_ID_PATTERN } from '../../core/ids.ts';
import { ServiceOutputSchema } from '../../core/schemas/service.ts';
import { errorAnswers, jsonAnswer } from '../openapi.ts';
import type { SandboxLifecycle } from '../sandboxes/lifecycle.ts';
import type { SandboxServices } from '../sandboxes/services.ts';

export function registerServiceRoutes(
  app: FastifyInstance,
  lifecycle: SandboxLifecycle,
  services: SandboxServices,
): void {
  app.get(
    '/v1/sandboxes/:id/service/output',
    {
      schema: {
        summary:
          "the latest output of the sandbox's service (its entrypoint), per stream, with how many bytes before it were dropped",
        response: {
          200: jsonAnswer('the tail of its stdout and stderr', ServiceOutputSchema),
          ...errorAnswers(400, 404),
        },
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      if (!SANDBOX_ID_PATTERN.test(id))
        throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist (not a sandbox id)`);
      lifecycle.record(id);
      return services.output(id);
    },
  );
}
