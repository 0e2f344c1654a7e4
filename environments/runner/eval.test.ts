import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { silentLogger } from '../../core/logger.ts';
import { HarnessRegistry } from '../../harnesses/registry.ts';
import { ModelScriptSchema } from '../../harnesses/scripted-model/script.ts';
import { type ScriptedModelServer, startScriptedModelServer } from '../../harnesses/scripted-model/server.ts';
import type { ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../../test/daemon-harness.ts';
import { MemoryProvider } from '../../test/fixtures/memory-provider.ts';
import { loadEnvironment, readRows } from '../environment.ts';
import { extractAnswer, verifyExact } from '../verifiers/exact.ts';
import { runEval } from './eval.ts';
import { readJsonl } from './files.ts';
import { gymFields } from './rollout-line.ts';

describe('exact verifier', () => {
  it('extracts the chosen letter and matches it; a whole string otherwise', async () => {
    const colon = { gradingMode: 'lenient_answer_colon' as const };
    expect(await extractAnswer('Let me think. Answer: c', colon)).toBe('C');
    expect(await extractAnswer('no idea', colon)).toBeNull();
    expect(await verifyExact('Answer: B', 'B', colon)).toMatchObject({
      reward: 1,
      details: { extracted_answer: 'B' },
    });
    expect(await verifyExact('\\boxed{B}', 'b')).toMatchObject({
      reward: 1,
      details: { expected_answer: 'B' },
    });
    expect((await verifyExact(null, 'B')).reward).toBe(0);
    expect((await verifyExact(' 42 ', '42')).reward).toBe(1);
    expect((await verifyExact('42', '43')).reward).toBe(0);
  });
});

describe('gym eval on mcqa (no sandbox)', () => {
  let model: ScriptedModelServer;
  let daemon: TestDaemon;
  let directory: string;

  beforeAll(async () => {
    model = await startScriptedModelServer(
      ModelScriptSchema.parse({
        conversations: [
          { match: 'lists the files', replies: [{ content: 'Answer: B' }] },
          { replies: [{ content: 'Answer: A' }] },
        ],
      }),
    );
    daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }], gateway: { upstream: { baseUrl: model.baseUrl }, maxRetries: 0 } },
      {
        factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
        listen: true,
      },
    );
    directory = await mkdtemp(join(tmpdir(), 'gym-mcqa-'));
  });

  afterAll(async () => {
    await daemon.cleanup();
    await model.close();
    await rm(directory, { recursive: true, force: true });
  });

  it('scores the oracle 1, a no-op 0, and a model by exact match, with pass@k over repeats', async () => {
    const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
    const environment = await loadEnvironment('mcqa');
    const rows = await readRows(environment.dataPath);
    const run = async (harnessName: string, numRepeats = 1, limits?: Record<string, number>) => {
      const output = join(directory, `${harnessName}${limits === undefined ? '' : '-priced'}.jsonl`);
      const summary = await runEval({
        client,
        environment,
        rows,
        harness: await new HarnessRegistry().create(harnessName),
        harnessName,
        modelName: 'm',
        numRepeats,
        concurrency: 3,
        output,
        resume: false,
        maxInfraAttempts: 1,
        ...(limits === undefined ? {} : { limits }),
        logger: silentLogger,
      });
      return { summary, rollouts: await readJsonl(output) };
    };
    const oracle = await run('oracle');
    expect(oracle.summary.metrics['mean/reward']).toBe(1);
    // No model, no tokens to count: no usage and no token metrics (never a made-up 0).
    expect(gymFields(oracle.rollouts[0]!).usage).toBeUndefined();
    expect(oracle.summary.metrics['mean/input_tokens']).toBeUndefined();
    expect((await run('noop')).summary.metrics['mean/reward']).toBe(0);
    const { summary, rollouts } = await run('single-turn', 2);
    // q1 answers B (right); every other question gets A, right for q4 and q10 only.
    expect(summary.rollouts).toBe(20);
    expect(summary.metrics['pass@1/reward']).toBeCloseTo(30, 10);
    expect(summary.metrics['pass@2/reward']).toBeCloseTo(30, 10);
    // NeMo Gym's mcqa fields at the top level, the answer in a Responses object.
    expect(rollouts[0]).toMatchObject({
      id: 'q1',
      reward: 1,
      expected_answer: 'B',
      extracted_answer: 'B',
      response: {
        object: 'response',
        output: [
          { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Answer: B' }] },
        ],
        usage: { input_tokens: 10, output_tokens: 3, total_tokens: 13 },
      },
      _gym: { verifier: { expected_answer: 'B', extracted_answer: 'B' } },
    });
    expect((gymFields(rollouts[0]!).model_calls as unknown[]).length).toBe(1);
    // Tokens from the gateway's record (the scripted model reports 10 prompt tokens, 3 for "Answer: B").
    expect(gymFields(rollouts[0]!).usage).toEqual({
      input_tokens: 10,
      output_tokens: 3,
      cached_tokens: 0,
      calls: 1,
      calls_without_usage: 0,
    });
    expect(summary.metrics).toMatchObject({
      'mean/input_tokens': 10,
      'mean/output_tokens': 3,
      'mean/model_calls': 1,
    });
    // mcqa sets no prices: no cost, rather than a cost of 0.
    expect(summary.metrics['mean/cost_usd']).toBeUndefined();
    // With prices (here the run's; environment.json's `limits` the same), each line has its cost.
    const priced = await run('single-turn', 1, {
      pricePerMillionInputTokens: 2,
      pricePerMillionOutputTokens: 10,
    });
    const costs = priced.rollouts.map((row) => (gymFields(row).usage as { cost_usd: number }).cost_usd);
    expect(costs[0]).toBeCloseTo((10 * 2 + 3 * 10) / 1e6, 15);
    expect(priced.summary.metrics['mean/cost_usd']).toBeCloseTo(
      costs.reduce((sum, cost) => sum + cost, 0) / costs.length,
      15,
    );
  });
});
