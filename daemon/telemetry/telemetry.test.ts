/**
 * The daemon's spans against a loopback collector: what an incoming `traceparent` may do (name a
 * parent, from a token holder, well formed) and may not (attach an agent's model calls to a trace
 * of its choosing, reach a span without the token, oversized), and error statuses.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ModelScriptSchema } from '../../harnesses/scripted-model/script.ts';
import { startScriptedModelServer } from '../../harnesses/scripted-model/server.ts';
import type { ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../../test/daemon-harness.ts';
import { MemoryProvider, type MemoryProviderOptions } from '../../test/fixtures/memory-provider.ts';
import { type OtlpCollector, startOtlpCollector } from '../../test/fixtures/otlp-collector.ts';
import { tracesUrl } from './daemon-tracing.ts';

const traceparent = (traceId: string, spanId: string) => `00-${traceId}-${spanId}-01`;
const RUNNER = { traceId: 'a'.repeat(32), spanId: 'b'.repeat(16) };
const FORGED = { traceId: 'e'.repeat(32), spanId: 'f'.repeat(16) };

let daemon: TestDaemon | undefined;
let collector: OtlpCollector | undefined;
let closeModel: (() => Promise<void>) | undefined;

afterEach(async () => {
  await daemon?.cleanup();
  await collector?.close();
  await closeModel?.();
  daemon = undefined;
  collector = undefined;
  closeModel = undefined;
});

async function start(options: MemoryProviderOptions = {}) {
  collector = await startOtlpCollector();
  const model = await startScriptedModelServer(
    ModelScriptSchema.parse({ conversations: [{ replies: [{ content: 'ok' }] }] }),
  );
  closeModel = model.close;
  daemon = await startTestDaemon(
    {
      providers: [{ name: 'memory' }],
      gateway: { upstream: { baseUrl: model.baseUrl, model: 'policy' }, maxRetries: 0 },
      telemetry: { otlpEndpoint: `${collector.endpoint}/v1/traces` },
    },
    {
      factories: {
        memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context, options),
      },
    },
  );
  return { daemon, collector };
}

/** Stops the daemon (which flushes its spans) and returns what the collector decoded. */
async function flushed(test: TestDaemon, sink: OtlpCollector) {
  await test.cleanup();
  daemon = undefined;
  expect(sink.rejected).toBe(0);
  return sink.spans;
}

describe('daemon spans', () => {
  it('nest a token holder’s requests under its traceparent; without the token, or oversized, it is never read', async () => {
    const { daemon: test, collector: sink } = await start();
    const created = await test.app.inject({
      method: 'POST',
      url: '/v1/sandboxes',
      headers: { ...test.auth, traceparent: traceparent(RUNNER.traceId, RUNNER.spanId) },
      payload: { image: 'img' },
    });
    expect(created.statusCode).toBe(201);
    const id = created.json().id as string;
    const anonymous = await test.app.inject({
      method: 'POST',
      url: '/v1/sandboxes',
      headers: { traceparent: traceparent(FORGED.traceId, FORGED.spanId) },
      payload: { image: 'img' },
    });
    expect(anonymous.statusCode).toBe(401);
    const oversized = await test.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${id}/exec`,
      headers: {
        ...test.auth,
        traceparent: `${traceparent(FORGED.traceId, FORGED.spanId)}${'0'.repeat(4000)}`,
      },
      payload: { argv: ['echo', 'secret-argument'] },
    });
    expect(oversized.statusCode).toBe(200);
    const spans = await flushed(test, sink);
    const create = spans.filter((span) => span.name === 'gym.sandbox.create');
    expect(create).toHaveLength(1);
    expect(create[0]).toMatchObject({
      traceId: RUNNER.traceId,
      parentSpanId: RUNNER.spanId,
      statusCode: 0,
      attributes: { 'gym.provider': 'memory', 'gym.sandbox.id': id, 'http.response.status_code': 201 },
    });
    const [exec] = spans.filter((span) => span.name === 'gym.sandbox.exec');
    expect(exec).toMatchObject({
      parentSpanId: '',
      attributes: { 'gym.exec.status': 'ok', 'gym.exec.exit_code': 0, 'gym.provider': 'memory' },
    });
    expect(spans.some((span) => span.traceId === FORGED.traceId)).toBe(false);
    expect(Buffer.concat(sink.bodies).includes('secret-argument')).toBe(false);
  });

  it('put an agent’s model calls under the span that opened its rollout, whatever traceparent the agent sends', async () => {
    const { daemon: test, collector: sink } = await start();
    const open = async (headers: Record<string, string>) => {
      const response = await test.app.inject({
        method: 'POST',
        url: '/v1/gateway/rollouts',
        headers: { ...test.auth, ...headers },
        payload: {},
      });
      expect(response.statusCode).toBe(201);
      return response.json() as { rolloutId: string; key: string };
    };
    const call = async (rollout: { rolloutId: string; key: string }) => {
      const response = await test.app.inject({
        method: 'POST',
        url: `/v1/gateway/${rollout.rolloutId}/v1/chat/completions`,
        headers: {
          authorization: `Bearer ${rollout.key}`,
          traceparent: traceparent(FORGED.traceId, FORGED.spanId),
        },
        payload: { model: 'whatever', messages: [{ role: 'user', content: 'a prompt with a secret-word' }] },
      });
      expect(response.statusCode).toBe(200);
    };
    const traced = await open({ traceparent: traceparent(RUNNER.traceId, RUNNER.spanId) });
    const untraced = await open({});
    await call(traced);
    await call(untraced);
    const spans = await flushed(test, sink);
    const calls = spans.filter((span) => span.name === 'gym.gateway.model_call');
    expect(calls).toHaveLength(2);
    const byRollout = new Map(calls.map((span) => [span.attributes['gym.rollout.id'], span]));
    expect(byRollout.get(traced.rolloutId)).toMatchObject({
      traceId: RUNNER.traceId,
      parentSpanId: RUNNER.spanId,
      statusCode: 0,
      attributes: {
        'gym.model.api': 'chat.completions',
        'gen_ai.request.model': 'whatever',
        'gym.model.upstream_model': 'policy',
      },
    });
    expect(byRollout.get(untraced.rolloutId)).toMatchObject({ parentSpanId: '' });
    expect(spans.some((span) => span.traceId === FORGED.traceId)).toBe(false);
    const wire = Buffer.concat(sink.bodies);
    for (const secret of ['secret-word', traced.key, untraced.key]) expect(wire.includes(secret)).toBe(false);
  });

  it('mark a provider fault as an error span, and a client mistake not', async () => {
    const { daemon: test, collector: sink } = await start({ execError: new Error('engine fell over') });
    const created = await test.app.inject({
      method: 'POST',
      url: '/v1/sandboxes',
      headers: test.auth,
      payload: { image: 'img' },
    });
    const id = created.json().id as string;
    const failed = await test.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${id}/exec`,
      headers: test.auth,
      payload: { argv: ['true'] },
    });
    expect(failed.statusCode).toBeGreaterThanOrEqual(500);
    const missing = await test.app.inject({
      method: 'POST',
      url: '/v1/sandboxes/sbx-nonexistent/exec',
      headers: test.auth,
      payload: { argv: ['true'] },
    });
    expect(missing.statusCode).toBe(404);
    const spans = await flushed(test, sink);
    const execs = spans.filter((span) => span.name === 'gym.sandbox.exec');
    expect(execs).toHaveLength(2);
    const [fault, notFound] = [...execs].sort(
      (left, right) =>
        Number(right.attributes['http.response.status_code']) -
        Number(left.attributes['http.response.status_code']),
    );
    expect(fault).toMatchObject({ statusCode: 2 });
    expect(fault!.attributes['error.type']).toEqual(expect.any(String));
    expect(notFound).toMatchObject({ statusCode: 0, attributes: { 'error.type': 'SANDBOX_NOT_FOUND' } });
    expect(Buffer.concat(sink.bodies).includes('engine fell over')).toBe(false);
  });
});

describe('tracesUrl', () => {
  it('appends the traces path to a base URL only', () => {
    expect(tracesUrl('http://127.0.0.1:4318')).toBe('http://127.0.0.1:4318/v1/traces');
    expect(tracesUrl('http://127.0.0.1:4318/')).toBe('http://127.0.0.1:4318/v1/traces');
    expect(tracesUrl('http://collector:4318/v1/traces')).toBe('http://collector:4318/v1/traces');
    expect(tracesUrl('https://vendor.example/otlp/traces')).toBe('https://vendor.example/otlp/traces');
  });
});
