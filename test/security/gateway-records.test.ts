/**
 * Attacks on what the model gateway records and forwards, as an agent holding its rollout's key
 * would try them (issue 19, findings 3, 4 and 7): hide its tokens from the records, make the
 * upstream fetch a URL for it, or destroy the records of its rollout.
 */
import { appendFile, readFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readSse } from '../../daemon/gateway/anthropic.ts';
import { ModelScriptSchema } from '../../harnesses/scripted-model/script.ts';
import { type ScriptedModelServer, startScriptedModelServer } from '../../harnesses/scripted-model/server.ts';
import type { ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { MemoryProvider } from '../fixtures/memory-provider.ts';

let model: ScriptedModelServer;
let daemon: TestDaemon;

beforeAll(async () => {
  model = await startScriptedModelServer(
    ModelScriptSchema.parse({
      conversations: [
        { match: 'call a tool', replies: [{ toolCalls: [{ name: 'bash', arguments: { command: 'ls' } }] }] },
        { replies: [{ content: 'fine' }] },
      ],
    }),
  );
  daemon = await startTestDaemon(
    {
      providers: [{ name: 'memory' }],
      gateway: { upstream: { baseUrl: model.baseUrl, model: 'policy' }, maxRetries: 0 },
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

interface Opened {
  rolloutId: string;
  key: string;
  basePath: string;
}

async function openRollout(body: Record<string, unknown> = {}): Promise<Opened> {
  const response = await fetch(`${daemon.address.url}/v1/gateway/rollouts`, {
    method: 'POST',
    headers: { ...daemon.auth, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(response.status).toBe(201);
  return (await response.json()) as Opened;
}

const call = (opened: Opened, path: string, body: unknown) =>
  fetch(`${daemon.address.url}${opened.basePath}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${opened.key}` },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });

async function recordsOf(rolloutId: string): Promise<{ status: number; records: Array<Json> }> {
  const response = await fetch(`${daemon.address.url}/v1/gateway/rollouts/${rolloutId}/records`, {
    headers: daemon.auth,
  });
  const body = (await response.json()) as { records?: Array<Json> };
  return { status: response.status, records: body.records ?? [] };
}

type Json = Record<string, unknown>;

/** The value at `path` inside `value` (records are checked by what they hold, not typed). */
function dig(value: unknown, ...path: Array<string | number>): unknown {
  let current = value;
  for (const key of path) current = (current as Record<string | number, unknown> | undefined)?.[key];
  return current;
}

async function sseData(response: Response): Promise<unknown[]> {
  const out: unknown[] = [];
  for await (const event of readSse(response.body as AsyncIterable<Uint8Array>)) out.push(event.data);
  return out;
}

describe('records an agent cannot destroy (finding 7)', () => {
  it('keeps every record readable when large calls are sent at once', async () => {
    const opened = await openRollout();
    // An honest call first: the attack must not cost it.
    expect(
      (await call(opened, '/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'hi' }] }))
        .status,
    ).toBe(200);
    const big = (n: number) => `${n}:${'x'.repeat(1024 * 1024)}`;
    for (const round of [0, 1]) {
      const answers = await Promise.all(
        [0, 1, 2, 3, 4, 5].map((n) =>
          call(opened, '/chat/completions', {
            model: 'm',
            stream: n % 2 === 0,
            messages: [{ role: 'user', content: big(round * 10 + n) }],
          }),
        ),
      );
      for (const answer of answers) {
        expect(answer.status).toBe(200);
        await answer.arrayBuffer();
      }
    }
    const { status, records } = await recordsOf(opened.rolloutId);
    expect(status).toBe(200);
    expect(records).toHaveLength(13);
    expect(records.every((record) => record.status === 'ok')).toBe(true);
    expect(dig(records[0], 'request', 'messages', 0, 'content')).toBe('hi');
    const contents = records.slice(1).map((record) => dig(record, 'request', 'messages', 0, 'content'));
    expect(new Set(contents)).toEqual(new Set([0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15].map(big)));
  });

  it('serves the complete records before a torn last line, and a later record after it', async () => {
    const opened = await openRollout();
    for (const text of ['one', 'two'])
      expect(
        (await call(opened, '/chat/completions', { model: 'm', messages: [{ role: 'user', content: text }] }))
          .status,
      ).toBe(200);
    const path = join(daemon.stateDir, 'gateway', `${opened.rolloutId}.jsonl`);
    // What a daemon killed in the middle of a write leaves: the start of a record, no newline.
    await appendFile(path, '{"index":2,"rolloutId":"x","request":{"messages":[{"content":"thr');
    const afterCrash = await recordsOf(opened.rolloutId);
    expect(afterCrash.status).toBe(200);
    expect(
      afterCrash.records.slice(0, 2).map((record) => dig(record, 'request', 'messages', 0, 'content')),
    ).toEqual(['one', 'two']);
    // The torn record is reported where it was, as a call whose usage is unknown.
    expect(afterCrash.records).toHaveLength(3);
    expect(afterCrash.records[2]).toMatchObject({
      status: 'error',
      usage: null,
      error: { code: 'RECORD_DAMAGED' },
      damaged: { line: 3 },
    });

    // The daemon restarted: the rollout is opened again and records more calls.
    await fetch(`${daemon.address.url}/v1/gateway/rollouts/${opened.rolloutId}`, {
      method: 'DELETE',
      headers: daemon.auth,
    });
    const again = await openRollout({ rolloutId: opened.rolloutId });
    expect(
      (await call(again, '/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'four' }] }))
        .status,
    ).toBe(200);
    const later = await recordsOf(opened.rolloutId);
    expect(later.status).toBe(200);
    expect(later.records).toHaveLength(4);
    expect(later.records[2]).toMatchObject({ error: { code: 'RECORD_DAMAGED' }, damaged: { line: 3 } });
    expect(later.records[3]).toMatchObject({ status: 'ok', request: { messages: [{ content: 'four' }] } });
    expect((await readFile(path, 'utf8')).endsWith('\n')).toBe(true);
  });
});

describe('token counts an agent cannot hide (finding 3)', () => {
  const usageOf = (record: Json) => record.usage as Record<string, number> | null | undefined;

  it('records the usage of a streamed Chat Completions call that did not ask for it, and hides what it added', async () => {
    const opened = await openRollout();
    for (const [variant, extra] of [
      ['no stream_options', {}],
      ['include_usage false', { stream_options: { include_usage: false } }],
      ['stream_options null', { stream_options: null }],
      ['tool call', {}],
    ] as const) {
      const before = model.requests.length;
      const response = await call(opened, '/chat/completions', {
        model: 'm',
        stream: true,
        messages: [{ role: 'user', content: variant === 'tool call' ? 'call a tool' : `hello ${variant}` }],
        ...extra,
      });
      expect(response.status, variant).toBe(200);
      const chunks = (await sseData(response)).filter((data) => typeof data === 'object') as Array<
        Record<string, unknown>
      >;
      expect(model.requests.length - before).toBe(1);
      expect(model.requests.at(-1)!.body.stream_options, variant).toMatchObject({ include_usage: true });
      // The agent sees what it would without the gateway: no usage chunk, no usage fields.
      expect(chunks.length).toBeGreaterThan(1);
      expect(
        chunks.some((chunk) => 'usage' in chunk),
        variant,
      ).toBe(false);
    }
    const { records } = await recordsOf(opened.rolloutId);
    expect(records).toHaveLength(4);
    for (const record of records) {
      expect(usageOf(record)?.prompt_tokens).toBeGreaterThan(0);
      expect(usageOf(record)?.completion_tokens).toBeGreaterThan(0);
    }
    expect(dig(records[3], 'response', 'choices', 0, 'message', 'tool_calls', 0, 'function', 'name')).toBe(
      'bash',
    );
  });

  it('passes usage on to an agent that asked for it, with its other stream options', async () => {
    const opened = await openRollout();
    const response = await call(opened, '/chat/completions', {
      model: 'm',
      stream: true,
      stream_options: { include_usage: true, include_obfuscation: false },
      messages: [{ role: 'user', content: 'hello' }],
    });
    const chunks = (await sseData(response)).filter((data) => typeof data === 'object') as Array<Json>;
    expect(dig(chunks.at(-1), 'usage', 'prompt_tokens')).toBeGreaterThan(0);
    expect(model.requests.at(-1)!.body.stream_options).toEqual({
      include_usage: true,
      include_obfuscation: false,
    });
  });

  it('refuses a stream flag or stream options that are not what they look like', async () => {
    const opened = await openRollout();
    const before = model.requests.length;
    for (const [path, body, field] of [
      [
        '/chat/completions',
        { model: 'm', stream: 'true', messages: [{ role: 'user', content: 'hi' }] },
        'stream',
      ],
      ['/chat/completions', { model: 'm', stream: 1, messages: [{ role: 'user', content: 'hi' }] }, 'stream'],
      [
        '/chat/completions',
        { model: 'm', stream: true, stream_options: 'no', messages: [] },
        'stream_options',
      ],
      ['/responses', { model: 'm', stream: 'yes', input: 'hi' }, 'stream'],
      [
        '/messages',
        { model: 'm', max_tokens: 5, stream: 'true', messages: [{ role: 'user', content: 'hi' }] },
        'stream',
      ],
    ] as const) {
      const response = await call(opened, path, body);
      expect(response.status, `${path} ${field}`).toBe(400);
      expect(((await response.json()) as { error: { message: string } }).error.message).toContain(
        `refuses ${field}:`,
      );
    }
    expect(model.requests.length).toBe(before);
  });

  it('marks a call whose upstream sent no usage, so its tokens are known to be missing', async () => {
    // An upstream that never reports usage, whatever it is asked.
    const bare: Server = createServer((request, response) => {
      let body = '';
      request.on('data', (chunk) => (body += chunk));
      request.on('end', () => {
        const isStream = (JSON.parse(body) as { stream?: boolean }).stream === true;
        const completion = { id: 'c1', object: 'chat.completion', created: 0, model: 'policy' };
        if (!isStream) {
          response.writeHead(200, { 'content-type': 'application/json' });
          response.end(
            JSON.stringify({
              ...completion,
              choices: [{ index: 0, message: { role: 'assistant', content: 'x' }, finish_reason: 'stop' }],
            }),
          );
          return;
        }
        response.writeHead(200, { 'content-type': 'text/event-stream' });
        response.write(
          `data: ${JSON.stringify({ ...completion, object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: 'x' }, finish_reason: 'stop' }] })}\n\n`,
        );
        response.end('data: [DONE]\n\n');
      });
    });
    await new Promise<void>((resolve) => bare.listen(0, '127.0.0.1', resolve));
    try {
      const opened = await openRollout({
        upstream: { baseUrl: `http://127.0.0.1:${(bare.address() as AddressInfo).port}/v1` },
      });
      for (const stream of [true, false]) {
        const response = await call(opened, '/chat/completions', {
          model: 'm',
          stream,
          messages: [{ role: 'user', content: 'hi' }],
        });
        expect(response.status).toBe(200);
        await response.arrayBuffer();
      }
      const { records } = await recordsOf(opened.rolloutId);
      expect(records).toHaveLength(2);
      for (const record of records) {
        expect(record.status).toBe('ok');
        expect(record.usage).toBeNull();
        expect(record.usageMissing).toMatch(/no usage/);
      }
    } finally {
      bare.closeAllConnections();
      await new Promise((resolve) => bare.close(resolve));
    }
  });
});

describe('no remote fetch reaches the upstream (finding 4)', () => {
  const SENTINEL = 'http://127.0.0.1:9/exfiltrate?secret=';
  const image = { type: 'image', source: { type: 'url', url: `${SENTINEL}image` } };

  const anthropicAttacks: Array<[string, unknown[]]> = [
    ['image in a content document', [{ type: 'document', source: { type: 'content', content: [image] } }]],
    [
      'image in a content document in a tool result',
      [
        {
          type: 'tool_result',
          tool_use_id: 't',
          content: [{ type: 'document', source: { type: 'content', content: [image] } }],
        },
      ],
    ],
    ['document by URL', [{ type: 'document', source: { type: 'url', url: `${SENTINEL}pdf` } }]],
    ['image in a search result', [{ type: 'search_result', source: 'x', title: 't', content: [image] }]],
    [
      'a source of an unknown type',
      [{ type: 'image', source: { type: 'remote', location: `${SENTINEL}r` } }],
    ],
    [
      'a base64 source with a URL beside it',
      [
        {
          type: 'image',
          source: { type: 'base64', media_type: 'image/png', data: 'AA', url: `${SENTINEL}b` },
        },
      ],
    ],
    [
      'an image with a URL field',
      [
        {
          type: 'image',
          url: `${SENTINEL}f`,
          source: { type: 'base64', media_type: 'image/png', data: 'AA' },
        },
      ],
    ],
    [
      'a web fetch result replayed',
      [
        {
          type: 'web_fetch_tool_result',
          tool_use_id: 's',
          content: { type: 'web_fetch_result', url: `${SENTINEL}w` },
        },
      ],
    ],
    [
      'a server tool call replayed',
      [{ type: 'server_tool_use', id: 's', name: 'web_fetch', input: { url: `${SENTINEL}s` } }],
    ],
    [
      'an MCP tool call replayed',
      [{ type: 'mcp_tool_use', id: 's', name: 'x', server_name: `${SENTINEL}m`, input: {} }],
    ],
    ['a block of an unknown type', [{ type: 'remote_image', url: `${SENTINEL}u` }]],
  ];

  it('refuses every nested remote source of a Messages request, for both upstream kinds', async () => {
    const anthropic = await openRollout({ upstream: { baseUrl: model.baseUrl, api: 'anthropic' } });
    const translated = await openRollout();
    const before = model.requests.length;
    for (const opened of [anthropic, translated]) {
      for (const [name, content] of anthropicAttacks) {
        for (const role of ['user', 'assistant']) {
          const response = await call(opened, '/messages', {
            model: 'm',
            max_tokens: 10,
            messages: [{ role, content }],
          });
          expect(response.status, `${name} (${role})`).toBe(400);
          expect(((await response.json()) as { error: { code: string } }).error.code).toBe(
            'VALIDATION_FAILED',
          );
        }
      }
      const system = await call(opened, '/messages', {
        model: 'm',
        max_tokens: 10,
        system: [{ type: 'text', text: 'x' }, image],
        messages: [{ role: 'user', content: 'hi' }],
      });
      expect(system.status, 'image in system').toBe(400);
    }
    expect(model.requests.length).toBe(before);
    // What Claude Code sends passes: text, base64 images and PDFs, text and content documents, tool results, thinking.
    const fine = await call(anthropic, '/messages', {
      model: 'm',
      max_tokens: 10,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'look', cache_control: { type: 'ephemeral' } },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } },
            {
              type: 'document',
              source: { type: 'base64', media_type: 'application/pdf', data: 'AAAA' },
              title: 'a',
            },
            {
              type: 'document',
              source: { type: 'text', media_type: 'text/plain', data: 'plain' },
              citations: { enabled: true },
            },
            {
              type: 'document',
              source: {
                type: 'content',
                content: [
                  { type: 'text', text: 'inner' },
                  { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA' } },
                ],
              },
            },
          ],
        },
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'hmm', signature: 'sig' },
            { type: 'redacted_thinking', data: 'zzz' },
            {
              type: 'text',
              text: 'ok',
              citations: [
                {
                  type: 'char_location',
                  cited_text: 'p',
                  document_index: 0,
                  start_char_index: 0,
                  end_char_index: 1,
                },
              ],
            },
            {
              type: 'tool_use',
              id: 't1',
              name: 'bash',
              input: { url: 'https://example.org/a client tool may take URLs' },
            },
          ],
        },
        {
          role: 'user',
          content: [
            {
              type: 'tool_result',
              tool_use_id: 't1',
              is_error: false,
              content: [
                { type: 'text', text: 'out' },
                {
                  type: 'search_result',
                  source: 'https://example.org',
                  title: 't',
                  content: [{ type: 'text', text: 's' }],
                },
              ],
            },
          ],
        },
      ],
    });
    expect(fine.status).toBe(200);
    expect(model.requests.length).toBe(before + 1);
    const received = model.requests.slice(before).map((request) => JSON.stringify(request.body));
    expect(received.some((body) => body.includes(SENTINEL))).toBe(false);
  });

  it('refuses every nested remote fetch of a Chat Completions or Responses request', async () => {
    const opened = await openRollout();
    const before = model.requests.length;
    const chat = (content: unknown, role = 'user') => ({
      model: 'm',
      messages: [{ role, content, ...(role === 'tool' ? { tool_call_id: 't' } : {}) }],
    });
    const responses = (input: unknown) => ({ model: 'm', input });
    const attacks: Array<[string, string, unknown]> = [
      [
        'chat image by URL string',
        '/chat/completions',
        chat([{ type: 'image_url', image_url: `${SENTINEL}1` }]),
      ],
      [
        'chat image in a tool message',
        '/chat/completions',
        chat([{ type: 'image_url', image_url: { url: `${SENTINEL}2` } }], 'tool'),
      ],
      [
        'chat audio by URL (vLLM)',
        '/chat/completions',
        chat([{ type: 'audio_url', audio_url: { url: `${SENTINEL}3` } }]),
      ],
      [
        'chat video by URL (vLLM)',
        '/chat/completions',
        chat([{ type: 'video_url', video_url: { url: `${SENTINEL}4` } }]),
      ],
      ['chat file by URL', '/chat/completions', chat([{ type: 'file', file: { file_url: `${SENTINEL}5` } }])],
      ['chat part of an unknown type', '/chat/completions', chat([{ type: 'remote', url: `${SENTINEL}6` }])],
      [
        'chat text part with a URL beside it',
        '/chat/completions',
        chat([{ type: 'text', text: 'x', image_url: `${SENTINEL}7` }]),
      ],
      [
        'responses image in a function output',
        '/responses',
        responses([
          {
            type: 'function_call_output',
            call_id: 'c',
            output: [{ type: 'input_image', image_url: `${SENTINEL}8` }],
          },
        ]),
      ],
      [
        'responses file by URL in a function output',
        '/responses',
        responses([
          {
            type: 'function_call_output',
            call_id: 'c',
            output: [{ type: 'input_file', file_url: `${SENTINEL}9` }],
          },
        ]),
      ],
      [
        'responses image as an object',
        '/responses',
        responses([
          { role: 'user', content: [{ type: 'input_image', image_url: { url: `${SENTINEL}10` } }] },
        ]),
      ],
      [
        'responses web search call replayed',
        '/responses',
        responses([
          { type: 'web_search_call', id: 'w', action: { type: 'open_page', url: `${SENTINEL}11` } },
        ]),
      ],
      [
        'responses item of an unknown type',
        '/responses',
        responses([{ type: 'remote_fetch', url: `${SENTINEL}12` }]),
      ],
      [
        'responses code interpreter tool',
        '/responses',
        { model: 'm', input: 'hi', tools: [{ type: 'code_interpreter', container: { type: 'auto' } }] },
      ],
      [
        'responses file search tool',
        '/responses',
        { model: 'm', input: 'hi', tools: [{ type: 'file_search', vector_store_ids: ['vs'] }] },
      ],
    ];
    for (const [name, path, body] of attacks) {
      const response = await call(opened, path, body);
      expect(response.status, name).toBe(400);
      expect(((await response.json()) as { error: { code: string } }).error.code).toBe('VALIDATION_FAILED');
    }
    expect(model.requests.length).toBe(before);
    // What Codex and the OpenAI clients send passes.
    const codex = await call(opened, '/responses', {
      model: 'm',
      input: [
        { type: 'message', role: 'developer', content: [{ type: 'input_text', text: 'be brief' }] },
        {
          type: 'message',
          role: 'user',
          content: [
            { type: 'input_text', text: 'hi' },
            { type: 'input_image', image_url: 'data:image/png;base64,AA', detail: 'auto' },
          ],
        },
        {
          type: 'reasoning',
          id: 'rs_1',
          summary: [{ type: 'summary_text', text: 's' }],
          encrypted_content: 'e',
        },
        {
          type: 'message',
          role: 'assistant',
          id: 'msg_1',
          status: 'completed',
          content: [{ type: 'output_text', text: 'ok', annotations: [] }],
        },
        { type: 'function_call', id: 'fc_1', call_id: 'c1', name: 'exec_command', arguments: '{}' },
        { type: 'function_call_output', call_id: 'c1', output: 'done' },
        { type: 'function_call_output', call_id: 'c1', output: [{ type: 'input_text', text: 'done' }] },
      ],
      tools: [{ type: 'function', name: 'exec_command', parameters: { type: 'object' } }],
    });
    expect(codex.status).toBe(200);
    const chatOk = await call(opened, '/chat/completions', {
      model: 'm',
      messages: [
        { role: 'system', content: 'sys' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'hi' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,AA', detail: 'low' } },
          ],
        },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 't', type: 'function', function: { name: 'bash', arguments: '{}' } }],
        },
        { role: 'tool', tool_call_id: 't', content: [{ type: 'text', text: 'out' }] },
      ],
    });
    expect(chatOk.status).toBe(200);
    expect(model.requests.length).toBe(before + 2);
    expect(
      model.requests.slice(before).some((request) => JSON.stringify(request.body).includes(SENTINEL)),
    ).toBe(false);
  });
});
