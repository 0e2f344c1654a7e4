/**
 * A scripted model server speaking OpenAI Chat Completions, the Responses API and Anthropic
 * Messages, streaming or not, with tool calls, closely enough for the real clients (the openai
 * SDK, Codex CLI, Claude Code). Harness tests use it so they are deterministic and need no key.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { chooseReply, type ModelScript, type ScriptedReply, viewConversation } from './script.ts';
import { type ScriptedTokens, scriptedTokens, WordTokenizer } from './token-ids.ts';

export interface ScriptedRequestLog {
  path: string;
  body: Record<string, unknown>;
  headers: Record<string, string | string[] | undefined>;
}

export interface ScriptedModelServer {
  /** `http://127.0.0.1:PORT/v1` */
  baseUrl: string;
  /** Every request received, in order. */
  requests: ScriptedRequestLog[];
  close(): Promise<void>;
}

const id = (prefix: string) => `${prefix}_${randomBytes(8).toString('hex')}`;
const argumentsText = (value: Record<string, unknown> | string) =>
  typeof value === 'string' ? value : JSON.stringify(value);
const approxTokens = (text: string) => Math.max(1, Math.ceil(text.length / 4));

async function readJson(request: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  return text === '' ? {} : (JSON.parse(text) as Record<string, unknown>);
}

function sendJson(response: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  response.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
  });
  response.end(text);
}

function startSse(response: ServerResponse): void {
  response.writeHead(200, {
    'content-type': 'text/event-stream',
    'cache-control': 'no-cache',
    connection: 'close',
  });
}

function chatCompletion(
  reply: ScriptedReply,
  model: string,
  stream: boolean,
  response: ServerResponse,
  includeUsage: boolean,
  /** Set when the request asked for token ids (vLLM's `return_token_ids`); logprobs with them when asked. */
  tokens?: ScriptedTokens & { isLogprobsAsked: boolean },
): void {
  const completionId = id('chatcmpl');
  // As vLLM writes them: the prompt's ids at the top (streamed: on the first chunk), the
  // completion's on the choice (streamed: here all on the last chunk), logprobs beside them.
  const promptIds = tokens === undefined ? {} : { prompt_token_ids: tokens.promptTokenIds };
  const choiceIds =
    tokens === undefined
      ? {}
      : {
          token_ids: tokens.completionTokenIds,
          ...(tokens.isLogprobsAsked ? { logprobs: { content: tokens.logprobs } } : {}),
        };
  const created = Math.floor(Date.now() / 1000);
  const toolCalls = (reply.toolCalls ?? []).map((call) => ({
    id: id('call'),
    type: 'function' as const,
    function: { name: call.name, arguments: argumentsText(call.arguments) },
  }));
  const finishReason = reply.finishReason ?? (toolCalls.length > 0 ? 'tool_calls' : 'stop');
  const content = reply.content ?? (toolCalls.length > 0 ? null : '');
  const usage = {
    prompt_tokens: 10,
    completion_tokens: approxTokens(content ?? JSON.stringify(toolCalls)),
    total_tokens: 0,
  };
  usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
  if (!stream) {
    sendJson(response, 200, {
      id: completionId,
      object: 'chat.completion',
      created,
      model,
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content, ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}) },
          finish_reason: finishReason,
          logprobs: null,
          ...choiceIds,
          ...reply.choiceExtra,
        },
      ],
      usage,
      ...promptIds,
      ...reply.extra,
    });
    return;
  }
  startSse(response);
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) =>
    response.write(
      `data: ${JSON.stringify({ id: completionId, object: 'chat.completion.chunk', created, model, choices, ...extra })}\n\n`,
    );
  chunk([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }], promptIds);
  if (content) {
    // Two pieces, so clients really have to concatenate.
    const middle = Math.ceil(content.length / 2);
    for (const piece of [content.slice(0, middle), content.slice(middle)])
      if (piece) chunk([{ index: 0, delta: { content: piece }, finish_reason: null }]);
  }
  toolCalls.forEach((call, index) => {
    chunk([
      {
        index: 0,
        delta: {
          tool_calls: [
            { index, id: call.id, type: 'function', function: { name: call.function.name, arguments: '' } },
          ],
        },
        finish_reason: null,
      },
    ]);
    chunk([
      {
        index: 0,
        delta: { tool_calls: [{ index, function: { arguments: call.function.arguments } }] },
        finish_reason: null,
      },
    ]);
  });
  chunk(
    [{ index: 0, delta: {}, finish_reason: finishReason, ...choiceIds, ...reply.choiceExtra }],
    reply.extra ?? {},
  );
  // As OpenAI's API does: a stream reports usage only when asked to (stream_options.include_usage).
  if (includeUsage) chunk([], { usage });
  response.end('data: [DONE]\n\n');
}

function responsesApi(reply: ScriptedReply, model: string, stream: boolean, response: ServerResponse): void {
  const responseId = id('resp');
  const createdAt = Math.floor(Date.now() / 1000);
  const output: Array<Record<string, unknown>> = [];
  if (reply.content !== undefined && reply.content !== '') {
    output.push({
      id: id('msg'),
      type: 'message',
      role: 'assistant',
      status: 'completed',
      content: [{ type: 'output_text', text: reply.content, annotations: [] }],
      ...reply.choiceExtra,
    });
  }
  for (const call of reply.toolCalls ?? []) {
    output.push({
      id: id('fc'),
      type: 'function_call',
      status: 'completed',
      call_id: id('call'),
      name: call.name,
      arguments: argumentsText(call.arguments),
    });
  }
  const usage = {
    input_tokens: 10,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: 5,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 15,
  };
  const complete = {
    id: responseId,
    object: 'response',
    created_at: createdAt,
    model,
    status: 'completed',
    output,
    usage,
    ...reply.extra,
  };
  if (!stream) {
    sendJson(response, 200, complete);
    return;
  }
  startSse(response);
  let sequence = 0;
  const event = (type: string, data: Record<string, unknown>) =>
    response.write(
      `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: sequence++, ...data })}\n\n`,
    );
  event('response.created', { response: { ...complete, status: 'in_progress', output: [] } });
  output.forEach((item, outputIndex) => {
    if (item.type === 'message') {
      const text = (item.content as Array<{ text: string }>)[0]!.text;
      event('response.output_item.added', {
        output_index: outputIndex,
        item: { ...item, status: 'in_progress', content: [] },
      });
      event('response.content_part.added', {
        item_id: item.id,
        output_index: outputIndex,
        content_index: 0,
        part: { type: 'output_text', text: '', annotations: [] },
      });
      event('response.output_text.delta', {
        item_id: item.id,
        output_index: outputIndex,
        content_index: 0,
        delta: text,
      });
      event('response.output_text.done', {
        item_id: item.id,
        output_index: outputIndex,
        content_index: 0,
        text,
      });
      event('response.content_part.done', {
        item_id: item.id,
        output_index: outputIndex,
        content_index: 0,
        part: { type: 'output_text', text, annotations: [] },
      });
    } else {
      event('response.output_item.added', {
        output_index: outputIndex,
        item: { ...item, status: 'in_progress', arguments: '' },
      });
      event('response.function_call_arguments.delta', {
        item_id: item.id,
        output_index: outputIndex,
        delta: item.arguments,
      });
      event('response.function_call_arguments.done', {
        item_id: item.id,
        output_index: outputIndex,
        arguments: item.arguments,
      });
    }
    event('response.output_item.done', { output_index: outputIndex, item });
  });
  event('response.completed', { response: complete });
  response.end();
}

function anthropicMessages(
  reply: ScriptedReply,
  model: string,
  stream: boolean,
  response: ServerResponse,
): void {
  const messageId = id('msg');
  const content: Array<Record<string, unknown>> = [];
  if (reply.content) content.push({ type: 'text', text: reply.content });
  for (const call of reply.toolCalls ?? []) {
    content.push({
      type: 'tool_use',
      id: id('toolu'),
      name: call.name,
      input: typeof call.arguments === 'string' ? JSON.parse(call.arguments) : call.arguments,
    });
  }
  const stopReason =
    (reply.toolCalls?.length ?? 0) > 0
      ? 'tool_use'
      : reply.finishReason === 'length'
        ? 'max_tokens'
        : 'end_turn';
  const usage = {
    input_tokens: 10,
    output_tokens: 5,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
  };
  if (!stream) {
    sendJson(response, 200, {
      id: messageId,
      type: 'message',
      role: 'assistant',
      model,
      content,
      stop_reason: stopReason,
      stop_sequence: null,
      usage,
      ...reply.extra,
    });
    return;
  }
  startSse(response);
  const event = (type: string, data: Record<string, unknown>) =>
    response.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
  event('message_start', {
    message: {
      id: messageId,
      type: 'message',
      role: 'assistant',
      model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { ...usage, output_tokens: 0 },
    },
  });
  content.forEach((block, index) => {
    if (block.type === 'text') {
      event('content_block_start', { index, content_block: { type: 'text', text: '' } });
      event('content_block_delta', { index, delta: { type: 'text_delta', text: block.text } });
    } else {
      event('content_block_start', { index, content_block: { ...block, input: {} } });
      event('content_block_delta', {
        index,
        delta: { type: 'input_json_delta', partial_json: JSON.stringify(block.input) },
      });
    }
    event('content_block_stop', { index });
  });
  event('message_delta', {
    delta: { stop_reason: stopReason, stop_sequence: null },
    usage: { output_tokens: usage.output_tokens },
  });
  event('message_stop', {});
  response.end();
}

/** Serves the script on 127.0.0.1 (port 0 picks a free one). */
export async function startScriptedModelServer(
  script: ModelScript,
  options: { port?: number; host?: string } = {},
): Promise<ScriptedModelServer> {
  const requests: ScriptedRequestLog[] = [];
  const tokenizer = new WordTokenizer();
  const server: Server = createServer((request, response) => {
    void (async () => {
      const path = (request.url ?? '/').split('?')[0]!;
      if (request.method === 'HEAD' || path.endsWith('/api/hello')) {
        response.writeHead(200).end();
        return;
      }
      if (request.method === 'GET' && path.endsWith('/models')) {
        sendJson(response, 200, {
          object: 'list',
          data: [
            {
              id: script.model,
              object: 'model',
              type: 'model',
              display_name: script.model,
              created: 0,
              owned_by: 'scripted',
            },
          ],
          has_more: false,
        });
        return;
      }
      let body: Record<string, unknown>;
      try {
        body = await readJson(request);
      } catch {
        sendJson(response, 400, { error: { message: 'body is not JSON', type: 'invalid_request_error' } });
        return;
      }
      requests.push({ path, body, headers: request.headers });
      if (path.endsWith('/messages/count_tokens')) {
        sendJson(response, 200, { input_tokens: approxTokens(JSON.stringify(body)) });
        return;
      }
      const reply = chooseReply(script, viewConversation(body));
      if (reply.error !== undefined) {
        sendJson(response, reply.error.status, {
          error: { message: reply.error.message, type: 'scripted_error', code: String(reply.error.status) },
        });
        return;
      }
      const stream = body.stream === true;
      const model = typeof body.model === 'string' ? body.model : script.model;
      const streamOptions = body.stream_options as { include_usage?: unknown } | null | undefined;
      const tokens =
        body.return_token_ids === true && reply.withholdTokenIds !== true
          ? { ...scriptedTokens(body, reply, tokenizer), isLogprobsAsked: body.logprobs === true }
          : undefined;
      if (path.endsWith('/chat/completions'))
        chatCompletion(reply, model, stream, response, streamOptions?.include_usage === true, tokens);
      else if (path.endsWith('/responses')) responsesApi(reply, model, stream, response);
      else if (path.endsWith('/messages')) anthropicMessages(reply, model, stream, response);
      else sendJson(response, 404, { error: { message: `no route ${path}`, type: 'not_found' } });
    })().catch((error: unknown) => {
      if (!response.headersSent)
        sendJson(response, 500, { error: { message: String(error), type: 'server_error' } });
      else response.end();
    });
  });
  await new Promise<void>((resolve) =>
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', resolve),
  );
  const address = server.address() as { port: number };
  return {
    baseUrl: `http://${options.host ?? '127.0.0.1'}:${address.port}/v1`,
    requests,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
