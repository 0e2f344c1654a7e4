/**
 * Tracing on: the OpenTelemetry SDK behind the {@link Tracing} contract. Imported only by
 * `createTracing` when a collector is configured, so a process with tracing off never loads it.
 *
 * Bounded everywhere an agent could push: the batch queue drops (and counts) rather than grow,
 * one trace holds at most `maxSpansPerTrace` spans, attribute values and counts are capped by
 * the SDK's span limits as well as by `boundedAttributes`, and export and shutdown each wait at
 * most `exportTimeoutMs`, so a collector that is down costs an eval nothing but the spans.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import {
  type Context,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  TraceFlags,
  trace,
} from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  BatchSpanProcessor,
  type ReadableSpan,
  type SpanExporter,
  type SpanProcessor,
  TracerProvider,
} from '@opentelemetry/sdk-trace';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';
import {
  boundedAttributes,
  errorType,
  MAX_ATTRIBUTE_CHARS,
  type TRACING_DEFAULTS,
  type TraceAttributes,
  type TraceParent,
  type TraceSpan,
  type Tracing,
  type TracingConfig,
  type TracingReport,
} from './tracing-shared.ts';

type ResolvedConfig = TracingConfig & { [Key in keyof typeof TRACING_DEFAULTS]: number } & {
  tracesEndpoint: string;
};

/** Traces whose span counts are remembered at once; the oldest are forgotten first. */
const MAX_TRACKED_TRACES = 10_000;

/** Attributes one span may hold: ours are about a dozen. */
const MAX_ATTRIBUTES_PER_SPAN = 32;

/** Counts what the exporter delivered, so the report can say what it did not. */
class CountingExporter implements SpanExporter {
  exported = 0;
  readonly #inner: SpanExporter;
  constructor(inner: SpanExporter) {
    this.#inner = inner;
  }
  export(spans: ReadableSpan[], resultCallback: Parameters<SpanExporter['export']>[1]): void {
    this.#inner.export(spans, (result) => {
      if (result.code === 0) this.exported += spans.length;
      resultCallback(result);
    });
  }
  shutdown(): Promise<void> {
    return this.#inner.shutdown();
  }
  forceFlush(): Promise<void> {
    return this.#inner.forceFlush?.() ?? Promise.resolve();
  }
}

/** Counts spans as they end, before the batch processor may drop them. */
class CountingProcessor implements SpanProcessor {
  ended = 0;
  onStart(): void {}
  onEnd(): void {
    this.ended += 1;
  }
  forceFlush(): Promise<void> {
    return Promise.resolve();
  }
  shutdown(): Promise<void> {
    return Promise.resolve();
  }
}

class OtelSpan implements TraceSpan {
  readonly #span: Span;
  #isEnded = false;
  constructor(span: Span) {
    this.#span = span;
  }
  get span(): Span {
    return this.#span;
  }
  setAttributes(attributes: TraceAttributes): void {
    if (!this.#isEnded) this.#span.setAttributes(boundedAttributes(attributes));
  }
  fail(kind: string): void {
    if (this.#isEnded) return;
    const type = kind.slice(0, MAX_ATTRIBUTE_CHARS);
    this.#span.setAttribute('error.type', type);
    this.#span.setStatus({ code: SpanStatusCode.ERROR, message: type });
  }
  end(): void {
    if (this.#isEnded) return;
    this.#isEnded = true;
    this.#span.end();
  }
  traceparent(): string | undefined {
    const context = this.#span.spanContext();
    return `00-${context.traceId}-${context.spanId}-0${context.traceFlags & TraceFlags.SAMPLED}`;
  }
}

/** A span beyond its trace's budget: not recorded, its parent's ids passed on. */
class UnrecordedSpan implements TraceSpan {
  readonly #traceparent: string | undefined;
  constructor(traceparent: string | undefined) {
    this.#traceparent = traceparent;
  }
  setAttributes(): void {}
  fail(): void {}
  end(): void {}
  traceparent(): string | undefined {
    return this.#traceparent;
  }
}

export function createOtelTracing(config: ResolvedConfig, defaultServiceName: string): Tracing {
  const exporter = new CountingExporter(
    new OTLPTraceExporter({
      url: config.tracesEndpoint,
      ...(config.headers === undefined ? {} : { headers: config.headers }),
      timeoutMillis: config.exportTimeoutMs,
    }),
  );
  const counter = new CountingProcessor();
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ [ATTR_SERVICE_NAME]: config.serviceName ?? defaultServiceName }),
    spanLimits: {
      attributeValueLengthLimit: MAX_ATTRIBUTE_CHARS,
      attributeCountLimit: MAX_ATTRIBUTES_PER_SPAN,
      eventCountLimit: 0,
      linkCountLimit: 0,
    },
    spanProcessors: [
      counter,
      new BatchSpanProcessor({
        exporter,
        maxQueueSize: config.maxQueueSpans,
        maxExportBatchSize: Math.min(512, config.maxQueueSpans),
        scheduledDelayMillis: config.scheduledDelayMs,
        exportTimeoutMillis: config.exportTimeoutMs,
      }),
    ],
  });
  const tracer = provider.getTracer('gym');
  const active = new AsyncLocalStorage<OtelSpan>();
  const spansPerTrace = new Map<string, number>();
  let overBudget = 0;

  /** Whether one more span fits the trace's budget (counted when it does not). */
  const admit = (traceId: string | undefined): boolean => {
    if (traceId === undefined) return true;
    const count = spansPerTrace.get(traceId) ?? 0;
    if (count >= config.maxSpansPerTrace) {
      overBudget += 1;
      return false;
    }
    if (count === 0 && spansPerTrace.size >= MAX_TRACKED_TRACES) {
      const oldest = spansPerTrace.keys().next().value;
      if (oldest !== undefined) spansPerTrace.delete(oldest);
    }
    spansPerTrace.set(traceId, count + 1);
    return true;
  };

  const parentContext = (parent: TraceParent | undefined): { context: Context; traceId?: string } => {
    if (parent !== undefined)
      return {
        context: trace.setSpanContext(ROOT_CONTEXT, {
          traceId: parent.traceId,
          spanId: parent.spanId,
          // Ours to decide, whatever the caller's flag said.
          traceFlags: TraceFlags.SAMPLED,
          isRemote: true,
        }),
        traceId: parent.traceId,
      };
    const current = active.getStore();
    if (current === undefined) return { context: ROOT_CONTEXT };
    return {
      context: trace.setSpan(ROOT_CONTEXT, current.span),
      traceId: current.span.spanContext().traceId,
    };
  };

  const start = (name: string, attributes: TraceAttributes, parent?: TraceParent): TraceSpan => {
    const { context, traceId } = parentContext(parent);
    if (!admit(traceId))
      return new UnrecordedSpan(
        parent === undefined ? active.getStore()?.traceparent() : `00-${parent.traceId}-${parent.spanId}-01`,
      );
    const span = tracer.startSpan(
      name,
      { kind: SpanKind.INTERNAL, attributes: boundedAttributes(attributes) },
      context,
    );
    const wrapped = new OtelSpan(span);
    if (traceId === undefined) admit(span.spanContext().traceId);
    return wrapped;
  };

  let shutdown: Promise<TracingReport> | undefined;
  return {
    isEnabled: true,
    startSpan: start,
    async inSpan(name, attributes, work, parent) {
      const span = start(name, attributes, parent);
      const run = () => work(span);
      try {
        return await (span instanceof OtelSpan ? active.run(span, run) : run());
      } catch (error) {
        span.fail(errorType(error));
        throw error;
      } finally {
        span.end();
      }
    },
    activeTraceparent: () => active.getStore()?.traceparent(),
    shutdown() {
      shutdown ??= (async () => {
        let timer: NodeJS.Timeout | undefined;
        // The SDK bounds each export already; this bounds the whole flush, whatever it does.
        await Promise.race([
          provider.shutdown().catch(() => {}),
          new Promise<void>((resolve) => {
            timer = setTimeout(resolve, config.exportTimeoutMs + 500);
            timer.unref();
          }),
        ]);
        clearTimeout(timer);
        return {
          ended: counter.ended,
          exported: exporter.exported,
          dropped: counter.ended - exporter.exported + overBudget,
        };
      })();
      return shutdown;
    },
  };
}
