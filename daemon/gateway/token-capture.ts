/**
 * Exact tokens through the gateway, as pure functions: what the gateway adds to a Chat
 * Completions request so a vLLM upstream returns the token ids it was conditioned on and
 * produced (with their logprobs), how that is taken back out of what the agent sees, how the
 * tokens are read from an answer (whole or streamed), and how re-tokenisation drift between two
 * calls of a rollout is told. Nothing here does I/O.
 *
 * What vLLM's OpenAI-compatible server does (since 0.10.2), which this follows:
 * - `return_token_ids: true` on a Chat Completions request adds `prompt_token_ids` to the
 *   response (top level; streamed: on the first chunk) and `token_ids` to each choice
 *   (streamed: each chunk's choice carries the ids of its delta). Not asked, vLLM writes both
 *   keys as `null`. Streamed and asked, it also sends chunks whose delta is empty (tokens the
 *   tool or reasoning parser held back), which it would not send otherwise.
 * - `logprobs: true` adds `choices[].logprobs.content[]` (one entry per completion token, with
 *   `top_logprobs` as many as `top_logprobs` asks, none by default); not asked, `logprobs` is
 *   `null`.
 * - The Responses API has no token ids for ordinary models (only gpt-oss's raw messages), so
 *   the gateway asks for them on Chat Completions only (and on Messages calls it translates to
 *   Chat Completions).
 *
 * Re-tokenisation drift is what NeMo RL's OpenAI-compatible server corrects and NeMo Gym's
 * on-policy notes describe: an agent sends its history back as text, the server templates and
 * tokenises it again, and a previous generation can come back as other ids than the model
 * produced, so the trainer would train on tokens the policy never sampled. A call keeps the
 * property a trainer needs when its prompt ids start with the prompt ids of the call it
 * continues followed by that call's completion ids.
 */

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const isTokenArray = (value: unknown): value is number[] =>
  Array.isArray(value) && value.every((item) => Number.isInteger(item));

/** What the gateway added to one request, so exactly that is taken back out of the answer. */
export interface TokenRequestAdded {
  /** The gateway asked for `return_token_ids` (the agent did not). */
  tokenIds: boolean;
  /** The gateway asked for `logprobs` (the agent did not). */
  logprobs: boolean;
}

/**
 * A Chat Completions request with the token fields asked for, whatever the agent sent, and what
 * was added. Without `top_logprobs` vLLM returns the sampled token's logprob only, the least
 * that is enough to train on.
 */
export function withTokenRequest(body: Json): { body: Json; added: TokenRequestAdded } {
  const added: TokenRequestAdded = {
    tokenIds: body.return_token_ids !== true,
    logprobs: body.logprobs !== true,
  };
  // The agent's own top_logprobs is kept as it sent it: how many alternatives it sees is its choice.
  return { body: { ...body, return_token_ids: true, logprobs: true }, added };
}

/** A choice (of a response or a chunk) as the agent would have had it without the gateway's fields. */
function hideInChoice(choice: unknown, added: TokenRequestAdded): unknown {
  if (!isObject(choice)) return choice;
  const shown: Json = { ...choice };
  if (added.tokenIds && 'token_ids' in shown) shown.token_ids = null;
  if (added.logprobs && 'logprobs' in shown) shown.logprobs = null;
  return shown;
}

/** A non-streamed completion as the agent would have had it: the added fields as vLLM writes them unasked (`null`). */
export function hideAddedInResponse(response: unknown, added: TokenRequestAdded): unknown {
  if (!isObject(response)) return response;
  const shown: Json = { ...response };
  if (added.tokenIds && 'prompt_token_ids' in shown) shown.prompt_token_ids = null;
  if (Array.isArray(shown.choices))
    shown.choices = shown.choices.map((choice) => hideInChoice(choice, added));
  return shown;
}

/**
 * Whether a streamed choice has no delta and no finish: vLLM sends such a chunk only when ids
 * are asked (to carry tokens a parser held back), so without us the agent would not get it,
 * even the logprobs it carries.
 */
function isEmptyChoice(choice: unknown): boolean {
  if (!isObject(choice)) return false;
  const delta = choice.delta;
  const isDeltaEmpty = delta === undefined || (isObject(delta) && Object.keys(delta).length === 0);
  return isDeltaEmpty && (choice.finish_reason ?? null) === null;
}

/**
 * A streamed chunk as the agent would have had it, or null for a chunk it would not have got at
 * all (one vLLM sent only to carry token ids).
 */
export function hideAddedInChunk(chunk: Json, added: TokenRequestAdded): Json | null {
  const shown = hideAddedInResponse(chunk, added) as Json;
  if (added.tokenIds && Array.isArray(shown.choices) && shown.choices.length > 0) {
    const isOnlyTokens = shown.choices.every(isEmptyChoice) && !isObject(shown.usage);
    if (isOnlyTokens) return null;
  }
  return shown;
}

/** The tokens of one call, as recorded beside its response (choice 0: the one an agent continues). */
export interface CallTokens {
  /** The ids the upstream conditioned on (its own templating and tokenising of the request). */
  promptTokenIds: number[];
  /** The ids it sampled, in order. */
  completionTokenIds: number[];
  /** The logprob of each sampled id, in order; absent when the upstream sent none. */
  completionLogprobs?: number[];
}

/** The sampled tokens' logprobs of a choice's `logprobs.content`, or undefined when there are none. */
function logprobsOf(logprobs: unknown): number[] | undefined {
  if (!isObject(logprobs) || !Array.isArray(logprobs.content)) return undefined;
  const values = logprobs.content.map((entry) => (isObject(entry) ? entry.logprob : undefined));
  return values.every((value) => typeof value === 'number') ? (values as number[]) : undefined;
}

function firstChoice(value: Json): Json | undefined {
  if (!Array.isArray(value.choices)) return undefined;
  return value.choices.find((choice) => isObject(choice) && (choice.index ?? 0) === 0) as Json | undefined;
}

/**
 * The tokens of a non-streamed completion, or why there are none (the upstream did not return
 * them: it is not vLLM, or too old to know `return_token_ids`).
 */
export function tokensOfResponse(response: unknown): CallTokens | { missing: string } {
  if (!isObject(response)) return { missing: 'the upstream answered no completion object' };
  const choice = firstChoice(response);
  if (!isTokenArray(response.prompt_token_ids) || choice === undefined || !isTokenArray(choice.token_ids))
    return {
      missing: 'the upstream returned no prompt_token_ids or token_ids (is it vLLM 0.10.2 or later?)',
    };
  const completionLogprobs = logprobsOf(choice.logprobs);
  return {
    promptTokenIds: response.prompt_token_ids,
    completionTokenIds: choice.token_ids,
    ...(completionLogprobs === undefined ? {} : { completionLogprobs }),
  };
}

/** The tokens of a streamed completion, put together from its chunks (as sent by the upstream), or why there are none. */
export function tokensOfChunks(chunks: readonly unknown[]): CallTokens | { missing: string } {
  let promptTokenIds: number[] | undefined;
  const completionTokenIds: number[] = [];
  const completionLogprobs: number[] = [];
  let isLogprobsWhole = true;
  let hasTokens = false;
  for (const chunk of chunks) {
    if (!isObject(chunk)) continue;
    if (isTokenArray(chunk.prompt_token_ids)) promptTokenIds ??= chunk.prompt_token_ids;
    const choice = firstChoice(chunk);
    if (choice === undefined) continue;
    if (isTokenArray(choice.token_ids)) {
      hasTokens = true;
      completionTokenIds.push(...choice.token_ids);
      const values = logprobsOf(choice.logprobs);
      if (values === undefined || values.length !== choice.token_ids.length) isLogprobsWhole = false;
      else completionLogprobs.push(...values);
    }
  }
  if (promptTokenIds === undefined || !hasTokens)
    return {
      missing: 'the upstream streamed no prompt_token_ids or token_ids (is it vLLM 0.10.2 or later?)',
    };
  return {
    promptTokenIds,
    completionTokenIds,
    ...(isLogprobsWhole ? { completionLogprobs } : {}),
  };
}

/** A call whose prompt does not continue any recent call's tokens, as recorded on it. */
export interface TokenDrift {
  /** The index of the call it came closest to continuing (of the rollout's recent calls with tokens). */
  previousIndex: number;
  /** How many ids the prompt should have started with: that call's prompt and completion. */
  expectedPrefixTokens: number;
  /** How many of them it did start with; where the re-tokenised history first differs. */
  matchingTokens: number;
}

/** How many ids of `expected` the prompt starts with. */
function matchingPrefix(expected: readonly number[], prompt: readonly number[]): number {
  let matching = 0;
  const limit = Math.min(expected.length, prompt.length);
  while (matching < limit && expected[matching] === prompt[matching]) matching += 1;
  return matching;
}

/**
 * Compares a call's prompt ids with recent calls' prompt and completion ids: undefined when it
 * starts with those of one of them (it continues that call with the policy's own tokens), else
 * where it departs from the one it came closest to. Several recent calls are looked at, not only
 * the last, because agents interleave side calls (a title, a summary, a sub-agent) with their
 * main conversation; a call that starts a new conversation is told apart by its small
 * `matchingTokens` (it departs at once, not deep into a history).
 */
export function findDrift(
  recent: ReadonlyArray<{ index: number; tokens: CallTokens }>,
  current: CallTokens,
): TokenDrift | undefined {
  let closest: TokenDrift | undefined;
  for (const previous of recent) {
    const expected = [...previous.tokens.promptTokenIds, ...previous.tokens.completionTokenIds];
    const matching = matchingPrefix(expected, current.promptTokenIds);
    if (matching === expected.length) return undefined;
    // On a tie the latest call wins: the one an agent most likely continued.
    if (closest === undefined || matching >= closest.matchingTokens)
      closest = {
        previousIndex: previous.index,
        expectedPrefixTokens: expected.length,
        matchingTokens: matching,
      };
  }
  return closest;
}
