/**
 * The daemon's tracing, from its config's `telemetry` section: nothing at all (no SDK loaded,
 * no hooks installed) unless `otlpEndpoint` is set.
 */
import { createTracing, type Tracing } from '../../core/tracing.ts';
import type { DaemonConfig } from '../config.ts';
import { RolloutTraceParents } from './rollout-parents.ts';

/** The daemon's tracing: the spans' sink and the rollouts' parents. */
export interface DaemonTracing {
  tracing: Tracing;
  parents: RolloutTraceParents;
}

/**
 * The OTLP traces URL of an endpoint: a base URL (no path) gets `/v1/traces`, as OpenTelemetry's
 * `OTEL_EXPORTER_OTLP_ENDPOINT` does; a URL with a path is used as given.
 */
export function tracesUrl(endpoint: string): string {
  const url = new URL(endpoint);
  if (url.pathname !== '' && url.pathname !== '/') return endpoint;
  url.pathname = '/v1/traces';
  return url.toString();
}

export async function createDaemonTracing(
  telemetry: DaemonConfig['telemetry'],
): Promise<DaemonTracing | undefined> {
  if (telemetry.otlpEndpoint === undefined) return undefined;
  const tracing = await createTracing(
    {
      tracesEndpoint: tracesUrl(telemetry.otlpEndpoint),
      serviceName: telemetry.serviceName,
      headers: telemetry.headers,
      maxQueueSpans: telemetry.maxQueueSpans,
      exportTimeoutMs: telemetry.exportTimeoutMs,
    },
    'gym-sandboxd',
  );
  return { tracing, parents: new RolloutTraceParents() };
}
