/**
 * Optional OpenTelemetry traces (docs/tracing.md). Off unless an operator names a collector:
 * then {@link createTracing} loads the SDK (`tracing-otel.ts`, by dynamic import) and spans go
 * out over OTLP/HTTP. Off, every caller gets {@link NOOP_TRACING}, whose spans are one shared
 * object and whose `inSpan` is a plain call: no SDK is loaded, nothing is allocated per span.
 *
 * What goes into a span is decided by the code that names it, never by what an agent sends:
 * attribute values are cut to {@link MAX_ATTRIBUTE_CHARS}, command text and output never go in
 * (they carry secrets and are as large as the agent likes), and an incoming `traceparent` is
 * read only as the id of a parent (see {@link parseTraceparent}).
 */

import { TRACING_DEFAULTS, type TraceSpan, type Tracing, type TracingConfig } from './tracing-shared.ts';

export {
  boundedAttributes,
  errorType,
  MAX_ATTRIBUTE_CHARS,
  parseTraceparent,
  TRACING_DEFAULTS,
  type TraceAttributes,
  type TraceParent,
  type TraceSpan,
  type Tracing,
  type TracingConfig,
  type TracingReport,
} from './tracing-shared.ts';

const NOOP_SPAN: TraceSpan = {
  setAttributes: () => {},
  fail: () => {},
  end: () => {},
  traceparent: () => undefined,
};

/** Tracing off: no SDK, no spans, no cost beyond a call. */
export const NOOP_TRACING: Tracing = {
  isEnabled: false,
  inSpan: (_name, _attributes, work) => work(NOOP_SPAN),
  startSpan: () => NOOP_SPAN,
  activeTraceparent: () => undefined,
  shutdown: async () => ({ ended: 0, exported: 0, dropped: 0 }),
};

/**
 * {@link NOOP_TRACING} unless `config.tracesEndpoint` is set; then the OpenTelemetry SDK,
 * imported only now, exporting to it.
 */
export async function createTracing(
  config: TracingConfig | undefined,
  defaultServiceName: string,
): Promise<Tracing> {
  if (config?.tracesEndpoint === undefined || config.tracesEndpoint === '') return NOOP_TRACING;
  const { createOtelTracing } = await import('./tracing-otel.ts');
  return createOtelTracing(
    { ...TRACING_DEFAULTS, ...config, tracesEndpoint: config.tracesEndpoint },
    defaultServiceName,
  );
}

/**
 * The tracing config the standard OpenTelemetry variables give (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
 * else `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`; `OTEL_SERVICE_NAME`), or undefined when
 * neither endpoint is set. `OTEL_EXPORTER_OTLP_HEADERS` is read by the exporter itself.
 */
export function tracingConfigFromEnvironment(
  env: Readonly<Record<string, string | undefined>>,
): TracingConfig | undefined {
  const traces = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT;
  const tracesEndpoint =
    traces !== undefined && traces !== ''
      ? traces
      : base !== undefined && base !== ''
        ? `${base.replace(/\/+$/, '')}/v1/traces`
        : undefined;
  if (tracesEndpoint === undefined) return undefined;
  return {
    tracesEndpoint,
    ...(env.OTEL_SERVICE_NAME ? { serviceName: env.OTEL_SERVICE_NAME } : {}),
  };
}
