/**
 * Token ids the way vLLM returns them when a Chat Completions request asks `return_token_ids`
 * (and `logprobs`), for the scripted model: the conversation is templated (a role id, its text
 * word by word, an end-of-turn id; a generation prompt at the end) and each word gets a stable
 * id, so a step's prompt starts with the previous step's prompt and completion ids as a real
 * template and tokeniser keep it. A reply with `retokeniseHistory` gets a prompt whose first
 * assistant turn comes back as other ids: the drift a real server makes when it tokenises a
 * generation anew.
 */
import type { ScriptedReply } from './script.ts';

type Json = Record<string, unknown>;

const ROLE_IDS: Record<string, number> = { system: 1, developer: 1, user: 2, assistant: 3, tool: 4 };
const END_OF_TURN = 5;
/** What the first word of a re-tokenised first assistant turn comes back as. */
const RETOKENISED_ID = 99_999;

/** A canonical text of tool-call arguments (JSON re-serialised, so key spacing does not matter). */
function argumentsText(value: unknown): string {
  if (typeof value !== 'string') return JSON.stringify(value ?? {});
  try {
    return JSON.stringify(JSON.parse(value));
  } catch {
    return value;
  }
}

function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return (content as Json[]).map((part) => (typeof part?.text === 'string' ? part.text : '')).join(' ');
}

/** An assistant turn's text: its content, then each tool call (as the model generated it). */
function assistantText(content: unknown, calls: Array<{ name: unknown; arguments: unknown }>): string {
  return [
    contentText(content),
    ...calls.map((call) => `call ${String(call.name)} ${argumentsText(call.arguments)}`),
  ]
    .filter((text) => text !== '')
    .join(' ');
}

/** Words to ids, from 1000 by first sight; shared by all calls to one server. */
export class WordTokenizer {
  readonly #ids = new Map<string, number>();

  encode(text: string): number[] {
    return text
      .split(/\s+/)
      .filter((word) => word !== '')
      .map((word) => {
        let known = this.#ids.get(word);
        if (known === undefined) {
          known = 1000 + this.#ids.size;
          this.#ids.set(word, known);
        }
        return known;
      });
  }
}

export interface ScriptedTokens {
  promptTokenIds: number[];
  completionTokenIds: number[];
  /** One logprob entry per completion id, in vLLM's `logprobs.content` shape. */
  logprobs: Json[];
}

/** The ids of a Chat Completions request and of the scripted reply to it. */
export function scriptedTokens(body: Json, reply: ScriptedReply, tokenizer: WordTokenizer): ScriptedTokens {
  const promptTokenIds: number[] = [];
  let isFirstAssistant = true;
  for (const message of (Array.isArray(body.messages) ? body.messages : []) as Json[]) {
    const role = String(message.role);
    promptTokenIds.push(ROLE_IDS[role] ?? ROLE_IDS.user!);
    const calls = (Array.isArray(message.tool_calls) ? message.tool_calls : []) as Json[];
    const text =
      role === 'assistant'
        ? assistantText(
            message.content,
            calls.map((call) => {
              const fn = (call.function ?? {}) as Json;
              return { name: fn.name, arguments: fn.arguments };
            }),
          )
        : contentText(message.content);
    const words = tokenizer.encode(text);
    if (role === 'assistant') {
      if (isFirstAssistant && reply.retokeniseHistory === true && words.length > 0) words[0] = RETOKENISED_ID;
      isFirstAssistant = false;
    }
    promptTokenIds.push(...words, END_OF_TURN);
  }
  promptTokenIds.push(ROLE_IDS.assistant!);
  const replyText = assistantText(reply.content, reply.toolCalls ?? []);
  const words = replyText.split(/\s+/).filter((word) => word !== '');
  const completionTokenIds = [...tokenizer.encode(replyText), END_OF_TURN];
  const logprobs = [...words, '<end>'].map((token, index) => ({
    token,
    logprob: -0.5 - index / 1000,
    bytes: [...Buffer.from(token)],
    top_logprobs: [],
  }));
  return { promptTokenIds, completionTokenIds, logprobs };
}
