import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../core/logger.ts';
import { DEFAULT_LIMITS } from './harness.ts';
import { isInfrastructureFailure } from './model-loop.ts';
import { createSingleTurnHarness } from './single-turn/single-turn.ts';

/** An error as the OpenAI client builds it from an answer of the gateway. */
function answered(status: number, body?: Record<string, unknown>) {
  return OpenAI.APIError.generate(
    status,
    body === undefined ? undefined : { error: body },
    'failed',
    new Headers(),
  );
}

const relayed = (upstreamStatus: number) =>
  answered(502, { code: 'MODEL_UPSTREAM_ERROR', message: 'x', details: { upstreamStatus } });

describe('whose fault a failed model call is', () => {
  it.each([400, 413, 422])(
    'the upstream refusing the request (%i, relayed as 502) is the agent',
    (status) => {
      expect(isInfrastructureFailure(relayed(status))).toBe(false);
    },
  );

  it.each([500, 503, 401, 404, 408, 429])('the upstream failing (%i, relayed as 502) is infra', (status) => {
    expect(isInfrastructureFailure(relayed(status))).toBe(true);
  });

  it('a 502 that names no upstream status, a connection error and a 404 are infra; a 400 is the agent', () => {
    expect(isInfrastructureFailure(answered(502, { code: 'MODEL_UPSTREAM_ERROR', message: 'x' }))).toBe(true);
    expect(isInfrastructureFailure(new OpenAI.APIConnectionError({ message: 'refused' }))).toBe(true);
    expect(isInfrastructureFailure(answered(404))).toBe(true);
    expect(isInfrastructureFailure(answered(400))).toBe(false);
  });
});

describe('single-turn', () => {
  it('ends as infra, not agent_error (reward 0), when the gateway does not answer', async () => {
    const result = await createSingleTurnHarness().run({
      sandbox: undefined as never,
      task: { id: 'q', instruction: 'A or B?', workdir: '/' },
      model: { baseUrl: 'http://127.0.0.1:9/v1', basePath: '/v1', apiKey: 'k', model: 'm' },
      limits: { ...DEFAULT_LIMITS, wallTimeMs: 5_000 },
      logger: silentLogger,
    });
    expect(result.outcome).toBe('infra_error');
  });
});
