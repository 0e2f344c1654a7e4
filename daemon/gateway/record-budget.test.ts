import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ModelScriptSchema } from '../../harnesses/scripted-model/script.ts';
import { type ScriptedModelServer, startScriptedModelServer } from '../../harnesses/scripted-model/server.ts';
import type { ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../../test/daemon-harness.ts';
import { MemoryProvider } from '../../test/fixtures/memory-provider.ts';

describe('record budget of a rollout', () => {
  const BUDGET = 64 * 1024;
  let small: TestDaemon;
  let upstream: ScriptedModelServer;

  beforeAll(async () => {
    upstream = await startScriptedModelServer(
      ModelScriptSchema.parse({
        conversations: [
          { match: 'answer at length', replies: [{ content: 'z'.repeat(BUDGET) }] },
          { replies: [{ content: 'ok' }] },
        ],
      }),
    );
    small = await startTestDaemon(
      {
        providers: [{ name: 'memory' }],
        gateway: {
          upstream: { baseUrl: upstream.baseUrl, apiKey: 'upstream-secret', model: 'policy-v1' },
          maxRetries: 0,
          maxRecordBytesPerRollout: BUDGET,
        },
      },
      {
        factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
        listen: true,
      },
    );
  });

  afterAll(async () => {
    await small.cleanup();
    await upstream.close();
  });

  async function open(upstreamConfig?: Record<string, unknown>) {
    const response = await fetch(`${small.address.url}/v1/gateway/rollouts`, {
      method: 'POST',
      headers: { ...small.auth, 'content-type': 'application/json' },
      body: JSON.stringify(upstreamConfig === undefined ? {} : { upstream: upstreamConfig }),
    });
    return (await response.json()) as { rolloutId: string; key: string; basePath: string };
  }

  const post = (opened: { basePath: string; key: string }, path: string, body: unknown) =>
    fetch(`${small.address.url}${opened.basePath}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': opened.key },
      body: JSON.stringify(body),
    });

  const recordedSize = async (rolloutId: string) =>
    (await stat(join(small.stateDir, 'gateway', `${rolloutId}.jsonl`)).catch(() => ({ size: 0 }))).size;

  it('admits count_tokens like a model call: past the budget it is refused before the upstream is asked', async () => {
    const opened = await open({ baseUrl: upstream.baseUrl, apiKey: 'anthropic-secret', api: 'anthropic' });
    const counted = await post(opened, '/messages/count_tokens', {
      model: 'x',
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(counted.status).toBe(200);
    const [record] = await recordsOf(opened.rolloutId);
    expect(record).toMatchObject({
      api: 'messages.count_tokens',
      status: 'ok',
      response: { input_tokens: expect.any(Number) },
    });
    const before = upstream.requests.length;
    const big = { model: 'x', max_tokens: 10, messages: [{ role: 'user', content: 'a'.repeat(BUDGET) }] };
    const refused = await post(opened, '/messages/count_tokens', big);
    expect(refused.status).toBe(413);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('PAYLOAD_TOO_LARGE');
    expect(upstream.requests.length).toBe(before);
  });

  it('reserves what a translated call records: a request under the budget that records 3x it is refused', async () => {
    const opened = await open();
    // Backslashes: 2 bytes each in the request, 4 in the translated request (tool input as a JSON string).
    const input = { cmd: '\\'.repeat(BUDGET / 2 - 2000) };
    const body = {
      model: 'x',
      max_tokens: 10,
      messages: [
        { role: 'user', content: 'go' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'bash', input }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'ok' }] },
      ],
    };
    expect(JSON.stringify(body).length).toBeLessThan(BUDGET);
    const before = upstream.requests.length;
    const response = await post(opened, '/messages', body);
    expect(response.status).toBe(413);
    expect(upstream.requests.length).toBe(before);
    expect(await recordedSize(opened.rolloutId)).toBeLessThanOrEqual(BUDGET);
  });

  it('stops recording at the budget: an answer larger than what is left fails the call, and the file stays within it', async () => {
    const opened = await open();
    const ask = (stream: boolean) =>
      post(opened, '/chat/completions', {
        model: 'x',
        stream,
        messages: [{ role: 'user', content: 'answer at length' }],
      });
    const plain = await ask(false);
    expect(plain.status).toBe(413);
    expect(((await plain.json()) as { error: { code: string } }).error.code).toBe('PAYLOAD_TOO_LARGE');
    // Streamed: the events went out; the stream ends in an error event instead of [DONE].
    const streamed = await (await ask(true)).text();
    expect(streamed).toContain('PAYLOAD_TOO_LARGE');
    expect(streamed).not.toContain('[DONE]');
    expect(await recordedSize(opened.rolloutId)).toBeLessThanOrEqual(BUDGET);
    const saved = await recordsOf(opened.rolloutId);
    expect(saved.length).toBeGreaterThan(0);
    expect(saved.every((record) => record.status === 'error')).toBe(true);
    expect(saved[0]).toMatchObject({ error: { code: 'PAYLOAD_TOO_LARGE' } });
    // The upstream answered both: their tokens were spent, and are in the records (issue 19, finding 3).
    expect(saved).toHaveLength(2);
    for (const record of saved)
      expect((record.usage as { completion_tokens?: number } | undefined)?.completion_tokens).toBeGreaterThan(
        1000,
      );
  });

  async function recordsOf(rolloutId: string): Promise<Array<Record<string, unknown>>> {
    const response = await fetch(`${small.address.url}/v1/gateway/rollouts/${rolloutId}/records`, {
      headers: small.auth,
    });
    return ((await response.json()) as { records: Array<Record<string, unknown>> }).records;
  }
});
