/**
 * A span per daemon request that acts on a sandbox (create, exec, files, archives, stop, destroy)
 * or opens and closes a gateway rollout, when tracing is on. Registered after the token check,
 * so only a token holder's `traceparent` is read, and then only as a parent id.
 *
 * What a span records: the route, the sandbox id and provider, the HTTP status, an exec's status
 * and exit code. Never the command, its environment, its output, or a file's path or bytes:
 * those carry secrets (a key in a command line) and are as large as the agent likes.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { errorType, parseTraceparent, type TraceSpan } from '../../core/tracing.ts';
import type { DaemonTracing } from './daemon-tracing.ts';

/** The traced routes (method and fastify route) and their span names; no other request gets one. */
const TRACED_ROUTES: ReadonlyMap<string, string> = new Map([
  ['POST /v1/sandboxes', 'gym.sandbox.create'],
  ['DELETE /v1/sandboxes/:id', 'gym.sandbox.destroy'],
  ['POST /v1/sandboxes/:id/exec', 'gym.sandbox.exec'],
  ['PUT /v1/sandboxes/:id/files', 'gym.sandbox.files.write'],
  ['GET /v1/sandboxes/:id/files', 'gym.sandbox.files.read'],
  ['PUT /v1/sandboxes/:id/archive', 'gym.sandbox.archive.write'],
  ['GET /v1/sandboxes/:id/archive', 'gym.sandbox.archive.read'],
  ['POST /v1/sandboxes/:id/stop-processes', 'gym.sandbox.stop_processes'],
  ['POST /v1/sandboxes/:id/snapshot', 'gym.sandbox.snapshot'],
  ['POST /v1/sandboxes/:id/fork', 'gym.sandbox.fork'],
  ['POST /v1/gateway/rollouts', 'gym.gateway.rollout.open'],
  ['DELETE /v1/gateway/rollouts/:rolloutId', 'gym.gateway.rollout.close'],
]);

interface RequestTrace {
  span: TraceSpan;
  errorType?: string;
}

export interface RequestSpanOptions {
  /** The provider of a sandbox the daemon knows, else undefined. */
  providerOf(sandboxId: string): string | undefined;
}

const asRecord = (value: unknown): Record<string, unknown> | undefined =>
  typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;

/** Installs the hooks; with tracing off, installs none (no cost per request). */
export function registerRequestSpans(
  app: FastifyInstance,
  daemonTracing: DaemonTracing | undefined,
  options: RequestSpanOptions,
): void {
  if (daemonTracing === undefined || !daemonTracing.tracing.isEnabled) return;
  const { tracing, parents } = daemonTracing;
  const traces = new WeakMap<FastifyRequest, RequestTrace>();

  app.addHook('onRequest', async (request) => {
    const route = request.routeOptions.url;
    const name = route === undefined ? undefined : TRACED_ROUTES.get(`${request.method} ${route}`);
    if (name === undefined) return;
    const params = asRecord(request.params);
    const sandboxId = typeof params?.id === 'string' ? params.id : undefined;
    const rolloutId = typeof params?.rolloutId === 'string' ? params.rolloutId : undefined;
    const parent = parseTraceparent(request.headers.traceparent);
    const span = tracing.startSpan(
      name,
      {
        'http.request.method': request.method,
        'http.route': route,
        'gym.sandbox.id': sandboxId,
        'gym.provider': sandboxId === undefined ? undefined : options.providerOf(sandboxId),
        'gym.rollout.id': rolloutId,
      },
      parent,
    );
    traces.set(request, { span });
    // Model calls of a rollout nest under the span that opened it, whatever the agent sends.
    if (name === 'gym.gateway.rollout.close' && rolloutId !== undefined) parents.forget(rolloutId);
  });

  // The reply's object before it is serialised: the created sandbox, an exec's result.
  app.addHook('preSerialization', async (request, _reply, payload) => {
    const trace = traces.get(request);
    const body = asRecord(payload);
    if (trace === undefined || body === undefined) return payload;
    if (request.routeOptions.url === '/v1/sandboxes/:id/exec')
      trace.span.setAttributes({
        'gym.exec.status': typeof body.status === 'string' ? body.status : undefined,
        'gym.exec.exit_code': typeof body.exitCode === 'number' ? body.exitCode : undefined,
        'gym.exec.sandbox_lost': body.sandboxLost === true ? true : undefined,
      });
    else if (request.routeOptions.url === '/v1/sandboxes')
      trace.span.setAttributes({
        'gym.sandbox.id': typeof body.id === 'string' ? body.id : undefined,
        'gym.provider': typeof body.provider === 'string' ? body.provider : undefined,
      });
    else if (request.routeOptions.url === '/v1/gateway/rollouts' && typeof body.rolloutId === 'string') {
      // The id only: the reply's key is the rollout's secret.
      trace.span.setAttributes({ 'gym.rollout.id': body.rolloutId });
      const parent = parseTraceparent(request.headers.traceparent);
      if (parent !== undefined) parents.remember(body.rolloutId, parent);
    }
    return payload;
  });

  app.addHook('onError', async (request, _reply, error) => {
    const trace = traces.get(request);
    if (trace !== undefined) trace.errorType = errorType(error);
  });

  app.addHook('onResponse', async (request, reply) => {
    const trace = traces.get(request);
    if (trace === undefined) return;
    traces.delete(request);
    const status = reply.statusCode;
    trace.span.setAttributes({ 'http.response.status_code': status });
    if (status >= 500) trace.span.fail(trace.errorType ?? `http_${status}`);
    else if (trace.errorType !== undefined) trace.span.setAttributes({ 'error.type': trace.errorType });
    trace.span.end();
  });

  // The caller went away before the reply: the span ends here, marked so.
  app.addHook('onRequestAbort', async (request) => {
    const trace = traces.get(request);
    if (trace === undefined) return;
    traces.delete(request);
    trace.span.fail('aborted');
    trace.span.end();
  });
}
