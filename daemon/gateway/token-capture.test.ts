import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../../test/daemon-harness.ts';
import { MemoryProvider } from '../../test/fixtures/memory-provider.ts';
import { startVllmStyleUpstream, type VllmStyleUpstream } from '../../test/fixtures/vllm-style-upstream.ts';
import { readSse } from './anthropic.ts';
import { findDrift, hideAddedInChunk, withTokenRequest } from './token-capture.ts';

type Json = Record<string, unknown>;

let upstream: VllmStyleUpstream;

/** A daemon with no sandbox provider in use (the gateway is what is tested) and these gateway settings. */
const startDaemon = (gateway: Json) =>
  startTestDaemon(
    { providers: [{ name: 'memory' }], gateway },
    {
      factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
      listen: true,
    },
  );
let daemon: TestDaemon;

beforeAll(async () => {
  upstream = await startVllmStyleUpstream([
    { tool: { name: 'bash', arguments: { command: 'ls' } } },
    { content: 'two files here' },
    { content: 'all done now' },
  ]);
  daemon = await startDaemon({ maxRetries: 0 });
});

afterAll(async () => {
  await daemon?.cleanup();
  await upstream?.close();
});

async function openRollout(
  options: { requestTokenIds?: boolean } = {},
): Promise<{ rolloutId: string; key: string; url: string }> {
  const response = await fetch(`${daemon.address.url}/v1/gateway/rollouts`, {
    method: 'POST',
    headers: { ...daemon.auth, 'content-type': 'application/json' },
    body: JSON.stringify({ upstream: { baseUrl: upstream.baseUrl, ...options } }),
  });
  expect(response.status).toBe(201);
  const opened = (await response.json()) as { rolloutId: string; key: string; basePath: string };
  return { ...opened, url: `${daemon.address.url}${opened.basePath}` };
}

/** Posts a Chat Completions body raw and returns the JSON (or every SSE data object) as received. */
async function post(baseUrl: string, key: string, body: Json, path = '/chat/completions'): Promise<unknown> {
  const response = await fetch(`${baseUrl}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'x-api-key': key, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(response.status).toBe(200);
  if (body.stream !== true) return response.json();
  const events: unknown[] = [];
  for await (const event of readSse(response.body as AsyncIterable<Uint8Array>)) events.push(event.data);
  return events;
}

async function records(rolloutId: string): Promise<Json[]> {
  const response = await fetch(`${daemon.address.url}/v1/gateway/rollouts/${rolloutId}/records`, {
    headers: daemon.auth,
  });
  return ((await response.json()) as { records: Json[] }).records;
}

const conversation = (steps: number, drift = false): Json[] => {
  const messages: Json[] = [
    { role: 'system', content: 'you are an agent' },
    { role: 'user', content: 'list the files' },
  ];
  if (steps >= 1) {
    messages.push({
      role: 'assistant',
      content: null,
      tool_calls: [
        { id: 'call-0', type: 'function', function: { name: 'bash', arguments: '{"command":"ls"}' } },
      ],
    });
    messages.push({ role: 'tool', tool_call_id: 'call-0', content: 'a.txt b.txt' });
  }
  if (steps >= 2) {
    messages.push({ role: 'assistant', content: 'two files here' });
    messages.push({ role: 'user', content: drift ? 'retokenise and finish' : 'finish' });
  }
  return messages;
};

describe('exact tokens through the gateway', () => {
  it('records every call of a multi-step run with its prompt and completion ids and logprobs, streamed and not', async () => {
    const { rolloutId, key, url } = await openRollout({ requestTokenIds: true });
    await post(url, key, { model: 'policy', messages: conversation(0) });
    await post(url, key, { model: 'policy', messages: conversation(1), stream: true });
    await post(url, key, { model: 'policy', messages: conversation(2) });

    // Whatever the agent sent, the upstream was asked for ids and logprobs.
    for (const sent of upstream.requests.slice(-3))
      expect(sent).toMatchObject({ return_token_ids: true, logprobs: true });

    const saved = await records(rolloutId);
    expect(saved).toHaveLength(3);
    for (const record of saved) {
      const tokens = record.tokens as {
        promptTokenIds: number[];
        completionTokenIds: number[];
        completionLogprobs: number[];
      };
      expect(tokens.promptTokenIds.length).toBeGreaterThan(3);
      expect(tokens.completionTokenIds.length).toBeGreaterThan(0);
      expect(tokens.completionLogprobs).toHaveLength(tokens.completionTokenIds.length);
      expect(record.tokenDrift).toBeUndefined();
    }
    // Each prompt extends the previous call's prompt and completion: the policy's own tokens.
    const [first, second] = saved.map(
      (record) => record.tokens as { promptTokenIds: number[]; completionTokenIds: number[] },
    );
    expect(
      second!.promptTokenIds.slice(0, first!.promptTokenIds.length + first!.completionTokenIds.length),
    ).toEqual([...first!.promptTokenIds, ...first!.completionTokenIds]);
    // The streamed call's ids were put together from its chunks, the held-back tool-call ones too.
    expect((saved[0]!.tokens as { completionTokenIds: number[] }).completionTokenIds).toHaveLength(4);
  });

  it('flags a call whose prompt re-tokenised the history into other ids', async () => {
    const { rolloutId, key, url } = await openRollout({ requestTokenIds: true });
    await post(url, key, { model: 'policy', messages: conversation(0), stream: true });
    await post(url, key, { model: 'policy', messages: conversation(1) });
    await post(url, key, { model: 'policy', messages: conversation(2, true), stream: true });
    const saved = await records(rolloutId);
    expect(saved[1]!.tokenDrift).toBeUndefined();
    const drift = saved[2]!.tokenDrift as {
      previousIndex: number;
      expectedPrefixTokens: number;
      matchingTokens: number;
    };
    expect(drift).toBeDefined();
    expect(drift.previousIndex).toBe(1);
    const previous = saved[1]!.tokens as { promptTokenIds: number[]; completionTokenIds: number[] };
    expect(drift.expectedPrefixTokens).toBe(
      previous.promptTokenIds.length + previous.completionTokenIds.length,
    );
    // It departs where the first assistant turn begins: after the system and user turns and the role marker.
    const firstAssistantAt = (saved[0]!.tokens as { promptTokenIds: number[] }).promptTokenIds.length;
    expect(drift.matchingTokens).toBe(firstAssistantAt);
  });

  it('shows the agent exactly what the upstream sends without us, streamed and not, whatever it asked', async () => {
    const { key, url } = await openRollout({ requestTokenIds: true });
    const bodies: Json[] = [
      { model: 'policy', messages: conversation(0) },
      { model: 'policy', messages: conversation(0), stream: true },
      { model: 'policy', messages: conversation(1), stream: true },
      { model: 'policy', messages: conversation(1), stream: true, stream_options: { include_usage: true } },
      // An agent that asks for logprobs itself gets them, as it would without us; never the ids.
      { model: 'policy', messages: conversation(0), logprobs: true, top_logprobs: 2 },
      { model: 'policy', messages: conversation(0), stream: true, logprobs: true, top_logprobs: 1 },
      // And one that asks for the ids gets them.
      { model: 'policy', messages: conversation(1), return_token_ids: true, stream: true },
    ];
    for (const body of bodies) {
      const direct = await post(upstream.baseUrl, 'none', body);
      const through = await post(url, key, body);
      expect(through).toEqual(direct);
    }
    const plain = (await post(url, key, bodies[0]!)) as Json;
    expect(plain.prompt_token_ids).toBeNull();
    expect((plain.choices as Json[])[0]).toMatchObject({ token_ids: null, logprobs: null });
  });

  it('records the tokens of a Messages call it translates to Chat Completions, and none reach the agent', async () => {
    const { rolloutId, key, url } = await openRollout({ requestTokenIds: true });
    const base = url.replace(/\/v1$/, '');
    const body = {
      model: 'claude',
      max_tokens: 100,
      messages: [{ role: 'user', content: 'list the files' }],
    };
    const message = (await post(base, key, body, '/v1/messages')) as Json;
    expect(JSON.stringify(message)).not.toMatch(/token_ids|logprob/);
    const events = (await post(base, key, { ...body, stream: true }, '/v1/messages')) as unknown[];
    expect(JSON.stringify(events)).not.toMatch(/token_ids|logprob/);
    const saved = await records(rolloutId);
    expect(saved).toHaveLength(2);
    for (const record of saved) {
      expect(record.upstreamRequest).toMatchObject({ return_token_ids: true, logprobs: true });
      expect((record.tokens as { completionTokenIds: number[] }).completionTokenIds).toHaveLength(4);
    }
  });

  it('asks for nothing when the upstream is not declared able to (other upstreams refuse unknown fields)', async () => {
    const { rolloutId, key, url } = await openRollout();
    await post(url, key, { model: 'policy', messages: conversation(0), stream: true });
    expect(upstream.requests.at(-1)).not.toHaveProperty('return_token_ids');
    expect(upstream.requests.at(-1)).not.toHaveProperty('logprobs');
    const [record] = await records(rolloutId);
    expect(record).not.toHaveProperty('tokens');
    expect(record).not.toHaveProperty('tokensMissing');
  });

  it('says a call has no tokens when an upstream asked for them returned none', async () => {
    const { rolloutId, key, url } = await openRollout({ requestTokenIds: true });
    const messages = [{ role: 'user', content: 'old-server please' }];
    await post(url, key, { model: 'policy', messages });
    await post(url, key, { model: 'policy', messages, stream: true });
    const saved = await records(rolloutId);
    expect(saved).toHaveLength(2);
    for (const record of saved) {
      expect(record).not.toHaveProperty('tokens');
      expect(record.tokensMissing).toMatch(/no prompt_token_ids or token_ids/);
    }
  });

  it('says a Responses call has no token ids rather than leaving a trainer to guess', async () => {
    const { rolloutId, key, url } = await openRollout({ requestTokenIds: true });
    const response = await fetch(`${url}/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'policy', input: 'hi' }),
    });
    // This stand-in answers any path with a completion; what matters is what was asked and recorded.
    expect(response.status).toBe(200);
    expect(upstream.requests.at(-1)).not.toHaveProperty('return_token_ids');
    const [record] = await records(rolloutId);
    expect(record).toMatchObject({ api: 'responses', status: 'ok' });
    expect(record).not.toHaveProperty('tokens');
    expect(record!.tokensMissing).toMatch(/Responses API returns no token ids/);
  });

  it('refuses, with the budget error, a call whose tokens would pass the rollout record budget', async () => {
    const small = await startDaemon({ maxRetries: 0, maxRecordBytesPerRollout: 6000 });
    try {
      const opened = await fetch(`${small.address.url}/v1/gateway/rollouts`, {
        method: 'POST',
        headers: { ...small.auth, 'content-type': 'application/json' },
        body: JSON.stringify({ upstream: { baseUrl: upstream.baseUrl, requestTokenIds: true } }),
      });
      const { rolloutId, key, basePath } = (await opened.json()) as {
        rolloutId: string;
        key: string;
        basePath: string;
      };
      const statuses: number[] = [];
      for (let step = 0; step < 6; step += 1) {
        const response = await fetch(`${small.address.url}${basePath}/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'policy', messages: conversation(2) }),
        });
        statuses.push(response.status);
        if (response.status !== 200) {
          const error = ((await response.json()) as { error: { code: string } }).error;
          expect(error.code).toBe('PAYLOAD_TOO_LARGE');
          break;
        }
      }
      expect(statuses.at(-1)).toBe(413);
      const response = await fetch(`${small.address.url}/v1/gateway/rollouts/${rolloutId}/records`, {
        headers: small.auth,
      });
      const saved = ((await response.json()) as { records: Json[] }).records;
      // Every record that was written is whole, its tokens with it.
      for (const record of saved.filter((entry) => entry.status === 'ok'))
        expect((record.tokens as { promptTokenIds: number[] }).promptTokenIds.length).toBeGreaterThan(0);
    } finally {
      await small.cleanup();
    }
  });
});

describe('token capture, pure', () => {
  it('keeps what the agent asked for and adds only what it did not', () => {
    expect(withTokenRequest({ logprobs: true, top_logprobs: 3 })).toEqual({
      body: { logprobs: true, top_logprobs: 3, return_token_ids: true },
      added: { tokenIds: true, logprobs: false },
    });
    expect(withTokenRequest({ return_token_ids: true }).added).toEqual({ tokenIds: false, logprobs: true });
  });

  it('drops a chunk that only carried held-back ids, keeps a finishing one', () => {
    const added = { tokenIds: true, logprobs: true };
    expect(
      hideAddedInChunk({ choices: [{ index: 0, delta: {}, finish_reason: null, token_ids: [7] }] }, added),
    ).toBeNull();
    expect(
      hideAddedInChunk({ choices: [{ index: 0, delta: {}, finish_reason: 'stop', token_ids: [5] }] }, added),
    ).toEqual({ choices: [{ index: 0, delta: {}, finish_reason: 'stop', token_ids: null }] });
  });

  it('tells a prompt that extends a recent call from one that departs from all of them', () => {
    const main = { index: 0, tokens: { promptTokenIds: [1, 2, 3], completionTokenIds: [4, 5] } };
    const side = { index: 1, tokens: { promptTokenIds: [8, 9], completionTokenIds: [7] } };
    // It continues the main conversation though a side call came between.
    expect(
      findDrift([main, side], { promptTokenIds: [1, 2, 3, 4, 5, 6], completionTokenIds: [] }),
    ).toBeUndefined();
    expect(findDrift([main, side], { promptTokenIds: [1, 2, 3, 9, 5, 6], completionTokenIds: [] })).toEqual({
      previousIndex: 0,
      expectedPrefixTokens: 5,
      matchingTokens: 3,
    });
    // A prompt shorter than the history it should hold is a drift too.
    expect(findDrift([main], { promptTokenIds: [1, 2], completionTokenIds: [] })?.matchingTokens).toBe(2);
    expect(findDrift([], { promptTokenIds: [1], completionTokenIds: [] })).toBeUndefined();
  });
});
