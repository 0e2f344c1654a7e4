/**
 * Anthropic Messages in the gateway, as pure functions: translating a Messages request into a
 * Chat Completions request (for an OpenAI-compatible upstream) and the upstream's answer back
 * into a Messages response or, streamed, into Messages events; and putting streamed Messages
 * events back together into one message (for the records). Nothing here does I/O.
 *
 * The mapping (Anthropic -> Chat Completions): `system` (string or text blocks, and any message
 * with role `system`, which Claude Code sends) -> system messages; text and image blocks -> content
 * parts; `tool_use` blocks -> the assistant's `tool_calls`; `tool_result` blocks -> `tool`
 * messages (placed first in their turn, right after the assistant's calls); `tools[].input_schema`
 * -> function `parameters`; `tool_choice` auto/any/tool/none -> auto/required/function/none;
 * `stop_sequences` -> `stop`. Thinking blocks are not sent upstream (Chat Completions has no
 * place for them). Back: `finish_reason` stop/length/tool_calls/content_filter ->
 * `stop_reason` end_turn/max_tokens/tool_use/refusal, and usage with cached prompt tokens as
 * `cache_read_input_tokens` (Anthropic's `input_tokens` excludes them).
 */

// Kept here too: callers read Anthropic streams with it.
export { readSse } from './sse-reader.ts';

type Json = Record<string, unknown>;

/** The text of Anthropic content: a string, or the text of its text blocks. */
function blocksText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((block) => {
      const record = block as Json;
      if (record.type === 'text' && typeof record.text === 'string') return record.text;
      return '';
    })
    .filter((text) => text !== '')
    .join('\n');
}

/** A tool result's content as Chat Completions text (images in a tool result cannot go there). */
function toolResultText(block: Json): string {
  const text = blocksText(block.content);
  const nonText = Array.isArray(block.content)
    ? (block.content as Json[]).filter((part) => part.type !== 'text').length
    : 0;
  const note = nonText > 0 ? `${text === '' ? '' : '\n'}[${nonText} non-text block(s) omitted]` : '';
  return `${block.is_error === true ? '[tool error] ' : ''}${text}${note}`;
}

function imagePart(block: Json): Json | null {
  const source = (block.source ?? {}) as Json;
  if (source.type === 'base64' && typeof source.data === 'string')
    return {
      type: 'image_url',
      image_url: { url: `data:${String(source.media_type)};base64,${source.data}` },
    };
  if (source.type === 'url' && typeof source.url === 'string')
    return { type: 'image_url', image_url: { url: source.url } };
  return null;
}

function toChatMessages(message: Json): Json[] {
  const role = message.role;
  const content = message.content;
  if (role === 'system') return [{ role: 'system', content: blocksText(content) }];
  if (typeof content === 'string') return [{ role, content }];
  const blocks = Array.isArray(content) ? (content as Json[]) : [];
  if (role === 'assistant') {
    const text = blocks
      .filter((block) => block.type === 'text')
      .map((block) => String(block.text ?? ''))
      .join('');
    const toolCalls = blocks
      .filter((block) => block.type === 'tool_use' || block.type === 'server_tool_use')
      .map((block) => ({
        id: String(block.id),
        type: 'function',
        function: { name: String(block.name), arguments: JSON.stringify(block.input ?? {}) },
      }));
    return [
      {
        role: 'assistant',
        content: text === '' && toolCalls.length > 0 ? null : text,
        ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
      },
    ];
  }
  // A user turn: tool results become tool messages, first; the rest one user message.
  const out: Json[] = [];
  const parts: Json[] = [];
  for (const block of blocks) {
    if (block.type === 'tool_result')
      out.push({ role: 'tool', tool_call_id: String(block.tool_use_id), content: toolResultText(block) });
    else if (block.type === 'text') parts.push({ type: 'text', text: String(block.text ?? '') });
    else if (block.type === 'image') {
      const part = imagePart(block);
      if (part !== null) parts.push(part);
    } else if (block.type === 'document') parts.push({ type: 'text', text: blocksText(block.source) });
  }
  if (parts.length > 0) {
    const isTextOnly = parts.every((part) => part.type === 'text');
    out.push({
      role: 'user',
      content: isTextOnly ? parts.map((part) => String(part.text)).join('\n') : parts,
    });
  }
  return out;
}

function toChatToolChoice(choice: unknown): unknown {
  const record = (choice ?? {}) as Json;
  if (record.type === 'auto') return 'auto';
  if (record.type === 'any') return 'required';
  if (record.type === 'none') return 'none';
  if (record.type === 'tool') return { type: 'function', function: { name: String(record.name) } };
  return undefined;
}

/** A Messages request as a Chat Completions request for `model`. */
export function messagesToChatRequest(request: Json, model: unknown): Json {
  const messages: Json[] = [];
  const system = blocksText(request.system);
  if (system !== '') messages.push({ role: 'system', content: system });
  for (const message of (request.messages as Json[] | undefined) ?? [])
    messages.push(...toChatMessages(message));
  // Client tools only: server tools (web search and the like) have no input schema to offer.
  const tools = ((request.tools as Json[] | undefined) ?? [])
    .filter((tool) => tool.input_schema !== undefined)
    .map((tool) => ({
      type: 'function',
      function: {
        name: String(tool.name),
        ...(typeof tool.description === 'string' ? { description: tool.description } : {}),
        parameters: tool.input_schema,
      },
    }));
  const toolChoice = toChatToolChoice(request.tool_choice);
  const isParallelOff = (request.tool_choice as Json | undefined)?.disable_parallel_tool_use === true;
  const chat: Json = { model, messages };
  if (tools.length > 0) chat.tools = tools;
  if (toolChoice !== undefined && tools.length > 0) chat.tool_choice = toolChoice;
  if (isParallelOff && tools.length > 0) chat.parallel_tool_calls = false;
  if (typeof request.max_tokens === 'number') chat.max_tokens = request.max_tokens;
  for (const key of ['temperature', 'top_p', 'top_k'] as const)
    if (typeof request[key] === 'number') chat[key] = request[key];
  if (Array.isArray(request.stop_sequences) && request.stop_sequences.length > 0)
    chat.stop = request.stop_sequences;
  if (request.stream === true) {
    chat.stream = true;
    chat.stream_options = { include_usage: true };
  }
  return chat;
}

export function stopReasonOf(finishReason: unknown): string | null {
  if (finishReason === 'stop') return 'end_turn';
  if (finishReason === 'length') return 'max_tokens';
  if (finishReason === 'tool_calls' || finishReason === 'function_call') return 'tool_use';
  if (finishReason === 'content_filter') return 'refusal';
  return finishReason === null || finishReason === undefined ? null : 'end_turn';
}

/** Chat Completions usage as Anthropic usage (cached prompt tokens apart, as Anthropic counts them). */
export function anthropicUsageOf(usage: unknown): Json {
  const record = (usage ?? {}) as Json;
  const prompt = typeof record.prompt_tokens === 'number' ? record.prompt_tokens : 0;
  const cached = Number(((record.prompt_tokens_details ?? {}) as Json).cached_tokens ?? 0) || 0;
  return {
    input_tokens: Math.max(0, prompt - cached),
    output_tokens: typeof record.completion_tokens === 'number' ? record.completion_tokens : 0,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: cached,
  };
}

/** A tool call's arguments as a tool_use input: the parsed object, or the raw text kept visible. */
function toolInput(argumentsText: string): Json {
  if (argumentsText.trim() === '') return {};
  try {
    const parsed = JSON.parse(argumentsText) as unknown;
    if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) return parsed as Json;
  } catch {
    // Fall through: the model wrote arguments that are not a JSON object.
  }
  return { _raw_arguments: argumentsText };
}

/** A Chat Completions response (or one assembled from a stream) as a Messages response. */
export function chatToMessagesResponse(completion: Json, model: unknown): Json {
  const choice = ((completion.choices as Json[] | undefined) ?? [])[0] ?? {};
  const message = (choice.message ?? {}) as Json;
  const content: Json[] = [];
  if (typeof message.content === 'string' && message.content !== '')
    content.push({ type: 'text', text: message.content });
  for (const call of (message.tool_calls as Json[] | undefined) ?? []) {
    const fn = (call.function ?? {}) as Json;
    content.push({
      type: 'tool_use',
      id: String(call.id ?? ''),
      name: String(fn.name ?? ''),
      input: toolInput(String(fn.arguments ?? '')),
    });
  }
  return {
    id: `msg_${String(completion.id ?? 'gateway')}`,
    type: 'message',
    role: 'assistant',
    model,
    content,
    stop_reason: stopReasonOf(choice.finish_reason),
    stop_sequence: null,
    usage: anthropicUsageOf(completion.usage),
  };
}

/** One Messages SSE event: its name and data (whose `type` is the name). */
export interface MessagesEvent {
  name: string;
  data: Json;
}

/**
 * Turns streamed Chat Completions chunks into Messages events, chunk by chunk: `push` returns the
 * events a chunk yields, `finish` the closing ones (the last block's stop, `message_delta` with
 * the stop reason and usage, which a Chat stream sends last, and `message_stop`).
 */
export class ChatToMessagesStream {
  readonly #model: unknown;
  #isStarted = false;
  /** The index of the open content block, and what it is (text, or tool call number n). */
  #open: { index: number; kind: 'text' | number } | null = null;
  #nextIndex = 0;
  #finishReason: unknown = null;
  #usage: unknown;

  constructor(model: unknown) {
    this.#model = model;
  }

  #start(chunk: Json, out: MessagesEvent[]): void {
    if (this.#isStarted) return;
    this.#isStarted = true;
    out.push({
      name: 'message_start',
      data: {
        type: 'message_start',
        message: {
          id: `msg_${String(chunk.id ?? 'gateway')}`,
          type: 'message',
          role: 'assistant',
          model: this.#model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: 0, output_tokens: 0 },
        },
      },
    });
  }

  #close(out: MessagesEvent[]): void {
    if (this.#open === null) return;
    out.push({ name: 'content_block_stop', data: { type: 'content_block_stop', index: this.#open.index } });
    this.#open = null;
  }

  #openBlock(kind: 'text' | number, block: Json, out: MessagesEvent[]): number {
    this.#close(out);
    const index = this.#nextIndex++;
    this.#open = { index, kind };
    out.push({
      name: 'content_block_start',
      data: { type: 'content_block_start', index, content_block: block },
    });
    return index;
  }

  push(chunk: Json): MessagesEvent[] {
    const out: MessagesEvent[] = [];
    this.#start(chunk, out);
    if (chunk.usage) this.#usage = chunk.usage;
    for (const choice of (chunk.choices as Json[] | undefined) ?? []) {
      const delta = (choice.delta ?? {}) as Json;
      if (typeof delta.content === 'string' && delta.content !== '') {
        const index =
          this.#open?.kind === 'text'
            ? this.#open.index
            : this.#openBlock('text', { type: 'text', text: '' }, out);
        out.push({
          name: 'content_block_delta',
          data: { type: 'content_block_delta', index, delta: { type: 'text_delta', text: delta.content } },
        });
      }
      for (const call of (delta.tool_calls as Json[] | undefined) ?? []) {
        const callIndex = typeof call.index === 'number' ? call.index : 0;
        const fn = (call.function ?? {}) as Json;
        let index: number;
        if (this.#open?.kind === callIndex) index = this.#open.index;
        else
          index = this.#openBlock(
            callIndex,
            { type: 'tool_use', id: String(call.id ?? ''), name: String(fn.name ?? ''), input: {} },
            out,
          );
        if (typeof fn.arguments === 'string' && fn.arguments !== '') {
          out.push({
            name: 'content_block_delta',
            data: {
              type: 'content_block_delta',
              index,
              delta: { type: 'input_json_delta', partial_json: fn.arguments },
            },
          });
        }
      }
      if (choice.finish_reason) this.#finishReason = choice.finish_reason;
    }
    return out;
  }

  finish(): MessagesEvent[] {
    const out: MessagesEvent[] = [];
    this.#start({}, out);
    this.#close(out);
    out.push({
      name: 'message_delta',
      data: {
        type: 'message_delta',
        delta: { stop_reason: stopReasonOf(this.#finishReason ?? 'stop'), stop_sequence: null },
        usage: anthropicUsageOf(this.#usage),
      },
    });
    out.push({ name: 'message_stop', data: { type: 'message_stop' } });
    return out;
  }
}

/**
 * Streamed Messages events put back together into one message: the start's message, each
 * block's deltas joined (tool input JSON parsed at its stop), the stop reason and usage of
 * `message_delta` merged in.
 */
export function assembleMessages(events: Json[]): Json | undefined {
  let message: Json | undefined;
  const blocks: Json[] = [];
  const partialJson = new Map<number, string>();
  for (const event of events) {
    if (event.type === 'message_start') {
      message = { ...(event.message as Json) };
    } else if (event.type === 'content_block_start') {
      blocks[event.index as number] = { ...(event.content_block as Json) };
    } else if (event.type === 'content_block_delta') {
      const index = event.index as number;
      const block = blocks[index];
      const delta = (event.delta ?? {}) as Json;
      if (block === undefined) continue;
      if (delta.type === 'text_delta') block.text = `${String(block.text ?? '')}${String(delta.text ?? '')}`;
      else if (delta.type === 'input_json_delta')
        partialJson.set(index, `${partialJson.get(index) ?? ''}${String(delta.partial_json ?? '')}`);
      else if (delta.type === 'thinking_delta')
        block.thinking = `${String(block.thinking ?? '')}${String(delta.thinking ?? '')}`;
      else if (delta.type === 'signature_delta') block.signature = delta.signature;
    } else if (event.type === 'content_block_stop') {
      const index = event.index as number;
      const text = partialJson.get(index);
      if (text !== undefined && blocks[index] !== undefined) blocks[index].input = toolInput(text);
    } else if (event.type === 'message_delta' && message !== undefined) {
      Object.assign(message, (event.delta ?? {}) as Json);
      message.usage = { ...((message.usage ?? {}) as Json), ...((event.usage ?? {}) as Json) };
    }
  }
  if (message === undefined) return undefined;
  return { ...message, content: blocks.filter((block) => block !== undefined) };
}
