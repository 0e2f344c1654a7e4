import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ModelScriptSchema } from '../../harnesses/scripted-model/script.ts';
import { type ScriptedModelServer, startScriptedModelServer } from '../../harnesses/scripted-model/server.ts';
import type { ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../../test/daemon-harness.ts';
import { MemoryProvider } from '../../test/fixtures/memory-provider.ts';
import { assembleMessages, readSse } from './anthropic.ts';

let model: ScriptedModelServer;
let daemon: TestDaemon;

beforeAll(async () => {
  model = await startScriptedModelServer(
    ModelScriptSchema.parse({
      conversations: [
        { match: 'please fail', replies: [{ error: { status: 500, message: 'upstream exploded' } }] },
        {
          match: 'token ids',
          replies: [
            {
              content: 'with extras',
              extra: { prompt_token_ids: [1, 2, 3] },
              choiceExtra: { logprobs: { content: [{ token: 'with', logprob: -0.1 }] }, token_ids: [42, 43] },
            },
          ],
        },
        {
          replies: [{ toolCalls: [{ name: 'bash', arguments: { command: 'ls' } }] }, { content: 'all done' }],
        },
      ],
    }),
  );
  daemon = await startTestDaemon(
    {
      providers: [{ name: 'memory' }],
      gateway: {
        upstream: { baseUrl: model.baseUrl, apiKey: 'upstream-secret', model: 'policy-v1' },
        maxRetries: 2,
      },
    },
    {
      factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
      listen: true,
    },
  );
});

afterAll(async () => {
  await daemon.cleanup();
  await model.close();
});

async function openRollout(rolloutId?: string): Promise<{ rolloutId: string; key: string; client: OpenAI }> {
  const response = await fetch(`${daemon.address.url}/v1/gateway/rollouts`, {
    method: 'POST',
    headers: { ...daemon.auth, 'content-type': 'application/json' },
    body: JSON.stringify(rolloutId === undefined ? {} : { rolloutId }),
  });
  expect(response.status).toBe(201);
  const opened = (await response.json()) as { rolloutId: string; key: string; basePath: string };
  return {
    ...opened,
    client: new OpenAI({
      baseURL: `${daemon.address.url}${opened.basePath}`,
      apiKey: opened.key,
      maxRetries: 0,
    }),
  };
}

async function records(rolloutId: string): Promise<Array<Record<string, unknown>>> {
  const response = await fetch(`${daemon.address.url}/v1/gateway/rollouts/${rolloutId}/records`, {
    headers: daemon.auth,
  });
  return ((await response.json()) as { records: Array<Record<string, unknown>> }).records;
}

describe('model gateway', () => {
  it('forwards chat completions (plain and streamed) with the policy model, recording each call', async () => {
    const { rolloutId, client } = await openRollout();
    const first = await client.chat.completions.create({
      model: 'whatever',
      messages: [{ role: 'user', content: 'hi' }],
      temperature: 0.3,
    });
    expect(first.choices[0]?.message.tool_calls?.[0]).toMatchObject({
      function: { name: 'bash', arguments: '{"command":"ls"}' },
    });
    expect(model.requests.at(-1)?.headers.authorization).toBe('Bearer upstream-secret');
    expect(model.requests.at(-1)?.body).toMatchObject({ model: 'policy-v1', temperature: 0.3 });

    const stream = await client.chat.completions.create({
      model: 'whatever',
      stream: true,
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'step' },
        { role: 'user', content: 'go on' },
      ],
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    expect(text).toBe('all done');

    const saved = await records(rolloutId);
    expect(saved).toHaveLength(2);
    expect(saved[0]).toMatchObject({
      index: 0,
      api: 'chat.completions',
      status: 'ok',
      upstreamModel: 'policy-v1',
      request: { model: 'whatever', temperature: 0.3 },
    });
    expect(saved[1]).toMatchObject({
      index: 1,
      stream: true,
      response: { choices: [{ message: { content: 'all done' }, finish_reason: 'stop' }] },
    });
    expect((saved[1]!.events as unknown[]).length).toBeGreaterThan(2);
  });

  it('keeps extra upstream fields (token ids, logprobs) unchanged in the record', async () => {
    const { rolloutId, client } = await openRollout();
    const response = (await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'token ids please' }],
      logprobs: true,
    })) as unknown as Record<string, unknown>;
    expect(response.prompt_token_ids).toEqual([1, 2, 3]);
    const [record] = await records(rolloutId);
    const saved = JSON.parse(JSON.stringify(record)) as {
      request: Record<string, unknown>;
      response: Record<string, unknown>;
    };
    expect(saved.request.logprobs).toBe(true);
    expect(saved.response.prompt_token_ids).toEqual([1, 2, 3]);
    expect((saved.response.choices as Array<Record<string, unknown>>)[0]).toMatchObject({
      token_ids: [42, 43],
      logprobs: { content: [{ token: 'with', logprob: -0.1 }] },
    });
  });

  it('forwards the Responses API, streamed, event by event', async () => {
    const { rolloutId, client } = await openRollout();
    const stream = await client.responses.create({ model: 'm', input: 'hi', stream: true });
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    expect(types[0]).toBe('response.created');
    expect(types.at(-1)).toBe('response.completed');
    expect(types).toContain('response.function_call_arguments.done');
    const [record] = await records(rolloutId);
    expect(record).toMatchObject({
      api: 'responses',
      stream: true,
      response: { status: 'completed', output: [{ type: 'function_call', name: 'bash' }] },
    });
  });

  it('refuses server-side tools and remote image URLs on the Chat and Responses passthroughs', async () => {
    const { rolloutId, key } = await openRollout();
    const post = (path: string, body: Record<string, unknown>) =>
      fetch(`${daemon.address.url}/v1/gateway/${rolloutId}/v1${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
        body: JSON.stringify(body),
      });
    const before = model.requests.length;
    const attacks: Array<[string, Record<string, unknown>, string]> = [
      [
        '/responses',
        {
          model: 'm',
          input: 'hi',
          tools: [{ type: 'namespace', name: 'n', tools: [{ type: 'web_search' }] }],
        },
        'tools[0].tools[0] (type web_search)',
      ],
      [
        '/responses',
        { model: 'm', input: 'hi', tools: [{ type: 'web_search' }] },
        'tools[0] (type web_search)',
      ],
      [
        '/responses',
        {
          model: 'm',
          input: 'hi',
          tools: [{ type: 'mcp', server_url: 'http://127.0.0.1:9', server_label: 'x' }],
        },
        'tools[0] (type mcp)',
      ],
      [
        '/responses',
        {
          model: 'm',
          input: [
            {
              role: 'user',
              content: [{ type: 'input_image', image_url: 'http://127.0.0.1:9/leak?data=secret' }],
            },
          ],
        },
        'input[0].content[0].image_url',
      ],
      [
        '/responses',
        {
          model: 'm',
          input: [{ role: 'user', content: [{ type: 'input_file', file_url: 'http://127.0.0.1:9/f' }] }],
        },
        'input[0].content[0].file_url',
      ],
      [
        '/chat/completions',
        { model: 'm', messages: [{ role: 'user', content: 'hi' }], tools: [{ type: 'web_search_preview' }] },
        'tools[0]',
      ],
      [
        '/chat/completions',
        { model: 'm', messages: [{ role: 'user', content: 'hi' }], web_search_options: {} },
        'web_search_options',
      ],
      [
        '/chat/completions',
        {
          model: 'm',
          messages: [
            {
              role: 'user',
              content: [{ type: 'image_url', image_url: { url: 'https://127.0.0.1:9/x.png' } }],
            },
          ],
        },
        'messages[0].content[0].image_url',
      ],
    ];
    for (const [path, body, field] of attacks) {
      const response = await post(path, body);
      expect(response.status, field).toBe(400);
      const error = (await response.json()) as { error: { code: string; message: string } };
      expect(error.error).toMatchObject({
        code: 'VALIDATION_FAILED',
        message: expect.stringContaining(field),
      });
    }
    expect(model.requests.length).toBe(before);
    // Function tools and inline images pass.
    const ok = await post('/chat/completions', {
      model: 'm',
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'hi' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } },
          ],
        },
      ],
      tools: [{ type: 'function', function: { name: 'bash', parameters: { type: 'object' } } }],
    });
    expect(ok.status).toBe(200);
    // Codex groups some of its function tools in a namespace.
    const grouped = await post('/responses', {
      model: 'm',
      input: 'hi',
      tools: [
        { type: 'function', name: 'exec_command', parameters: { type: 'object' } },
        { type: 'namespace', name: 'multi_agent_v1', tools: [{ type: 'function', name: 'spawn_agent' }] },
      ],
    });
    expect(grouped.status).toBe(200);
    expect(model.requests.length).toBe(before + 2);
  });

  it("refuses stored conversations and prompts, background responses, another rollout's response ids and several choices", async () => {
    const mine = await openRollout();
    const other = await openRollout();
    const first = await mine.client.responses.create({ model: 'm', input: 'hi' });
    const streamed = await mine.client.responses.create({ model: 'm', input: 'hi', stream: true });
    let secondId = '';
    for await (const event of streamed) if (event.type === 'response.completed') secondId = event.response.id;
    expect(first.id).toMatch(/^resp/);
    expect(secondId).toMatch(/^resp/);
    const post = (key: string, rolloutId: string, path: string, body: Record<string, unknown>) =>
      fetch(`${daemon.address.url}/v1/gateway/${rolloutId}/v1${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
        body: JSON.stringify(body),
      });
    const before = model.requests.length;
    const attacks: Array<[string, Record<string, unknown>, string]> = [
      ['/responses', { model: 'm', input: 'hi', previous_response_id: first.id }, 'previous_response_id'],
      ['/responses', { model: 'm', input: 'hi', previous_response_id: secondId }, 'previous_response_id'],
      ['/responses', { model: 'm', input: 'hi', conversation: 'conv_operator' }, 'conversation'],
      ['/responses', { model: 'm', input: 'hi', conversation: { id: 'conv_operator' } }, 'conversation'],
      ['/responses', { model: 'm', input: 'hi', prompt: { id: 'pmpt_operator' } }, 'prompt'],
      [
        '/responses',
        { model: 'm', input: [{ type: 'item_reference', id: 'msg_of_another_rollout' }] },
        'input[0]',
      ],
      [
        '/responses',
        { model: 'm', input: [{ role: 'user', content: 'hi' }, { id: 'msg_of_another_rollout' }] },
        'input[1]',
      ],
      ['/responses', { model: 'm', input: 'hi', background: true, store: true }, 'background'],
      ['/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'hi' }], n: 64 }, 'n'],
    ];
    for (const [path, body, field] of attacks) {
      const response = await post(other.key, other.rolloutId, path, body);
      expect(response.status, field).toBe(400);
      const error = (await response.json()) as { error: { code: string; message: string } };
      expect(error.error).toMatchObject({
        code: 'VALIDATION_FAILED',
        message: expect.stringContaining(`refuses ${field}:`),
      });
    }
    expect(model.requests.length).toBe(before);
    // A rollout continues its own responses, and the harmless values pass.
    for (const previous of [first.id, secondId]) {
      const own = await post(mine.key, mine.rolloutId, '/responses', {
        model: 'm',
        input: 'go on',
        previous_response_id: previous,
        background: false,
        store: false,
      });
      expect(own.status).toBe(200);
    }
    const one = await post(mine.key, mine.rolloutId, '/chat/completions', {
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      n: 1,
    });
    expect(one.status).toBe(200);
    expect(model.requests.length).toBe(before + 3);
  });

  it('retries a failing upstream a bounded number of times, then answers a typed 502', async () => {
    const { rolloutId, client } = await openRollout();
    const before = model.requests.length;
    const error = await client.chat.completions
      .create({ model: 'm', messages: [{ role: 'user', content: 'please fail' }] })
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(502);
    expect(model.requests.length - before).toBe(3);
    const [record] = await records(rolloutId);
    expect(record).toMatchObject({
      status: 'error',
      error: { code: 'MODEL_UPSTREAM_ERROR', upstreamStatus: 500 },
    });
  });

  it('refuses a wrong rollout key and an unknown rollout, without the daemon token', async () => {
    const { rolloutId } = await openRollout();
    const wrong = new OpenAI({
      baseURL: `${daemon.address.url}/v1/gateway/${rolloutId}/v1`,
      apiKey: daemon.token,
      maxRetries: 0,
    });
    await expect(wrong.chat.completions.create({ model: 'm', messages: [] })).rejects.toMatchObject({
      status: 401,
    });
    const unknown = new OpenAI({
      baseURL: `${daemon.address.url}/v1/gateway/ro-nope/v1`,
      apiKey: 'x',
      maxRetries: 0,
    });
    // An unknown rollout answers as a wrong key does: a model call cannot probe which ids exist.
    await expect(unknown.chat.completions.create({ model: 'm', messages: [] })).rejects.toMatchObject({
      status: 401,
    });
    const noToken = await fetch(`${daemon.address.url}/v1/gateway/rollouts/${rolloutId}/records`);
    expect(noToken.status).toBe(401);
  });

  describe('Anthropic Messages', () => {
    async function openAnthropicRollout(upstream?: Record<string, unknown>) {
      const response = await fetch(`${daemon.address.url}/v1/gateway/rollouts`, {
        method: 'POST',
        headers: { ...daemon.auth, 'content-type': 'application/json' },
        body: JSON.stringify(upstream === undefined ? {} : { upstream }),
      });
      expect(response.status).toBe(201);
      return (await response.json()) as { rolloutId: string; key: string; basePath: string };
    }

    /** Posts as Claude Code does: the key as x-api-key, `?beta=true`, the Anthropic headers. */
    async function postMessages(opened: { basePath: string; key: string }, body: Record<string, unknown>) {
      return fetch(`${daemon.address.url}${opened.basePath}/messages?beta=true`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-api-key': opened.key,
          'anthropic-version': '2023-06-01',
          'anthropic-beta': 'claude-code-20250219',
        },
        body: JSON.stringify(body),
      });
    }

    async function events(response: Response): Promise<Array<Record<string, unknown>>> {
      const out: Array<Record<string, unknown>> = [];
      for await (const event of readSse(response.body as AsyncIterable<Uint8Array>)) {
        expect(event.name).toBe((event.data as { type: string }).type);
        out.push(event.data as Record<string, unknown>);
      }
      return out;
    }

    const firstTurn = {
      model: 'claude-sonnet',
      max_tokens: 1000,
      system: [{ type: 'text', text: 'You are an agent.' }],
      tools: [
        { name: 'bash', input_schema: { type: 'object', properties: { command: { type: 'string' } } } },
      ],
      messages: [{ role: 'user', content: 'list the files' }],
    };

    it('translates to Chat Completions for an OpenAI upstream, streamed, tool_use out and tool_result back', async () => {
      const opened = await openAnthropicRollout();
      const first = await postMessages(opened, { ...firstTurn, stream: true });
      expect(first.status).toBe(200);
      expect(first.headers.get('content-type')).toContain('text/event-stream');
      const message = assembleMessages(await events(first))!;
      expect(message).toMatchObject({
        model: 'claude-sonnet',
        stop_reason: 'tool_use',
        content: [{ type: 'tool_use', name: 'bash', input: { command: 'ls' } }],
      });
      const toolUse = (message.content as Array<{ id: string }>)[0]!;
      expect(model.requests.at(-1)).toMatchObject({
        path: '/v1/chat/completions',
        body: {
          model: 'policy-v1',
          stream: true,
          messages: [
            { role: 'system', content: 'You are an agent.' },
            { role: 'user', content: 'list the files' },
          ],
          tools: [{ type: 'function', function: { name: 'bash' } }],
        },
      });

      const second = await postMessages(opened, {
        ...firstTurn,
        messages: [
          ...firstTurn.messages,
          { role: 'assistant', content: message.content },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: toolUse.id, content: 'a.txt' }] },
        ],
      });
      expect(second.status).toBe(200);
      expect(await second.json()).toMatchObject({
        type: 'message',
        role: 'assistant',
        content: [{ type: 'text', text: 'all done' }],
        stop_reason: 'end_turn',
        usage: { input_tokens: 10 },
      });
      expect((model.requests.at(-1)!.body.messages as unknown[]).slice(2)).toEqual([
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: toolUse.id, type: 'function', function: { name: 'bash', arguments: '{"command":"ls"}' } },
          ],
        },
        { role: 'tool', tool_call_id: toolUse.id, content: 'a.txt' },
      ]);

      const saved = await records(opened.rolloutId);
      expect(saved).toHaveLength(2);
      expect(saved[0]).toMatchObject({
        api: 'messages',
        upstreamApi: 'chat.completions',
        stream: true,
        request: { model: 'claude-sonnet' },
        upstreamRequest: { model: 'policy-v1' },
        response: { stop_reason: 'tool_use' },
        usage: { prompt_tokens: 10 },
      });
      expect((saved[0]!.events as unknown[]).length).toBeGreaterThan(2);
      expect(saved[1]).toMatchObject({
        api: 'messages',
        stream: false,
        response: { stop_reason: 'end_turn' },
      });
    });

    it("forwards unchanged to an Anthropic upstream with its key and the agent's Anthropic headers", async () => {
      const opened = await openAnthropicRollout({
        baseUrl: model.baseUrl,
        apiKey: 'anthropic-secret',
        model: 'policy-v2',
        api: 'anthropic',
      });
      const streamed = await postMessages(opened, { ...firstTurn, stream: true });
      const received = await events(streamed);
      expect(received.map((event) => event.type)).toEqual([
        'message_start',
        'content_block_start',
        'content_block_delta',
        'content_block_stop',
        'message_delta',
        'message_stop',
      ]);
      const upstreamCall = model.requests.at(-1)!;
      expect(upstreamCall.path).toBe('/v1/messages');
      expect(upstreamCall.body).toMatchObject({ model: 'policy-v2', system: firstTurn.system });
      expect(upstreamCall.headers).toMatchObject({
        'x-api-key': 'anthropic-secret',
        'anthropic-beta': 'claude-code-20250219',
        'anthropic-version': '2023-06-01',
      });
      const plain = await postMessages(opened, { ...firstTurn, messages: [{ role: 'user', content: 'hi' }] });
      expect(await plain.json()).toMatchObject({ type: 'message', content: [{ type: 'tool_use' }] });
      const counted = await fetch(`${daemon.address.url}${opened.basePath}/messages/count_tokens`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${opened.key}` },
        body: JSON.stringify(firstTurn),
      });
      expect(((await counted.json()) as { input_tokens: number }).input_tokens).toBeGreaterThan(0);
      const saved = await records(opened.rolloutId);
      expect(saved).toHaveLength(3);
      expect(saved[2]).toMatchObject({ api: 'messages.count_tokens', status: 'ok', request: firstTurn });
      expect(saved[0]).toMatchObject({
        api: 'messages',
        upstreamModel: 'policy-v2',
        response: { content: [{ type: 'tool_use', input: { command: 'ls' } }], stop_reason: 'tool_use' },
        usage: { input_tokens: 10, output_tokens: 5, cache_read_input_tokens: 0 },
      });
      expect(saved[0]!.upstreamApi).toBeUndefined();
      // An Anthropic-only upstream cannot take a Chat Completions call.
      const chat = await fetch(`${daemon.address.url}${opened.basePath}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${opened.key}` },
        body: JSON.stringify({ model: 'm', messages: [] }),
      });
      expect(chat.status).toBe(400);
    });

    /** A request shaped like Claude Code's (see the harness fact sheet): it must pass the request policy. */
    const claudeCodeTurn = {
      model: 'claude-sonnet',
      max_tokens: 32000,
      stream: true,
      system: [{ type: 'text', text: 'You are Claude Code.', cache_control: { type: 'ephemeral' } }],
      messages: [
        { role: 'system', content: 'environment: linux' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'look at this' },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } },
          ],
        },
      ],
      tools: firstTurn.tools,
      metadata: { user_id: '{"session":"s"}' },
      thinking: { type: 'adaptive' },
      output_config: { effort: 'medium' },
      context_management: { edits: [{ type: 'clear_thinking_20251015' }] },
    };

    it('refuses Anthropic server-side tools, the MCP connector, containers, paid tiers and remote sources; passes only allowed betas', async () => {
      const opened = await openAnthropicRollout({
        baseUrl: model.baseUrl,
        apiKey: 'anthropic-secret',
        api: 'anthropic',
      });
      const post = (path: string, body: Record<string, unknown>, beta: string) =>
        fetch(`${daemon.address.url}${opened.basePath}${path}`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'x-api-key': opened.key,
            'anthropic-version': '2023-06-01',
            'anthropic-beta': beta,
          },
          body: JSON.stringify(body),
        });
      const before = model.requests.length;
      const plain = { model: 'x', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] };
      const attacks: Array<[Record<string, unknown>, string]> = [
        [{ ...plain, tools: [{ type: 'web_fetch_20250910', name: 'web_fetch', max_uses: 5 }] }, 'tools[0]'],
        [
          { ...plain, tools: [...firstTurn.tools, { type: 'web_search_20250305', name: 'web_search' }] },
          'tools[1]',
        ],
        [{ ...plain, tools: [{ type: 'code_execution_20250825', name: 'code_execution' }] }, 'tools[0]'],
        [
          { ...plain, mcp_servers: [{ type: 'url', url: 'http://127.0.0.1:9/sse', name: 'exfil' }] },
          'mcp_servers',
        ],
        [{ ...plain, container: 'container_1' }, 'container'],
        [{ ...plain, service_tier: 'auto' }, 'service_tier'],
        [
          {
            ...plain,
            messages: [
              {
                role: 'user',
                content: [
                  {
                    type: 'tool_result',
                    tool_use_id: 't',
                    content: [{ type: 'image', source: { type: 'url', url: 'http://127.0.0.1:9/x?secret' } }],
                  },
                ],
              },
            ],
          },
          'messages[0].content[0].content[0].source',
        ],
        [
          {
            ...plain,
            messages: [
              { role: 'user', content: [{ type: 'document', source: { type: 'file', file_id: 'f' } }] },
            ],
          },
          'messages[0].content[0].source',
        ],
      ];
      for (const [body, field] of attacks) {
        for (const path of ['/messages', '/messages/count_tokens']) {
          const response = await post(path, body, 'mcp-client-2025-04-04');
          expect(response.status, `${path} ${field}`).toBe(400);
          const error = (await response.json()) as { error: { code: string; message: string } };
          expect(error.error.code).toBe('VALIDATION_FAILED');
          expect(error.error.message).toContain(field);
        }
      }
      // None of them reached the upstream; each is in the records, refused.
      expect(model.requests.length).toBe(before);
      const refused = await records(opened.rolloutId);
      expect(refused).toHaveLength(attacks.length * 2);
      expect(refused.every((record) => record.status === 'error')).toBe(true);

      // Claude Code's own request passes, with its betas but without the ones that reach out or cost more.
      const allowed = 'claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27';
      const streamed = await post(
        '/messages',
        claudeCodeTurn,
        `${allowed},mcp-client-2025-04-04, web-fetch-2025-09-10,context-1m-2025-08-07`,
      );
      expect(streamed.status).toBe(200);
      expect((await events(streamed)).at(-1)).toMatchObject({ type: 'message_stop' });
      const upstreamCall = model.requests.at(-1)!;
      expect(upstreamCall.body).toMatchObject({ context_management: claudeCodeTurn.context_management });
      expect(upstreamCall.headers['anthropic-beta']).toBe(allowed);
      const counted = await post('/messages/count_tokens', claudeCodeTurn, 'mcp-client-2025-04-04');
      expect(counted.status).toBe(200);
      expect(model.requests.at(-1)!.headers['anthropic-beta']).toBeUndefined();
    });

    it('records an Anthropic stream cut before message_stop as an error, and tells the agent so', async () => {
      // An upstream that starts a message and hangs up: what a crashed or overloaded server does.
      const cut = createServer((_request, response) => {
        response.writeHead(200, { 'content-type': 'text/event-stream' });
        response.end(
          `event: message_start\ndata: ${JSON.stringify({ type: 'message_start', message: { id: 'm', content: [], usage: { input_tokens: 3 } } })}\n\n`,
        );
      });
      await new Promise<void>((resolve) => cut.listen(0, '127.0.0.1', resolve));
      try {
        const port = (cut.address() as AddressInfo).port;
        const opened = await openAnthropicRollout({
          baseUrl: `http://127.0.0.1:${port}/v1`,
          api: 'anthropic',
        });
        const received = await events(await postMessages(opened, { ...firstTurn, stream: true }));
        expect(received.map((event) => event.type)).toEqual(['message_start', 'error']);
        expect(received[1]).toMatchObject({
          error: { message: expect.stringContaining('before message_stop') },
        });
        const [record] = await records(opened.rolloutId);
        expect(record).toMatchObject({
          api: 'messages',
          status: 'error',
          error: { code: 'MODEL_UPSTREAM_ERROR' },
        });
      } finally {
        cut.closeAllConnections();
        await new Promise((resolve) => cut.close(resolve));
      }
    });

    it('refuses a Messages call with a wrong x-api-key before reading it', async () => {
      const opened = await openAnthropicRollout();
      const response = await postMessages({ ...opened, key: 'gym-ro-wrong' }, firstTurn);
      expect(response.status).toBe(401);
      expect(await records(opened.rolloutId)).toEqual([]);
    });
  });
});
