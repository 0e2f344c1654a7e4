/**
 * NeMo Gym's files, both ways: its published rows load as its agents and resources servers read
 * them, our rollout lines have its keys and types, and its recorded rollouts reverify to their
 * rewards. The fixtures (`fixtures/nemo-gym/`) are ours, shaped field by field as NeMo Gym
 * publishes `resources_servers/mcqa/data/example*.jsonl`, `resources_servers/swebench/data/
 * example.jsonl` and `responses_api_agents/swe_agents/data/example.jsonl`.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../../cli/program.ts';
import { GymClient } from '../../client/client.ts';
import { GymError } from '../../core/errors.ts';
import { silentLogger } from '../../core/logger.ts';
import type { SandboxSpec } from '../../core/schemas/sandbox.ts';
import { HarnessRegistry } from '../../harnesses/registry.ts';
import { ModelScriptSchema } from '../../harnesses/scripted-model/script.ts';
import { type ScriptedModelServer, startScriptedModelServer } from '../../harnesses/scripted-model/server.ts';
import type { CreateOptions, ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../../test/daemon-harness.ts';
import { MemoryProvider } from '../../test/fixtures/memory-provider.ts';
import { loadEnvironment, readRows } from '../environment.ts';
import { parseRow } from '../kinds/kind.ts';
import { sweBenchImage } from '../kinds/swebench/row.ts';
import { runEval } from './eval.ts';
import { readJsonl } from './files.ts';
import {
  computeRewardMetrics,
  fieldStats,
  highestKMetrics,
  passMajorityMetrics,
  taskProfile,
} from './metrics.ts';
import { joinInputs, reverifyRollout } from './reverify.ts';
import { GYM_FIELDS } from './rollout-line.ts';

const FIXTURES = join(import.meta.dirname, 'fixtures/nemo-gym');
const fixture = (name: string) => join(FIXTURES, name);

/** A JSON value's type as a shape check compares it. */
function jsonType(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  return typeof value;
}

/**
 * Where `ours` differs in shape from NeMo Gym's `theirs`: a key it lacks, or another type. A null
 * on either side is taken (NeMo Gym writes null for every request field left unset).
 */
function shapeDifferences(
  theirs: Record<string, unknown>,
  ours: Record<string, unknown>,
  path = '',
): string[] {
  return Object.entries(theirs).flatMap(([key, value]) => {
    const place = `${path}${key}`;
    if (!(key in ours)) return [`${place}: missing`];
    const [want, got] = [jsonType(value), jsonType(ours[key])];
    if (want === 'null' || got === 'null') return [];
    if (want !== got) return [`${place}: ${got}, NeMo Gym's is ${want}`];
    return [];
  });
}

describe("NeMo Gym's published rows load as NeMo Gym loads them", () => {
  it('reads swebench rows with responses_create_params, and swe_agents rows whose task is under metadata', async () => {
    const environment = await loadEnvironment('swebench');
    const kind = environment.implementation;
    const rows = [
      ...(await readRows(fixture('swebench-example.jsonl'))),
      ...(await readRows(fixture('swe-agents-example.jsonl'))),
    ];
    expect(rows).toHaveLength(3);
    for (const [position, row] of rows.entries()) {
      // Before: "Unmergable intersection. Error path: ["FAIL_TO_PASS"]", and an empty input refused.
      const parsed = parseRow(kind, row, position);
      expect(parsed.FAIL_TO_PASS).toEqual(['tests/test_widgets.py::test_widget_count']);
      kind.checkRow?.(row, environment);
      expect(kind.image(row, environment)).toBe(
        sweBenchImage({
          instance_id: 'pallets__flask-90001',
          repo: 'pallets/flask',
          version: '2.3',
          base_commit: '0123456789abcdef0123456789abcdef01234567',
        }),
      );
      const task = kind.task(row, environment, { usesGoldPatch: true });
      expect(task.instruction).toMatch(/^flask has no widget_count helper/);
      expect(task.goldPatch).toMatch(/^diff --git a\/src\/flask\/helpers.py/);
    }
  });

  it("loads NeMo Gym's mcqa rows and still refuses an empty prompt where the kind has no other", async () => {
    const exact = (await loadEnvironment('mcqa')).implementation;
    for (const [position, row] of (await readRows(fixture('mcqa-example.jsonl'))).entries())
      expect(parseRow(exact, row, position)).toBeTruthy();
    expect(() =>
      parseRow(exact, { expected_answer: 'A', responses_create_params: { input: [] } }, 0),
    ).toThrow(/row 1 is not a valid exact task: instruction: needs a question/);
  });
});

/** A provider whose engine has none of SWE-bench's images (none is ever pulled here). */
class WithoutSweBenchImages extends MemoryProvider {
  override async create(spec: SandboxSpec, options?: CreateOptions) {
    if (spec.image.startsWith('sweb.eval.'))
      throw new GymError('IMAGE_NOT_FOUND', `image "${spec.image}" does not exist`);
    return super.create(spec, options);
  }
}

describe('NeMo Gym rows through gym eval (scripted model)', () => {
  let model: ScriptedModelServer;
  let daemon: TestDaemon;
  let directory: string;
  let client: GymClient;
  /** Each right answer, by the start of its question once marked "RIGHT". */
  const correct = {
    C: 'RIGHT Which planet',
    E: 'RIGHT Which gas',
    B: 'RIGHT Which metal',
    F: 'RIGHT How many',
  };

  beforeAll(async () => {
    // Right answers for questions that say "right", wrong ones (always A; no question's answer) otherwise.
    model = await startScriptedModelServer(
      ModelScriptSchema.parse({
        conversations: [
          ...Object.entries(correct).map(([letter, match]) => ({
            match,
            replies: [{ content: `Reasoning first.\n\n\\boxed{${letter}}` }],
          })),
          { replies: [{ content: 'Surely the first one.\n\n\\boxed{A}' }] },
        ],
      }),
    );
    daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }], gateway: { upstream: { baseUrl: model.baseUrl }, maxRetries: 0 } },
      {
        factories: {
          memory: (_options: unknown, context: ProviderContext) => new WithoutSweBenchImages(context),
        },
        listen: true,
      },
    );
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
    directory = await mkdtemp(join(tmpdir(), 'gym-nemo-files-'));
  });

  afterAll(async () => {
    await daemon.cleanup();
    await model.close();
    await rm(directory, { recursive: true, force: true });
  });

  const run = async (environmentName: string, rows: Array<Record<string, unknown>>, output: string) =>
    runEval({
      client,
      environment: await loadEnvironment(environmentName),
      rows,
      harness: await new HarnessRegistry().create('single-turn'),
      harnessName: 'single-turn',
      modelName: 'm',
      numRepeats: 1,
      concurrency: 2,
      output: join(directory, output),
      resume: false,
      maxInfraAttempts: 1,
      logger: silentLogger,
    });

  /** The fixture's rows with "RIGHT" put before each question, so the scripted model answers it right. */
  const mcqaRows = async (right: boolean) =>
    (await readRows(fixture('mcqa-example.jsonl'))).map((row) => {
      const params = row.responses_create_params as { input: Array<{ role: string; content: string }> };
      return {
        ...row,
        responses_create_params: {
          input: params.input.map((message) => ({
            ...message,
            content: message.content.replace('nothing else. ', `nothing else. ${right ? 'RIGHT ' : ''}`),
          })),
        },
      };
    });

  it('scores mcqa rows 1 with a correct model and 0 with a wrong one, in lines shaped as NeMo Gym writes them', async () => {
    const right = await run('mcqa', await mcqaRows(true), 'right.jsonl');
    const wrong = await run('mcqa', await mcqaRows(false), 'wrong.jsonl');
    expect(right.metrics['mean/reward']).toBe(1);
    expect(wrong.metrics['mean/reward']).toBe(0);
    const lines = await readJsonl(join(directory, 'right.jsonl'));
    expect(lines.map((line) => [line.reward, line.extracted_answer])).toEqual([
      [1, 'C'],
      [1, 'E'],
      [1, 'B'],
      [1, 'F'],
    ]);

    // Every key of NeMo Gym's line, and of its response, with NeMo Gym's type.
    const [theirs] = await readJsonl(fixture('mcqa-example-rollouts.jsonl'));
    for (const line of lines) {
      expect(shapeDifferences(theirs!, line)).toEqual([]);
      const response = line.response as Record<string, unknown>;
      expect(shapeDifferences(theirs!.response as Record<string, unknown>, response)).toEqual([]);
      expect(response).toMatchObject({ object: 'response', status: 'completed', model: expect.any(String) });
      expect((response.usage as Record<string, unknown>).total_tokens).toEqual(expect.any(Number));
      // NeMo Gym's stamped keys, and ours in one object only.
      expect(line).toMatchObject({
        _ng_task_index: expect.any(Number),
        _ng_rollout_index: 0,
        agent_ref: { name: 'single-turn' },
        [GYM_FIELDS]: { outcome: 'reward' },
      });
      for (const key of ['outcome', 'verifier', 'trajectory', 'model_calls', 'usage', 'timings', 'sandbox'])
        expect(line).not.toHaveProperty(key);
    }

    // The aggregate metrics with NeMo Gym's per-task fields.
    const [metrics] = JSON.parse(await readFile(join(directory, 'wrong_aggregate_metrics.json'), 'utf8'));
    expect(metrics.group_level_metrics[0]).toMatchObject({
      _ng_task_index: 0,
      'mean/reward': 0,
      'std/reward': 0,
      num_rollouts: 1,
      expected_num_rollouts: 1,
      missing_num_rollouts: 0,
      reward_profile_completion_pct: 100,
      rollout_infos: [{ rollout_id: '0:0', _ng_task_index: 0, _ng_rollout_index: 0, reward: 0 }],
    });
    expect(metrics.agent_metrics).toMatchObject({
      'mean/total_tokens': expect.any(Number),
      'pass@1/accuracy': 0,
      'majority@1/accuracy': 0,
      'pass@1/no_answer': 0,
    });
    // mcqa's headline metrics, as its NeMo Gym server picks them.
    expect(Object.keys(metrics.key_metrics).sort()).toEqual([
      'majority@1/accuracy',
      'mean/reward',
      'pass@1/accuracy',
      'pass@1/no_answer',
      'pass@1[avg-of-1]/accuracy',
      'pass@1[avg-of-1]/no_answer',
    ]);
  });

  it("gym eval reverify and profile read NeMo Gym's rollout files", async () => {
    const input = join(directory, 'nemo.jsonl');
    await writeFile(input, await readFile(fixture('mcqa-example-rollouts.jsonl')));
    const output = join(directory, 'nemo-reverified.jsonl');
    let said = '';
    const stdout = new PassThrough().on('data', (chunk: Buffer) => {
      said += chunk.toString();
    });
    const quiet = { stdout, stderr: new PassThrough(), env: {} };
    const reverify = ['eval', 'reverify', '--input', input, '--output', output, '--env', 'mcqa'];
    expect(await runCli([...reverify, '--state-dir', daemon.stateDir], quiet)).toBe(0);
    expect(said).toContain('5 rollouts reverified, 0 rewards changed; mean/reward 0.600');
    expect((await readJsonl(output)).map((line) => line.reward)).toEqual([1, 0, 1, 0, 1]);

    // A run of ours, profiled with its materialized inputs: NeMo Gym's line shape.
    const rows = (await mcqaRows(true)).slice(0, 2);
    await run('mcqa', rows, 'profiled.jsonl');
    expect(await runCli(['eval', 'profile', '--input', join(directory, 'profiled.jsonl')], quiet)).toBe(0);
    const profile = await readJsonl(join(directory, 'profiled_reward_profiling.jsonl'));
    expect(profile).toHaveLength(2);
    expect(profile[1]).toMatchObject({
      _ng_task_index: 1,
      'mean/reward': 1,
      'std/reward': 0,
      'mean/total_tokens': expect.any(Number),
      sample: {
        uuid: (rows[1] as Record<string, unknown>).uuid,
        agent_ref: { name: 'single-turn' },
        expected_answer: 'E',
      },
      num_rollouts: 1,
      expected_num_rollouts: 1,
      reward_profile_completion_pct: 100,
      rollout_infos: [{ rollout_id: '1:0', reward: 1 }],
    });
    expect(profile[1]!.sample).not.toHaveProperty('_ng_task_index');
    expect(said).not.toContain('undefined');
  });

  it('takes swebench rows as NeMo Gym publishes them to the image stage: IMAGE_NOT_FOUND naming the image', async () => {
    for (const file of ['swebench-example.jsonl', 'swe-agents-example.jsonl']) {
      const rows = await readRows(fixture(file));
      const failure = await run('swebench', rows, `swebench-${file}`).catch((error: unknown) => error);
      expect(failure).toMatchObject({ code: 'IMAGE_NOT_FOUND' });
      expect(String((failure as Error).message)).toContain(
        `image "${sweBenchImage({ instance_id: 'pallets__flask-90001', repo: 'pallets/flask', version: '2.3', base_commit: '0123456789abcdef0123456789abcdef01234567' })}" for pallets__flask-90001 is not on the engine`,
      );
    }
  });
});

describe("NeMo Gym's recorded rollouts", () => {
  it('reverify to the rewards NeMo Gym recorded, reading the answer from the Responses output', async () => {
    const environment = await loadEnvironment('mcqa');
    const lines = await readJsonl(fixture('mcqa-example-rollouts.jsonl'));
    // These lines keep no options: the prompt's (A-F here) are read, so \boxed{E} is an answer.
    const again = await Promise.all(
      lines.map((line) => reverifyRollout(undefined as unknown as GymClient, environment, line)),
    );
    expect(again.map((line) => line.reward)).toEqual(lines.map((line) => line.reward));
    expect(again.map((line) => line.extracted_answer)).toEqual(lines.map((line) => line.extracted_answer));
    expect(again.every((line) => (line[GYM_FIELDS] as { reverified?: boolean }).reverified === true)).toBe(
      true,
    );

    // Joined with the rows they were run from (by prompt: these lines carry no indices).
    const inputs = joinInputs(lines, await readRows(fixture('mcqa-example.jsonl')));
    expect(inputs.map((input) => input?.uuid)).toEqual([
      '00000000-0000-4000-8000-000000000000',
      '00000000-0000-4000-8000-000000000001',
      '00000000-0000-4000-8000-000000000002',
      '00000000-0000-4000-8000-000000000003',
      '00000000-0000-4000-8000-000000000001',
    ]);
    const joined = await Promise.all(
      lines.map((line, index) =>
        reverifyRollout(undefined as unknown as GymClient, environment, line, inputs[index]),
      ),
    );
    expect(joined.map((line) => line.reward)).toEqual([1, 0, 1, 0, 1]);
  });

  it("computes mcqa's metrics as NeMo Gym's mcqa server does: accuracy, majority vote, no-answer rate", () => {
    const line = (reward: number, extracted_answer: string | null) => ({ reward, extracted_answer });
    const tasks = [
      [line(1, 'A'), line(0, 'B'), line(1, 'A')],
      [line(0, null), line(0, 'C'), line(0, 'C')],
    ];
    const metrics = passMajorityMetrics(
      tasks,
      (row) => ({ accuracy: Number(row.reward) }),
      'extracted_answer',
    );
    // Task 0: 1 wrong of 3, pass@1 = 1 - C(1,1)/C(3,1) = 2/3; task 1: none right.
    expect(metrics['pass@1/accuracy']).toBeCloseTo(100 / 3, 10);
    expect(metrics['pass@2/accuracy']).toBeCloseTo(50, 10);
    // The most common (answer, score): (A, 1) in task 0, (C, 0) in task 1.
    expect(metrics['majority@3/accuracy']).toBe(50);
    expect(metrics['pass@1[avg-of-3]/no_answer']).toBeCloseTo(100 / 6, 10);
    // Run 0 scores 50, run 1 scores 0: their sample std, and that over sqrt(2).
    expect(metrics['pass@1[avg-of-2]/accuracy/std_dev_across_runs']).toBeCloseTo(50 / Math.SQRT2, 10);
    expect(metrics['pass@1[avg-of-2]/accuracy/std_err_across_runs']).toBeCloseTo(25, 10);
    expect(highestKMetrics(metrics, 'majority@{k}', ['accuracy'])).toEqual({ 'majority@3/accuracy': 50 });
  });

  it("computes NeMo Gym's metrics: the sample std, no pass@k for rewards that are not 0/1", () => {
    // Blackjack's published rollouts: one task, rewards -1, 1, -1, 1, 1.
    const lines = [-1, 1, -1, 1, 1].map((reward, index) => ({
      _ng_task_index: 0,
      _ng_rollout_index: index,
      reward,
      terminated: true,
      response: { usage: { input_tokens: 100 + index, output_tokens: 10, total_tokens: 110 + index } },
    }));
    const stats = fieldStats(lines);
    expect(stats['std/reward']).toBeCloseTo(1.0954451150103324, 12);
    expect(stats['mean/terminated']).toBe(1);
    expect(stats['median/total_tokens']).toBe(112);
    const rewardMetrics = computeRewardMetrics([lines.map((line) => line.reward)]);
    expect(Object.keys(rewardMetrics).filter((key) => key.startsWith('pass@'))).toEqual([]);
    expect(computeRewardMetrics([[1, 0, 1]])['pass@1/reward']).toBeCloseTo(200 / 3, 10);
    expect(taskProfile(0, lines.slice(0, 3), 5, { agent_ref: { name: 'a' } })).toMatchObject({
      num_rollouts: 3,
      expected_num_rollouts: 5,
      missing_num_rollouts: 2,
      reward_profile_completion_pct: 60,
      sample: { agent_ref: { name: 'a' } },
    });
  });
});
