/**
 * Token accounting of a rollout, summed from the gateway's records of its model calls, and the
 * aggregate metrics over rollouts (`mean/input_tokens` and friends, as NeMo Gym names the
 * baseline stats of a numeric field). Pure: the runner passes the records it read.
 *
 * A record's `usage` is in the shape of the API the upstream was called with (`upstreamApi`,
 * else `api`), and the three count prompt tokens differently; here `input_tokens` is always
 * every prompt token and `cached_tokens` the part read from a cache:
 * - Chat Completions: `prompt_tokens` (cached ones included, `prompt_tokens_details.cached_tokens`),
 *   `completion_tokens`;
 * - Responses: `input_tokens` (cached included, `input_tokens_details.cached_tokens`), `output_tokens`;
 * - Anthropic Messages: `input_tokens` EXCLUDES cache reads and writes, so input =
 *   `input_tokens + cache_read_input_tokens + cache_creation_input_tokens`, cached = cache reads.
 *
 * The cost is priced from those counts with the run's `pricePerMillionInputTokens` and
 * `pricePerMillionOutputTokens` (cached tokens at the input price): only when both are set, and
 * only when some call reported usage; otherwise there is no cost at all, never a cost of 0.
 */
import { baselineStats } from './metrics.ts';
import { gymFields, type RolloutUsage } from './rollout-line.ts';

export type { RolloutUsage } from './rollout-line.ts';

export { baselineStats };

/** USD per million tokens. */
export interface TokenPrices {
  inputPerMillion: number;
  outputPerMillion: number;
}

/**
 * The prices among `limits` (environment.json's, then the run's: the later wins), or undefined
 * unless both are set to a finite, non-negative number (a default of 0 is no price).
 */
export function configuredPrices(
  ...sources: ReadonlyArray<Record<string, unknown> | undefined>
): TokenPrices | undefined {
  const merged = Object.assign({}, ...sources.filter((source) => source !== undefined)) as Record<
    string,
    unknown
  >;
  const price = (value: unknown) =>
    typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined;
  const input = price(merged.pricePerMillionInputTokens);
  const output = price(merged.pricePerMillionOutputTokens);
  return input === undefined || output === undefined
    ? undefined
    : { inputPerMillion: input, outputPerMillion: output };
}

type Json = Record<string, unknown>;

const count = (value: unknown): number =>
  typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : 0;

/** One record's tokens, or null when it carries no usage. */
export function usageOfRecord(
  record: unknown,
): { input_tokens: number; output_tokens: number; cached_tokens: number } | null {
  if (typeof record !== 'object' || record === null) return null;
  const { usage, api, upstreamApi } = record as Json;
  if (typeof usage !== 'object' || usage === null) return null;
  const fields = usage as Json;
  const shape = upstreamApi ?? api;
  if (shape === 'chat.completions' || (shape === undefined && 'prompt_tokens' in fields)) {
    return {
      input_tokens: count(fields.prompt_tokens),
      output_tokens: count(fields.completion_tokens),
      cached_tokens: count((fields.prompt_tokens_details as Json | undefined)?.cached_tokens),
    };
  }
  const isAnthropic =
    shape === 'messages' ||
    (shape === undefined && ('cache_read_input_tokens' in fields || 'cache_creation_input_tokens' in fields));
  if (isAnthropic) {
    const cacheRead = count(fields.cache_read_input_tokens);
    return {
      input_tokens: count(fields.input_tokens) + cacheRead + count(fields.cache_creation_input_tokens),
      output_tokens: count(fields.output_tokens),
      cached_tokens: cacheRead,
    };
  }
  return {
    input_tokens: count(fields.input_tokens),
    output_tokens: count(fields.output_tokens),
    cached_tokens: count((fields.input_tokens_details as Json | undefined)?.cached_tokens),
  };
}

/** The tokens of all of a rollout's model calls, and their cost when `prices` are known. */
export function sumUsage(records: readonly unknown[], prices?: TokenPrices): RolloutUsage {
  const total: RolloutUsage = {
    input_tokens: 0,
    output_tokens: 0,
    cached_tokens: 0,
    calls: records.length,
    calls_without_usage: 0,
  };
  for (const record of records) {
    const usage = usageOfRecord(record);
    if (usage === null) {
      total.calls_without_usage += 1;
      continue;
    }
    total.input_tokens += usage.input_tokens;
    total.output_tokens += usage.output_tokens;
    total.cached_tokens += usage.cached_tokens;
  }
  if (prices !== undefined && total.calls > total.calls_without_usage)
    total.cost_usd =
      (total.input_tokens * prices.inputPerMillion + total.output_tokens * prices.outputPerMillion) / 1e6;
  return total;
}

/** Token metrics over the rollouts that carry a `usage` (rollouts without one are not counted as zero). */
export function usageMetrics(rollouts: ReadonlyArray<Record<string, unknown>>): Record<string, number> {
  const usages = rollouts
    .map((row) => gymFields(row).usage)
    .filter((usage): usage is RolloutUsage => typeof usage === 'object' && usage !== null);
  return {
    ...baselineStats(
      'input_tokens',
      usages.map((usage) => usage.input_tokens),
    ),
    ...baselineStats(
      'output_tokens',
      usages.map((usage) => usage.output_tokens),
    ),
    ...baselineStats(
      'cached_tokens',
      usages.map((usage) => usage.cached_tokens),
    ),
    ...baselineStats(
      'model_calls',
      usages.map((usage) => usage.calls),
    ),
    // Over the rollouts with a cost only: one without prices or counts is no cost of 0.
    ...baselineStats(
      'cost_usd',
      usages.flatMap((usage) => (typeof usage.cost_usd === 'number' ? [usage.cost_usd] : [])),
    ),
  };
}
