/**
 * `gym serve`'s HTTP server: NeMo Gym's agent-server contract for rollout collection. `POST /run`
 * takes one row (a task row with NeMo Gym's `responses_create_params`, `_ng_task_index`,
 * `_ng_rollout_index`, `agent_ref`) and answers with the line `gym eval run` writes for it (NeMo
 * Gym's verify response: the row, `response`, `reward`, `mask_sample`, `failure_reason`, our
 * fields under `_gym`); `POST /aggregate_metrics` takes `{verify_responses: [...]}` and answers
 * NeMo Gym's `AggregateMetrics`, computed as `gym eval run` computes its metrics file.
 *
 * Above the daemon and the runner (a row runs through `environments/runner/`, which reaches the
 * daemon through its client), never inside the daemon. Admission is bounded (`admission.ts`),
 * repeats with an `Idempotency-Key` get the first answer (`run-keys.ts`), and with a token every
 * route but `/healthz` needs `Authorization: Bearer <token>`, compared in constant time.
 */
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply } from 'fastify';
import { GymError, isGymError, toGymError } from '../../core/errors.ts';
import { sameSecret } from '../../core/page-security.ts';
import type { AggregateMetrics } from '../../environments/runner/eval-metrics.ts';
import type { RunAdmission } from './admission.ts';
import type { RunKeys } from './run-keys.ts';

type Json = Record<string, unknown>;

/** A row's body at most (a SWE row carries its patches): 8 MiB. */
export const DEFAULT_BODY_LIMIT_BYTES = 8 * 1024 * 1024;

/** An `Idempotency-Key` at most, as the daemon takes it. */
const MAX_KEY_CHARS = 255;

export interface RolloutServerOptions {
  /** Runs one row to its end and answers its line (`environments/runner/row-runner.ts`). */
  runRow(row: Json): Promise<Json>;
  /** The metrics of lines sent back (`aggregateMetrics` of the runner). */
  aggregate(lines: Json[]): AggregateMetrics;
  admission: RunAdmission;
  keys: RunKeys;
  /**
   * The bearer token every route but `/healthz` needs; undefined: none, which the command allows
   * only on a loopback address.
   */
  token: string | undefined;
  bodyLimitBytes?: number;
  logger?: FastifyBaseLogger;
}

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

function sendError(reply: FastifyReply, error: GymError): FastifyReply {
  const retryAfter = error.details.retryAfterSeconds;
  if (typeof retryAfter === 'number') void reply.header('retry-after', String(retryAfter));
  return reply.code(error.httpStatus).send(error.toJSON());
}

export function buildRolloutServer(options: RolloutServerOptions): FastifyInstance {
  const app = Fastify({
    bodyLimit: options.bodyLimitBytes ?? DEFAULT_BODY_LIMIT_BYTES,
    ...(options.logger === undefined ? {} : { loggerInstance: options.logger }),
  });
  const { admission, keys, token } = options;

  app.setErrorHandler((error, _request, reply) => {
    const statusCode = (error as { statusCode?: number }).statusCode;
    // Fastify's own refusals (a body too large, not JSON) are the client's; anything else is ours.
    const wrapped = isGymError(error)
      ? error
      : statusCode === 413
        ? new GymError('PAYLOAD_TOO_LARGE', (error as Error).message)
        : statusCode !== undefined && statusCode >= 400 && statusCode < 500
          ? new GymError('VALIDATION_FAILED', (error as Error).message)
          : toGymError(error);
    if (wrapped.code === 'INTERNAL') options.logger?.error({ err: error }, 'a row failed');
    return sendError(reply, wrapped);
  });
  app.setNotFoundHandler((request, reply) =>
    sendError(reply, new GymError('ROUTE_NOT_FOUND', `no route ${request.method} ${request.url}`)),
  );

  app.addHook('onRequest', async (request, reply) => {
    if (token === undefined || request.url === '/healthz') return;
    const header = request.headers.authorization ?? '';
    const given = header.startsWith('Bearer ') ? header.slice('Bearer '.length) : '';
    if (!sameSecret(given, token))
      return sendError(
        reply,
        new GymError('UNAUTHORIZED', 'a bearer token is required (Authorization: Bearer ...)'),
      );
  });

  // Liveness only: how busy it is is for token holders (`GET /status`).
  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/status', async () => ({ ...admission.state(), idempotency: keys.size() }));

  app.post('/run', async (request, reply) => {
    const row = request.body;
    if (!isObject(row)) throw new GymError('VALIDATION_FAILED', 'the body must be one row, a JSON object');
    const key = request.headers['idempotency-key'];
    if (Array.isArray(key) || (key !== undefined && (key === '' || key.length > MAX_KEY_CHARS)))
      throw new GymError(
        'VALIDATION_FAILED',
        `Idempotency-Key must be one value of 1 to ${MAX_KEY_CHARS} characters`,
      );
    // A trainer that gave up on a row while it waited (its connection closed) gets no run of it.
    let isAbandoned = false;
    reply.raw.once('close', () => {
      if (!reply.raw.writableFinished) isAbandoned = true;
    });
    const run = async (): Promise<Json> => {
      const entered = admission.enter();
      if (entered === undefined) {
        const state = admission.state();
        const retryAfterSeconds = admission.retryAfterSeconds();
        throw new GymError(
          'CAPACITY_EXCEEDED',
          `gym serve runs ${state.running} rows and ${state.waiting} wait: send this row again in ${retryAfterSeconds} s`,
          { details: { ...state, retryAfterSeconds } },
        );
      }
      const turn = await entered;
      if (isAbandoned) {
        turn.release();
        throw new GymError('VALIDATION_FAILED', 'the row was given up while it waited: not run');
      }
      try {
        return await options.runRow(row);
      } finally {
        turn.release();
      }
    };
    if (key === undefined) return run();
    const { answer, replayed } = await keys.answer(key, row, run);
    if (replayed) void reply.header('idempotent-replayed', 'true');
    return answer;
  });

  app.post('/aggregate_metrics', async (request) => {
    const body = request.body;
    if (!isObject(body) || !Array.isArray(body.verify_responses) || !body.verify_responses.every(isObject))
      throw new GymError('VALIDATION_FAILED', 'the body must be {"verify_responses": [objects]}');
    return options.aggregate(body.verify_responses as Json[]);
  });

  return app;
}
