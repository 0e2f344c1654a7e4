/**
 * Anthropic Messages calls answered by an OpenAI-compatible upstream: the request is translated
 * to Chat Completions (./anthropic.ts), sent with the openai client, and its answer (or stream)
 * translated back, so a Claude-style agent can run against a vLLM policy. The record keeps both
 * sides: the upstream's request and answer, and the answer as the agent got it. Such an upstream
 * has no token count call, so `estimateInputTokens` stands in for it.
 * `callMessagesViaChat` is the one upstream call of this file.
 */
import type OpenAI from 'openai';
import {
  assembleMessages,
  ChatToMessagesStream,
  chatToMessagesResponse,
  type MessagesEvent,
  messagesToChatRequest,
} from './anthropic.ts';
import {
  isObject,
  type ModelCallRecord,
  type UpstreamAnswer,
  type UpstreamCall,
  usageOfAnswer,
} from './model-call.ts';
import { assembleChat } from './openai-upstream.ts';
import { type CallTokens, tokensOfChunks, tokensOfResponse, withTokenRequest } from './token-capture.ts';

/** The record of a translated call: both sides of the translation, and the usage and tokens of the upstream's side. */
function translatedRecord(
  call: UpstreamCall,
  upstreamRequest: Record<string, unknown>,
  completion: Record<string, unknown>,
  response: unknown,
  chunks: Array<Record<string, unknown>> | undefined,
  found: () => CallTokens | { missing: string },
): Partial<ModelCallRecord> {
  return {
    upstreamApi: 'chat.completions',
    upstreamRequest,
    upstreamResponse: completion,
    response,
    ...(chunks === undefined ? {} : { events: chunks }),
    ...usageOfAnswer(completion.usage),
    ...call.tokensOf?.(found()),
  };
}

/** A whole answer: one completion, translated to one Messages response. */
function translateWhole(
  call: UpstreamCall,
  upstreamRequest: Record<string, unknown>,
  completion: Record<string, unknown>,
): UpstreamAnswer {
  call.seen.usage = completion.usage;
  const response = chatToMessagesResponse(completion, call.request.model);
  return {
    response,
    record: translatedRecord(call, upstreamRequest, completion, response, undefined, () =>
      tokensOfResponse(completion),
    ),
  };
}

/** A streamed answer: each chunk is translated to Messages events as it arrives and sent on. */
async function translateStream(
  call: UpstreamCall,
  upstreamRequest: Record<string, unknown>,
  stream: AsyncIterable<Record<string, unknown>>,
): Promise<UpstreamAnswer> {
  const translator = new ChatToMessagesStream(call.request.model);
  const chunks: Array<Record<string, unknown>> = [];
  const sent: Array<Record<string, unknown>> = [];
  const send = (events: MessagesEvent[]) => {
    for (const event of events) {
      sent.push(event.data);
      call.sink?.event(event.name, event.data);
    }
  };
  for await (const chunk of stream) {
    chunks.push(chunk);
    if (isObject(chunk.usage)) call.seen.usage = chunk.usage;
    send(translator.push(chunk));
  }
  send(translator.finish());
  call.sink?.end();
  const completion = assembleChat(chunks);
  const response = assembleMessages(sent);
  return {
    response,
    record: translatedRecord(call, upstreamRequest, completion, response, chunks, () =>
      tokensOfChunks(chunks),
    ),
  };
}

/**
 * A Messages call translated to Chat Completions for an OpenAI-compatible upstream, and its
 * answer (or stream) translated back.
 */
export async function callMessagesViaChat(client: OpenAI, call: UpstreamCall): Promise<UpstreamAnswer> {
  const translated = messagesToChatRequest(call.request, call.upstreamModel);
  // The Messages response is built from content alone, so the token fields never reach the agent.
  const upstreamRequest = call.tokensOf === undefined ? translated : withTokenRequest(translated).body;
  const answer: unknown = await client.chat.completions.create(upstreamRequest as never);
  return call.isStream
    ? translateStream(call, upstreamRequest, answer as AsyncIterable<Record<string, unknown>>)
    : translateWhole(call, upstreamRequest, answer as Record<string, unknown>);
}

/**
 * A Messages request's input tokens as an OpenAI-compatible upstream, which has no count call,
 * would have them: an estimate (a quarter of the request's characters), said to be one.
 */
export function estimateInputTokens(body: Record<string, unknown>): {
  input_tokens: number;
  estimated: true;
} {
  const text = JSON.stringify({ system: body.system, messages: body.messages, tools: body.tools });
  return { input_tokens: Math.ceil(text.length / 4), estimated: true };
}
