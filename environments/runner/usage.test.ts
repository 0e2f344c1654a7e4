import { describe, expect, it } from 'vitest';
import { baselineStats, configuredPrices, sumUsage, usageMetrics, usageOfRecord } from './usage.ts';

const chat = {
  api: 'chat.completions',
  usage: { prompt_tokens: 100, completion_tokens: 20, prompt_tokens_details: { cached_tokens: 64 } },
};
const responses = {
  api: 'responses',
  usage: {
    input_tokens: 50,
    output_tokens: 5,
    input_tokens_details: { cached_tokens: 10 },
    total_tokens: 55,
  },
};
const anthropic = {
  api: 'messages',
  usage: {
    input_tokens: 7,
    output_tokens: 30,
    cache_read_input_tokens: 1000,
    cache_creation_input_tokens: 200,
  },
};
/** A Messages call translated to Chat Completions: its usage is the upstream's, in Chat's shape. */
const translated = {
  api: 'messages',
  upstreamApi: 'chat.completions',
  usage: { prompt_tokens: 9, completion_tokens: 1 },
};
const failed = { api: 'chat.completions', status: 'error', error: { code: 'MODEL_UPSTREAM_ERROR' } };

describe('token usage from the gateway records', () => {
  it('reads each API shape, with every prompt token as input and cache reads as cached', () => {
    expect(usageOfRecord(chat)).toEqual({ input_tokens: 100, output_tokens: 20, cached_tokens: 64 });
    expect(usageOfRecord(responses)).toEqual({ input_tokens: 50, output_tokens: 5, cached_tokens: 10 });
    // Anthropic's input_tokens leaves out cache reads and writes: they are added back.
    expect(usageOfRecord(anthropic)).toEqual({ input_tokens: 1207, output_tokens: 30, cached_tokens: 1000 });
    expect(usageOfRecord(translated)).toEqual({ input_tokens: 9, output_tokens: 1, cached_tokens: 0 });
    expect(usageOfRecord(failed)).toBeNull();
    expect(usageOfRecord({ usage: { prompt_tokens: -3, completion_tokens: 'x' } })).toEqual({
      input_tokens: 0,
      output_tokens: 0,
      cached_tokens: 0,
    });
  });

  it('sums a rollout, counting calls without usage apart', () => {
    expect(sumUsage([chat, responses, anthropic, translated, failed])).toEqual({
      input_tokens: 1366,
      output_tokens: 56,
      cached_tokens: 1074,
      calls: 5,
      calls_without_usage: 1,
    });
    expect(sumUsage([])).toEqual({
      input_tokens: 0,
      output_tokens: 0,
      cached_tokens: 0,
      calls: 0,
      calls_without_usage: 0,
    });
  });

  it('prices the tokens when both prices are set, and gives no cost otherwise (never a made-up 0)', () => {
    const prices = { inputPerMillion: 3, outputPerMillion: 15 };
    // Cached tokens are input tokens, at the input price; a failed call costs nothing.
    expect(sumUsage([chat, failed], prices).cost_usd).toBeCloseTo((100 * 3 + 20 * 15) / 1e6, 15);
    expect(sumUsage([chat, anthropic], prices).cost_usd).toBeCloseTo((1307 * 3 + 50 * 15) / 1e6, 15);
    expect(sumUsage([chat, failed])).not.toHaveProperty('cost_usd');
    // Calls that report no usage: the cost is unknown, not 0.
    expect(sumUsage([failed, failed], prices)).not.toHaveProperty('cost_usd');
    expect(sumUsage([], prices)).not.toHaveProperty('cost_usd');
    // A free model, priced 0 on purpose, costs 0.
    expect(sumUsage([chat], { inputPerMillion: 0, outputPerMillion: 0 }).cost_usd).toBe(0);
  });

  it("takes the prices from environment.json's limits, the run's over them, only when both are set", () => {
    expect(configuredPrices({ pricePerMillionInputTokens: 1, pricePerMillionOutputTokens: 2 })).toEqual({
      inputPerMillion: 1,
      outputPerMillion: 2,
    });
    expect(
      configuredPrices(
        { pricePerMillionInputTokens: 1, pricePerMillionOutputTokens: 2, maxSteps: 5 },
        { pricePerMillionOutputTokens: 4 },
      ),
    ).toEqual({ inputPerMillion: 1, outputPerMillion: 4 });
    expect(configuredPrices({ pricePerMillionInputTokens: 1 }, undefined)).toBeUndefined();
    expect(configuredPrices({ maxSteps: 5 })).toBeUndefined();
    expect(
      configuredPrices({ pricePerMillionInputTokens: -1, pricePerMillionOutputTokens: 2 }),
    ).toBeUndefined();
  });

  it('aggregates NeMo Gym baseline stats over the rollouts that have usage', () => {
    const metrics = usageMetrics([
      { usage: sumUsage([chat]) },
      { usage: sumUsage([chat, chat, responses]) },
      { reward: 1 },
    ]);
    expect(metrics).toMatchObject({
      'mean/input_tokens': 175,
      'max/input_tokens': 250,
      'min/input_tokens': 100,
      'mean/output_tokens': 32.5,
      'mean/cached_tokens': 101,
      'mean/model_calls': 2,
      // The sample std (n - 1), as NeMo Gym's pandas computes it: [1, 3] -> sqrt(2).
      'std/model_calls': Math.SQRT2,
    });
    expect(metrics['mean/cost_usd']).toBeUndefined();
    // The cost's stats are over the rollouts that have one: one without prices is not a 0.
    const prices = { inputPerMillion: 1, outputPerMillion: 1 };
    expect(
      usageMetrics([
        { usage: sumUsage([chat], prices) },
        { usage: sumUsage([chat, chat], prices) },
        { usage: sumUsage([chat]) },
      ]),
    ).toMatchObject({
      'mean/cost_usd': (120 + 240) / 2 / 1e6,
      'max/cost_usd': 240 / 1e6,
      'min/cost_usd': 120 / 1e6,
    });
    expect(usageMetrics([{ reward: 0 }])).toEqual({});
    expect(baselineStats('x', [1, 2, 3, 10])).toEqual({
      'mean/x': 4,
      'max/x': 10,
      'min/x': 1,
      'median/x': 2.5,
      'std/x': Math.sqrt((9 + 4 + 1 + 36) / 3),
    });
  });
});
