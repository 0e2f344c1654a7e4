/**
 * The tracing contract and its bounds, shared by the no-op (`tracing.ts`) and the SDK-backed
 * implementation (`tracing-otel.ts`), so neither imports the other's module.
 */

/** An attribute value: what a span may carry. Undefined values are left out. */
export type TraceAttributes = Record<string, string | number | boolean | undefined>;

/** One span. Every method is safe to call after `end`, and `end` is idempotent. */
export interface TraceSpan {
  setAttributes(attributes: TraceAttributes): void;
  /**
   * Marks an infrastructure fault: status error, `error.type` the given kind (a `GymError` code
   * or an error class name; never a message, which may quote what the agent wrote).
   */
  fail(errorType: string): void;
  end(): void;
  /** The W3C `traceparent` of this span, to send with a request made on its behalf; undefined when off. */
  traceparent(): string | undefined;
}

/** The ids an incoming `traceparent` names: a parent, nothing more. */
export interface TraceParent {
  traceId: string;
  spanId: string;
}

/** What a shutdown reports: how many spans ended, and how many never reached the collector. */
export interface TracingReport {
  ended: number;
  exported: number;
  /** Ended but not delivered: the queue was full, the collector refused or did not answer. */
  dropped: number;
}

export interface Tracing {
  readonly isEnabled: boolean;
  /**
   * Runs `work` in a new span, a child of the span `work`'s caller runs in (or of `parent`, or a
   * root), and ends it however `work` ends. A thrown error marks the span failed (see
   * {@link TraceSpan.fail}) and is thrown on unchanged.
   */
  inSpan<T>(
    name: string,
    attributes: TraceAttributes,
    work: (span: TraceSpan) => Promise<T>,
    parent?: TraceParent,
  ): Promise<T>;
  /** A span not tied to the caller's async scope (a daemon request), ended by the caller. */
  startSpan(name: string, attributes: TraceAttributes, parent?: TraceParent): TraceSpan;
  /** The `traceparent` of the span the caller runs in (for a request to the daemon), if any. */
  activeTraceparent(): string | undefined;
  /**
   * Sends what is queued, waiting at most the configured bound, and stops. An unreachable
   * collector costs that wait and no more; what it did not take is counted in the report.
   */
  shutdown(): Promise<TracingReport>;
}

/** Longest attribute value kept (characters): ids and names fit; anything longer is cut. */
export const MAX_ATTRIBUTE_CHARS = 256;

/** A `traceparent` of version 00 is exactly this long; anything longer is not read at all. */
const TRACEPARENT_CHARS = 55;
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/;

/**
 * The parent ids of an incoming `traceparent` header, or undefined for anything but one
 * well-formed version-00 value. Only the ids are taken: the sampled flag, `tracestate` and
 * baggage are ignored (whether to record is this process's decision), so a caller can attach a
 * span to its trace and do nothing else.
 */
export function parseTraceparent(header: unknown): TraceParent | undefined {
  if (typeof header !== 'string' || header.length !== TRACEPARENT_CHARS) return undefined;
  const match = TRACEPARENT.exec(header);
  if (match === null) return undefined;
  const [, traceId, spanId] = match as unknown as [string, string, string];
  if (/^0+$/.test(traceId) || /^0+$/.test(spanId)) return undefined;
  return { traceId, spanId };
}

/** The attributes with undefined values left out and strings cut to {@link MAX_ATTRIBUTE_CHARS}. */
export function boundedAttributes(attributes: TraceAttributes): Record<string, string | number | boolean> {
  const bounded: Record<string, string | number | boolean> = {};
  for (const [key, value] of Object.entries(attributes)) {
    if (value === undefined) continue;
    bounded[key] =
      typeof value === 'string' && value.length > MAX_ATTRIBUTE_CHARS
        ? value.slice(0, MAX_ATTRIBUTE_CHARS)
        : value;
  }
  return bounded;
}

/** The kind of a thrown error for `error.type`: its `GymError` code, else its class name. */
export function errorType(error: unknown): string {
  if (typeof error === 'object' && error !== null) {
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string' && /^[A-Z][A-Z0-9_]{0,63}$/.test(code)) return code;
    const name = (error as { name?: unknown }).name;
    if (typeof name === 'string' && /^[A-Za-z][A-Za-z0-9_]{0,63}$/.test(name)) return name;
  }
  return 'Error';
}

/** Where and how spans are sent; set by the operator (daemon config, the CLI's environment). */
export interface TracingConfig {
  /**
   * The collector's OTLP/HTTP traces URL (`http://host:4318/v1/traces`). Unset: tracing is off.
   */
  tracesEndpoint?: string;
  /** `service.name` of every span (default: the caller's, e.g. `gym-sandboxd`). */
  serviceName?: string;
  /** Headers sent with every export (a collector's API key). */
  headers?: Record<string, string>;
  /** Spans held for export at most; beyond, new spans are dropped and counted. Default 2048. */
  maxQueueSpans?: number;
  /** Spans of one trace at most (one rollout's); beyond, they are not recorded and are counted. Default 2000. */
  maxSpansPerTrace?: number;
  /** How long one export may take, and how long shutdown waits to flush (ms). Default 2000. */
  exportTimeoutMs?: number;
  /** How often queued spans are sent (ms). Default 1000. */
  scheduledDelayMs?: number;
}

/** Defaults: a full queue drops spans rather than grow; a slow collector costs at most this wait. */
export const TRACING_DEFAULTS = {
  maxQueueSpans: 2048,
  maxSpansPerTrace: 2000,
  exportTimeoutMs: 2000,
  scheduledDelayMs: 1000,
} as const;
