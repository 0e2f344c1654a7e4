import OpenAI from 'openai';
import type { HarnessLimits, ModelEndpoint } from './harness.ts';

/**
 * The client harnesses talk to the gateway with. The gateway already retries the upstream with
 * backoff, so one retry here only covers a dropped connection to the daemon.
 */
export function createModelClient(endpoint: ModelEndpoint, remainingMs: number): OpenAI {
  return new OpenAI({
    baseURL: endpoint.baseUrl,
    apiKey: endpoint.apiKey,
    maxRetries: 1,
    timeout: Math.max(1000, remainingMs),
  });
}

/** Tracks spend from usage and the configured prices. */
export class CostMeter {
  costUsd = 0;
  readonly #limits: HarnessLimits;

  constructor(limits: HarnessLimits) {
    this.#limits = limits;
  }

  add(usage: { prompt_tokens?: number; completion_tokens?: number } | undefined): {
    inputTokens: number;
    outputTokens: number;
  } {
    const inputTokens = usage?.prompt_tokens ?? 0;
    const outputTokens = usage?.completion_tokens ?? 0;
    this.costUsd +=
      (inputTokens * this.#limits.pricePerMillionInputTokens +
        outputTokens * this.#limits.pricePerMillionOutputTokens) /
      1e6;
    return { inputTokens, outputTokens };
  }

  get isOverLimit(): boolean {
    return this.#limits.maxCostUsd > 0 && this.costUsd >= this.#limits.maxCostUsd;
  }
}

export function describeModelError(error: unknown): string {
  if (error instanceof OpenAI.APIError)
    return `model call failed (${error.status ?? 'no status'}): ${error.message}`;
  return `model call failed: ${(error as Error).message ?? String(error)}`;
}
