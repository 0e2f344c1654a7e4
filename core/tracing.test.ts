import { spawn } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startOtlpCollector } from '../test/fixtures/otlp-collector.ts';
import {
  boundedAttributes,
  createTracing,
  MAX_ATTRIBUTE_CHARS,
  NOOP_TRACING,
  parseTraceparent,
  tracingConfigFromEnvironment,
} from './tracing.ts';

const tracingModule = new URL('./tracing.ts', import.meta.url).pathname;

/** Runs `body` in a fresh Node process and returns the `@opentelemetry` modules it resolved. */
async function openTelemetryModulesLoadedBy(body: string): Promise<string[]> {
  const script = `
    import { registerHooks } from 'node:module';
    const seen = new Set();
    registerHooks({
      resolve(specifier, context, next) {
        if (specifier.startsWith('@opentelemetry/')) seen.add(specifier);
        return next(specifier, context);
      },
    });
    const tracing = await import(${JSON.stringify(tracingModule)});
    ${body}
    process.stdout.write(JSON.stringify([...seen]));
  `;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => {
    stdout += chunk;
  });
  child.stderr.on('data', (chunk) => {
    stderr += chunk;
  });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  if (code !== 0) throw new Error(`child exited ${code}: ${stderr}`);
  return JSON.parse(stdout) as string[];
}

describe('parseTraceparent', () => {
  const good = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

  it('takes the ids of a well-formed version-00 header, whatever its flags say', () => {
    expect(parseTraceparent(good)).toEqual({
      traceId: '0af7651916cd43dd8448eb211c80319c',
      spanId: 'b7ad6b7169203331',
    });
    expect(parseTraceparent(good.replace(/-01$/, '-00'))).toEqual(parseTraceparent(good));
  });

  it('refuses anything else: other versions, extra fields, oversized, zero ids, upper case, arrays', () => {
    for (const header of [
      undefined,
      '',
      good.replace(/^00/, 'ff'),
      `${good}-extra`,
      `${good}${'x'.repeat(10_000)}`,
      '00-00000000000000000000000000000000-b7ad6b7169203331-01',
      '00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01',
      good.toUpperCase(),
      [good, good],
      ` ${good}`.slice(0, 55),
    ])
      expect(parseTraceparent(header)).toBeUndefined();
  });
});

describe('tracing off', () => {
  it('is the no-op unless an endpoint is configured, and runs the work unchanged', async () => {
    expect(await createTracing(undefined, 'test')).toBe(NOOP_TRACING);
    expect(await createTracing({}, 'test')).toBe(NOOP_TRACING);
    expect(await createTracing({ tracesEndpoint: '' }, 'test')).toBe(NOOP_TRACING);
    expect(tracingConfigFromEnvironment({})).toBeUndefined();
    const result = await NOOP_TRACING.inSpan('gym.rollout', { 'gym.task.index': 1 }, async (span) => {
      span.setAttributes({ anything: 'x' });
      span.fail('INTERNAL');
      span.end();
      return NOOP_TRACING.activeTraceparent() ?? span.traceparent() ?? 'no trace';
    });
    expect(result).toBe('no trace');
    expect(await NOOP_TRACING.shutdown()).toEqual({ ended: 0, exported: 0, dropped: 0 });
  });

  it('loads no OpenTelemetry module at all, while tracing on loads the SDK (so the check can see one)', async () => {
    const off = await openTelemetryModulesLoadedBy(`
      const off = await tracing.createTracing(tracing.tracingConfigFromEnvironment({}), 'test');
      for (let index = 0; index < 1000; index += 1)
        await off.inSpan('gym.rollout', {}, async (span) => span.setAttributes({ index }));
    `);
    expect(off).toEqual([]);
    const on = await openTelemetryModulesLoadedBy(`
      const on = await tracing.createTracing({ tracesEndpoint: 'http://127.0.0.1:9/v1/traces', exportTimeoutMs: 100 }, 'test');
      await on.shutdown();
    `);
    expect(on).toEqual(
      expect.arrayContaining(['@opentelemetry/sdk-trace', '@opentelemetry/exporter-trace-otlp-proto']),
    );
  }, 30_000);

  it('reads the standard variables, the traces endpoint before the base one', () => {
    expect(tracingConfigFromEnvironment({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' })).toEqual({
      tracesEndpoint: 'http://collector:4318/v1/traces',
    });
    expect(
      tracingConfigFromEnvironment({
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://other:4318/custom',
        OTEL_SERVICE_NAME: 'trainer-eval',
      }),
    ).toEqual({ tracesEndpoint: 'http://other:4318/custom', serviceName: 'trainer-eval' });
  });
});

describe('tracing on, against a loopback collector', () => {
  let collector: Awaited<ReturnType<typeof startOtlpCollector>>;
  beforeAll(async () => {
    collector = await startOtlpCollector();
  });
  afterAll(async () => {
    await collector.close();
  });

  it('nests spans by async scope and by traceparent, caps attributes, and ends failed spans as errors', async () => {
    const tracing = await createTracing(
      { tracesEndpoint: `${collector.endpoint}/v1/traces`, serviceName: 'unit', scheduledDelayMs: 50 },
      'default-name',
    );
    let sent: string | undefined;
    await tracing.inSpan('root', { 'gym.task.index': 3, long: 'y'.repeat(10_000) }, async () => {
      await tracing.inSpan('child', {}, async () => {
        sent = tracing.activeTraceparent();
      });
      await expect(
        tracing.inSpan('failing', {}, async () => {
          throw Object.assign(new Error('secret text the agent wrote'), { code: 'PROVIDER_TIMEOUT' });
        }),
      ).rejects.toThrow('secret text');
    });
    // The other side of an HTTP hop: only the header's ids cross.
    const remote = tracing.startSpan('remote', {}, parseTraceparent(sent));
    remote.end();
    remote.end();
    const report = await tracing.shutdown();
    expect(report).toEqual({ ended: 4, exported: 4, dropped: 0 });
    const byName = new Map(collector.spans.map((span) => [span.name, span]));
    const root = byName.get('root')!;
    expect(root).toMatchObject({ parentSpanId: '', serviceName: 'unit', statusCode: 0 });
    expect(root.attributes['gym.task.index']).toBe(3);
    expect(String(root.attributes.long).length).toBe(MAX_ATTRIBUTE_CHARS);
    expect(byName.get('child')).toMatchObject({ traceId: root.traceId, parentSpanId: root.spanId });
    expect(byName.get('failing')).toMatchObject({
      parentSpanId: root.spanId,
      statusCode: 2,
      statusMessage: 'PROVIDER_TIMEOUT',
      attributes: { 'error.type': 'PROVIDER_TIMEOUT' },
    });
    expect(Buffer.concat(collector.bodies).includes('secret text')).toBe(false);
    expect(byName.get('remote')).toMatchObject({
      traceId: root.traceId,
      parentSpanId: byName.get('child')!.spanId,
    });
    expect(collector.rejected).toBe(0);
  });

  it('holds one trace to its span budget, however many spans its callers start', async () => {
    collector.spans.length = 0;
    const tracing = await createTracing(
      { tracesEndpoint: `${collector.endpoint}/v1/traces`, maxSpansPerTrace: 10, scheduledDelayMs: 50 },
      'budget',
    );
    await tracing.inSpan('root', {}, async (root) => {
      const parent = parseTraceparent(root.traceparent());
      for (let index = 0; index < 200; index += 1) tracing.startSpan('exec', {}, parent).end();
    });
    const report = await tracing.shutdown();
    expect(collector.spans).toHaveLength(10);
    expect(report).toMatchObject({ ended: 10, exported: 10, dropped: 191 });
  });
});

describe('tracing on, the collector never answers', () => {
  let server: Server;
  let endpoint = '';
  beforeAll(async () => {
    // Accepts every connection and never replies: the worst a collector can do short of refusing.
    server = createServer(() => {});
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it('neither fails nor slows the traced work: the queue drops and counts, shutdown waits its bound', async () => {
    const tracing = await createTracing(
      { tracesEndpoint: endpoint, maxQueueSpans: 64, exportTimeoutMs: 300, scheduledDelayMs: 20 },
      'stalled',
    );
    const started = performance.now();
    for (let index = 0; index < 5000; index += 1)
      await tracing.inSpan('gym.rollout', { index }, async () => index);
    const workMs = performance.now() - started;
    const shutdownStarted = performance.now();
    const report = await tracing.shutdown();
    const shutdownMs = performance.now() - shutdownStarted;
    expect(report.ended).toBe(5000);
    expect(report.exported).toBe(0);
    expect(report.dropped).toBe(5000);
    // 5000 spans on a shared 2-core host; the work must not wait on the collector.
    expect(workMs).toBeLessThan(5000);
    expect(shutdownMs).toBeLessThan(300 + 500 + 500);
  }, 30_000);
});

describe('boundedAttributes', () => {
  it('leaves out undefined values and cuts long strings', () => {
    expect(boundedAttributes({ a: undefined, b: 1, c: true, d: 'x'.repeat(1000) })).toEqual({
      b: 1,
      c: true,
      d: 'x'.repeat(MAX_ATTRIBUTE_CHARS),
    });
  });
});
