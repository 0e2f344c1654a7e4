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

/** The OTLP traces URL of a base endpoint (`/v1/traces` below it, unless it names that path already). */
export function tracesUrl(endpoint: string): string {
  const trimmed = endpoint.replace(/\/+$/, '');
  return trimmed.endsWith('/v1/traces') ? trimmed : `${trimmed}/v1/traces`;
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
