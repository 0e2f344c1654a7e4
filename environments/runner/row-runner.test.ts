import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { isGymError } from '../../core/errors.ts';
import { silentLogger } from '../../core/logger.ts';
import { HarnessRegistry } from '../../harnesses/registry.ts';
import { ModelScriptSchema } from '../../harnesses/scripted-model/script.ts';
import { type ScriptedModelServer, startScriptedModelServer } from '../../harnesses/scripted-model/server.ts';
import type { ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../../test/daemon-harness.ts';
import { MemoryProvider } from '../../test/fixtures/memory-provider.ts';
import { loadEnvironment, readRows } from '../environment.ts';
import { runEval } from './eval.ts';
import { readJsonl } from './files.ts';
import { gymFields, responseOutputText } from './rollout-line.ts';
import { createRowRunner } from './row-runner.ts';

/** A line without what differs between two runs of one row (ids, times). */
function comparable(line: Record<string, unknown>): Record<string, unknown> {
  const { _ng_rollout_id: _id, response, _gym: ours, ...rest } = line;
  const { id: _responseId, created_at: _created, output, ...answer } = response as Record<string, unknown>;
  const { timings: _timings, model_calls: calls, trajectory, ...fields } = ours as Record<string, unknown>;
  return {
    ...rest,
    response: { ...answer, output: responseOutputText({ output }) },
    _gym: {
      ...fields,
      model_calls: (calls as unknown[]).length,
      trajectory: (trajectory as unknown[]).length,
    },
  };
}

describe('the row runner (gym serve)', () => {
  let model: ScriptedModelServer;
  let daemon: TestDaemon;
  let directory: string;

  beforeAll(async () => {
    model = await startScriptedModelServer(
      ModelScriptSchema.parse({ conversations: [{ replies: [{ content: 'Answer: B' }] }] }),
    );
    daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }], gateway: { upstream: { baseUrl: model.baseUrl }, maxRetries: 0 } },
      {
        factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
        listen: true,
      },
    );
    directory = await mkdtemp(join(tmpdir(), 'gym-row-runner-'));
  });

  afterAll(async () => {
    await daemon.cleanup();
    await model.close();
    await rm(directory, { recursive: true, force: true });
  });

  it('answers a row with the line gym eval run writes for it', async () => {
    const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
    const environment = await loadEnvironment('mcqa');
    const rows = (await readRows(environment.dataPath)).slice(0, 1);
    const shared = {
      client,
      environment,
      harness: await new HarnessRegistry().create('single-turn'),
      harnessName: 'single-turn',
      modelName: 'm',
      concurrency: 1,
      maxInfraAttempts: 1,
      logger: silentLogger,
    };
    const output = join(directory, 'run.jsonl');
    await runEval({ ...shared, rows, numRepeats: 1, output, resume: false });
    const [written] = await readJsonl(output);
    const runner = await createRowRunner({ ...shared, output: join(directory, 'serve.jsonl') });
    try {
      // As NeMo Gym sends it: a materialised row, its agent named by the trainer's config.
      const answer = await runner.run({
        ...rows[0],
        _ng_task_index: 0,
        _ng_rollout_index: 0,
        agent_ref: { name: 'single-turn' },
      });
      expect(answer).toMatchObject({ reward: 1, mask_sample: false, failure_reason: null });
      expect(gymFields(answer).outcome).toBe('reward');
      expect(comparable(answer)).toEqual(comparable(written!));
      // The row's own keys cannot stand in for the facts or our fields: they are written after it.
      const forged = await runner.run({
        ...rows[0],
        mask_sample: true,
        failure_reason: 'forged',
        _gym: { outcome: 'forged' },
      });
      expect(forged).toMatchObject({ mask_sample: false, failure_reason: null, _gym: { outcome: 'reward' } });
      const refused = await runner.run({ id: 'nothing' }).catch((error: unknown) => error);
      expect(isGymError(refused, 'VALIDATION_FAILED')).toBe(true);
    } finally {
      await runner.close();
    }
  });
});
