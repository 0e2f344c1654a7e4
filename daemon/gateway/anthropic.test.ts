import { describe, expect, it } from 'vitest';
import {
  assembleMessages,
  ChatToMessagesStream,
  chatToMessagesResponse,
  messagesToChatRequest,
  readSse,
} from './anthropic.ts';

/** A Claude Code-like second turn: system blocks, a system-role message, a tool call and its result. */
const SECOND_TURN = {
  model: 'claude-sonnet',
  max_tokens: 32000,
  stream: true,
  system: [
    { type: 'text', text: 'You are Claude Code.' },
    { type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral' } },
  ],
  tools: [
    {
      name: 'Bash',
      description: 'Runs a command',
      input_schema: { type: 'object', properties: { command: { type: 'string' } } },
    },
    { type: 'web_search_20250305', name: 'web_search' },
  ],
  tool_choice: { type: 'auto', disable_parallel_tool_use: true },
  stop_sequences: ['END'],
  temperature: 0.5,
  messages: [
    { role: 'system', content: 'env: linux' },
    { role: 'user', content: [{ type: 'text', text: 'Fix add()' }] },
    {
      role: 'assistant',
      content: [
        { type: 'thinking', thinking: 'hmm', signature: 'sig' },
        { type: 'text', text: 'Running sed.' },
        { type: 'tool_use', id: 'toolu_1', name: 'Bash', input: { command: 'sed -i s/-/+/ calc.py' } },
      ],
    },
    {
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: 'ok' }] },
        { type: 'text', text: 'continue' },
      ],
    },
  ],
};

describe('Anthropic Messages -> Chat Completions request', () => {
  it('maps system, tool calls, tool results, tools and sampling fields', () => {
    const chat = messagesToChatRequest(SECOND_TURN, 'policy-v1');
    expect(chat).toEqual({
      model: 'policy-v1',
      messages: [
        { role: 'system', content: 'You are Claude Code.\nBe brief.' },
        { role: 'system', content: 'env: linux' },
        { role: 'user', content: 'Fix add()' },
        {
          role: 'assistant',
          content: 'Running sed.',
          tool_calls: [
            {
              id: 'toolu_1',
              type: 'function',
              function: { name: 'Bash', arguments: '{"command":"sed -i s/-/+/ calc.py"}' },
            },
          ],
        },
        { role: 'tool', tool_call_id: 'toolu_1', content: 'ok' },
        { role: 'user', content: 'continue' },
      ],
      tools: [
        {
          type: 'function',
          function: {
            name: 'Bash',
            description: 'Runs a command',
            parameters: { type: 'object', properties: { command: { type: 'string' } } },
          },
        },
      ],
      tool_choice: 'auto',
      parallel_tool_calls: false,
      max_tokens: 32000,
      temperature: 0.5,
      stop: ['END'],
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  it('maps tool_choice any/tool, images, and marks failed tool results', () => {
    const chat = messagesToChatRequest(
      {
        tools: [{ name: 'Read', input_schema: { type: 'object' } }],
        tool_choice: { type: 'tool', name: 'Read' },
        messages: [
          {
            role: 'user',
            content: [
              { type: 'tool_result', tool_use_id: 't', is_error: true, content: 'no such file' },
              { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } },
              { type: 'text', text: 'look' },
            ],
          },
        ],
      },
      'm',
    );
    expect(chat.tool_choice).toEqual({ type: 'function', function: { name: 'Read' } });
    expect(chat.messages).toEqual([
      { role: 'tool', tool_call_id: 't', content: '[tool error] no such file' },
      {
        role: 'user',
        content: [
          { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } },
          { type: 'text', text: 'look' },
        ],
      },
    ]);
    expect(
      messagesToChatRequest({ tools: [{ name: 'X', input_schema: {} }], tool_choice: { type: 'any' } }, 'm'),
    ).toMatchObject({ tool_choice: 'required' });
  });
});

describe('Chat Completions -> Anthropic Messages response', () => {
  it('turns content and tool calls into blocks, finish reasons into stop reasons, usage with cached tokens apart', () => {
    const message = chatToMessagesResponse(
      {
        id: 'cc1',
        choices: [
          {
            message: {
              content: 'Let me fix it.',
              tool_calls: [
                { id: 'call_1', type: 'function', function: { name: 'Bash', arguments: '{"command":"ls"}' } },
                { id: 'call_2', type: 'function', function: { name: 'Bash', arguments: 'not json' } },
              ],
            },
            finish_reason: 'tool_calls',
          },
        ],
        usage: { prompt_tokens: 100, completion_tokens: 7, prompt_tokens_details: { cached_tokens: 60 } },
      },
      'claude-sonnet',
    );
    expect(message).toEqual({
      id: 'msg_cc1',
      type: 'message',
      role: 'assistant',
      model: 'claude-sonnet',
      content: [
        { type: 'text', text: 'Let me fix it.' },
        { type: 'tool_use', id: 'call_1', name: 'Bash', input: { command: 'ls' } },
        { type: 'tool_use', id: 'call_2', name: 'Bash', input: { _raw_arguments: 'not json' } },
      ],
      stop_reason: 'tool_use',
      stop_sequence: null,
      usage: {
        input_tokens: 40,
        output_tokens: 7,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 60,
      },
    });
    const ended = chatToMessagesResponse(
      { choices: [{ message: { content: 'x' }, finish_reason: 'length' }] },
      'm',
    );
    expect(ended.stop_reason).toBe('max_tokens');
  });
});

describe('streamed Chat chunks -> Messages events', () => {
  const chunks = [
    { id: 'c1', choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] },
    { id: 'c1', choices: [{ index: 0, delta: { content: 'Fix' }, finish_reason: null }] },
    { id: 'c1', choices: [{ index: 0, delta: { content: 'ing.' }, finish_reason: null }] },
    {
      id: 'c1',
      choices: [
        {
          index: 0,
          delta: {
            tool_calls: [
              { index: 0, id: 'call_a', type: 'function', function: { name: 'Bash', arguments: '' } },
            ],
          },
          finish_reason: null,
        },
      ],
    },
    {
      id: 'c1',
      choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: '{"command":' } }] } }],
    },
    {
      id: 'c1',
      choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: '"ls"}' } }] } }],
    },
    {
      id: 'c1',
      choices: [
        {
          index: 0,
          delta: { tool_calls: [{ index: 1, id: 'call_b', function: { name: 'Read', arguments: '{}' } }] },
        },
      ],
    },
    { id: 'c1', choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] },
    { id: 'c1', choices: [], usage: { prompt_tokens: 12, completion_tokens: 9 } },
  ];

  it('emits Anthropic event order with one block per text run and per tool call, usage at the end', () => {
    const stream = new ChatToMessagesStream('claude-x');
    const events = [...chunks.flatMap((chunk) => stream.push(chunk)), ...stream.finish()];
    expect(events.map((event) => event.name)).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    expect(events.every((event) => event.data.type === event.name)).toBe(true);
    expect(events[5]!.data).toEqual({
      type: 'content_block_start',
      index: 1,
      content_block: { type: 'tool_use', id: 'call_a', name: 'Bash', input: {} },
    });
    expect(events.at(-2)!.data).toEqual({
      type: 'message_delta',
      delta: { stop_reason: 'tool_use', stop_sequence: null },
      usage: {
        input_tokens: 12,
        output_tokens: 9,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
      },
    });
    // What a client assembles from these events is the message the non-streamed path gives.
    expect(assembleMessages(events.map((event) => event.data))).toMatchObject({
      model: 'claude-x',
      stop_reason: 'tool_use',
      content: [
        { type: 'text', text: 'Fixing.' },
        { type: 'tool_use', id: 'call_a', name: 'Bash', input: { command: 'ls' } },
        { type: 'tool_use', id: 'call_b', name: 'Read', input: {} },
      ],
      usage: { output_tokens: 9 },
    });
  });

  it('closes an empty stream into a well-formed empty message', () => {
    const stream = new ChatToMessagesStream('m');
    expect(stream.finish().map((event) => event.name)).toEqual([
      'message_start',
      'message_delta',
      'message_stop',
    ]);
  });
});

describe('readSse', () => {
  it('splits events across arbitrary chunk boundaries, with names, CRLF and non-JSON data', async () => {
    const text = 'event: message_start\r\ndata: {"type":"message_start"}\r\n\r\n: comment\ndata: [DONE]\n\n';
    const bytes = new TextEncoder().encode(text);
    async function* pieces() {
      for (let i = 0; i < bytes.length; i += 7) yield bytes.slice(i, i + 7);
    }
    const events = [];
    for await (const event of readSse(pieces())) events.push(event);
    expect(events).toEqual([
      { name: 'message_start', data: { type: 'message_start' } },
      { name: null, data: '[DONE]' },
    ]);
  });
});
