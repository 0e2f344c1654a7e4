/**
 * Item 6 of issue 9: an infrastructure fault at any step a harness or verifier relies on is an
 * infra error (retried by the runner), never a reward. A fake daemon client plays one SWE task
 * whose fault-free reward is 1 and breaks exactly one step; each case must end as infra_error.
 * The other way round: what the agent's own files or code can do to a step (a test run that kills
 * itself, a repo git cannot diff) is graded, reward 0, never an infra error it could hide behind.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GymClient } from '../../client/client.ts';
import { GymError } from '../../core/errors.ts';
import { silentLogger } from '../../core/logger.ts';
import type { ExecRequestInput, ExecResult } from '../../core/schemas/exec.ts';
import { DEFAULT_LIMITS, type Harness } from '../../harnesses/harness.ts';
import { createMiniSweHarness } from '../../harnesses/mini-swe/mini-swe.ts';
import { ModelLoop } from '../../harnesses/model-loop.ts';
import { createOracleHarness } from '../../harnesses/oracle/oracle.ts';
import { ModelScriptSchema } from '../../harnesses/scripted-model/script.ts';
import { type ScriptedModelServer, startScriptedModelServer } from '../../harnesses/scripted-model/server.ts';
import { createToolCallingHarness } from '../../harnesses/tool-calling/tool-calling.ts';
import { execResult } from '../../test/fixtures/exec-result.ts';
import type { LoadedEnvironment } from '../environment.ts';
import { kind as sweKind } from '../kinds/swe/kind.ts';
import { runEval } from './eval.ts';
import { readJsonl } from './files.ts';
import { gymFields } from './rollout-line.ts';

const TEST_ID = 'tests/test_fix.py::test_fix';
const ROW = {
  instance_id: 'fake-1',
  base_commit: 'abc123',
  image: 'gym/fake:1',
  workdir: '/testbed',
  test_command: 'pytest -rA',
  problem_statement: 'fix it',
  patch: 'diff --git a/x b/x\n',
  test_patch: 'diff --git a/tests/test_fix.py b/tests/test_fix.py\n',
  FAIL_TO_PASS: [TEST_ID],
  PASS_TO_PASS: [],
};

type Fault =
  | 'sandbox_gone'
  | 'timeout'
  | 'killed'
  | 'oom'
  /** The command ran and exited 128 (git in a repo the agent broke). */
  | 'exit128'
  /** The command destroyed its sandbox (its memory took the keeper): `sandboxLost`, then no sandbox. */
  | 'lost'
  | 'PROVIDER_ERROR'
  | 'FILE_TOO_LARGE'
  | 'VALIDATION_FAILED'
  | 'DAEMON_UNAVAILABLE'
  | 'SANDBOX_NOT_FOUND';

/** Where a fault strikes: an exec whose command contains the text, or a client method by name. */
interface FaultPlan {
  at: string;
  fault: Fault;
  /** The thrown error's message, when it matters. */
  message?: string;
}

function result(status: ExecResult['status'], exitCode: number | null, stdout = ''): ExecResult {
  return execResult(status, exitCode, { stdout });
}

/** The daemon as the runner sees it, healthy except for the one planned fault. */
function fakeClient(plan: FaultPlan | null, url = 'http://127.0.0.1:9'): GymClient {
  let created = 0;
  const lost = new Set<string>();
  const strike = (at: string, id = ''): ExecResult | null => {
    // The daemon forgot a lost sandbox: whatever comes after finds none.
    if (lost.has(id)) throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
    if (plan === null || !at.includes(plan.at)) return null;
    if (plan.fault === 'lost') {
      lost.add(id);
      return {
        ...result('oom', null),
        sandboxLost: true,
        reason: 'the sandbox ran out of memory and its keeper was killed',
      };
    }
    if (plan.fault === 'sandbox_gone') return result('sandbox_gone', null);
    if (plan.fault === 'timeout') return result(plan.fault, null);
    if (plan.fault === 'killed' || plan.fault === 'oom') return result(plan.fault, 137);
    if (plan.fault === 'exit128') return result('ok', 128);
    throw new GymError(plan.fault, plan.message ?? `injected ${plan.fault} at ${plan.at}`);
  };
  const exec = async (id: string, request: ExecRequestInput): Promise<ExecResult> => {
    const command = request.command ?? request.argv?.join(' ') ?? '';
    const struck = strike(`exec:${command}`, id);
    if (struck !== null) return struck;
    if (command.includes('git diff')) return result('ok', 0, ROW.patch);
    // pytest exits 0 when every selected test passed.
    if (command === ROW.test_command) return result('ok', 0, `PASSED ${TEST_ID}\n`);
    return result('ok', 0);
  };
  const fake = {
    url,
    createSandbox: async () => {
      strike('createSandbox');
      created += 1;
      return { id: `sbx-${created}` };
    },
    destroySandbox: async () => {},
    exec,
    writeFile: async (id: string, path: string) => {
      strike(`writeFile:${path}`, id);
    },
    stopProcesses: async (id: string) => {
      const struck = strike('stopProcesses', id);
      // Its processes resisted the stop, and the provider killed the sandbox.
      if (struck?.sandboxLost === true) return { killed: 0, sandboxLost: true, reason: struck.reason };
      return { killed: 0 };
    },
    readFileBytes: async (id: string, path: string) => {
      strike(`readFile:${path}`, id);
      return Buffer.from('content\n');
    },
    readFile: async (_id: string, path: string) => {
      strike(`readFile:${path}`);
      return (async function* () {
        yield Buffer.from('content\n');
      })();
    },
    openRollout: async () => ({ rolloutId: 'r', key: 'k', basePath: '/v1' }),
    rolloutRecords: async () => [],
    closeRollout: async () => {},
  };
  return fake as unknown as GymClient;
}

const environment: LoadedEnvironment = {
  name: 'fake-swe',
  description: 'one fake SWE task',
  kind: 'swe',
  defaultHarness: 'oracle',
  data: 'data.jsonl',
  sandbox: {},
  limits: {},
  directory: tmpdir(),
  dataPath: join(tmpdir(), 'unused.jsonl'),
  options: {},
  implementation: sweKind,
};

let directory = '';
beforeAll(async () => {
  directory = await mkdtemp(join(tmpdir(), 'gym-faults-'));
});
afterAll(async () => {
  await rm(directory, { recursive: true, force: true });
});

async function runOnce(client: GymClient, harness: Harness, name: string) {
  const output = join(directory, `${name.replace(/[^a-z0-9]+/gi, '-')}.jsonl`);
  await runEval({
    client,
    environment,
    rows: [ROW],
    harness,
    harnessName: harness.name,
    modelName: 'm',
    numRepeats: 1,
    concurrency: 1,
    output,
    resume: false,
    // One attempt: what would be retried shows up as the failure, and nothing is written as a reward.
    maxInfraAttempts: 1,
    limits: { maxSteps: 3 },
    logger: silentLogger,
  });
  return {
    rollouts: await readJsonl(output),
    failures: await readJsonl(output.replace(/\.jsonl$/, '_failures.jsonl')),
  };
}

describe('an infrastructure fault is an infra error, never a reward', () => {
  it('gives the fault-free run reward 1 (the baseline every fault is measured against)', async () => {
    const { rollouts, failures } = await runOnce(fakeClient(null), createOracleHarness(), 'baseline');
    expect(rollouts.map((row) => [gymFields(row).outcome, row.reward])).toEqual([['reward', 1]]);
    expect(rollouts[0]).toMatchObject({ mask_sample: false, failure_reason: null });
    expect(failures).toEqual([]);
  });

  const cases: FaultPlan[] = [
    // The oracle's own step.
    { at: 'exec:cat > /tmp/gym-oracle.patch', fault: 'sandbox_gone' },
    { at: 'exec:cat > /tmp/gym-oracle.patch', fault: 'timeout' },
    { at: 'exec:cat > /tmp/gym-oracle.patch', fault: 'killed' },
    { at: 'exec:cat > /tmp/gym-oracle.patch', fault: 'PROVIDER_ERROR' },
    { at: 'exec:cat > /tmp/gym-oracle.patch', fault: 'DAEMON_UNAVAILABLE' },
    // Reading the agent's changes.
    { at: 'stopProcesses', fault: 'PROVIDER_ERROR' },
    { at: 'exec:git add -A', fault: 'sandbox_gone' },
    { at: 'exec:git add -A', fault: 'PROVIDER_ERROR' },
    // The verifier's sandbox and its steps.
    { at: 'createSandbox', fault: 'DAEMON_UNAVAILABLE' },
    { at: 'exec:cat > /tmp/gym-model.patch', fault: 'SANDBOX_NOT_FOUND' },
    { at: 'exec:cat > /tmp/gym-model.patch', fault: 'killed' },
    { at: 'exec:cat > /tmp/gym-model.patch', fault: 'sandbox_gone' },
    { at: 'exec:cat > /tmp/gym-model.patch', fault: 'PROVIDER_ERROR' },
    { at: 'exec:git apply --verbose -', fault: 'PROVIDER_ERROR' },
    { at: 'exec:git apply --verbose -', fault: 'sandbox_gone' },
    { at: 'exec:git apply --verbose -', fault: 'DAEMON_UNAVAILABLE' },
    { at: `exec:${ROW.test_command}`, fault: 'sandbox_gone' },
    { at: `exec:${ROW.test_command}`, fault: 'PROVIDER_ERROR' },
  ];
  it.each(cases)('oracle on swe: $fault at $at', async (plan) => {
    const { rollouts, failures } = await runOnce(
      fakeClient(plan),
      createOracleHarness(),
      `${plan.at}-${plan.fault}`,
    );
    expect(rollouts).toEqual([]);
    expect(failures.map((row) => gymFields(row).outcome)).toEqual(['infra_error']);
    // A trainer reading the line drops it: its 0 is no measurement of the agent.
    expect(failures[0]).toMatchObject({
      mask_sample: true,
      failure_reason: expect.stringMatching(/^infra_error: ./),
    });
  });
});

describe("what the agent's own files or code can cause is graded, never infra", () => {
  const cases: FaultPlan[] = [
    // The agent's repo and git, read with its processes stopped: only the agent makes git fail or hang.
    { at: 'exec:git add -A', fault: 'exit128' },
    { at: 'exec:git add -A', fault: 'timeout' },
    { at: 'exec:git add -A', fault: 'killed' },
    // The patch content can exhaust the apply's time or memory.
    { at: 'exec:cat > /tmp/gym-model.patch', fault: 'timeout' },
    { at: 'exec:cat > /tmp/gym-model.patch', fault: 'oom' },
    // Over the agent's files (and any git config its patch wrote).
    { at: 'exec:git apply --verbose -', fault: 'timeout' },
    { at: 'exec:git apply --verbose -', fault: 'killed' },
    // The tests run the agent's code, which can kill or exhaust its own test run.
    { at: `exec:${ROW.test_command}`, fault: 'killed' },
    { at: `exec:${ROW.test_command}`, fault: 'oom' },
  ];
  it.each(cases)('oracle on swe: $fault at $at is reward 0 with a reason', async (plan) => {
    const { rollouts, failures } = await runOnce(
      fakeClient(plan),
      createOracleHarness(),
      `graded-${plan.at}-${plan.fault}`,
    );
    expect(failures).toEqual([]);
    expect(rollouts.map((row) => [gymFields(row).outcome, row.reward])).toEqual([['reward', 0]]);
    expect(String((gymFields(rollouts[0]!).verifier as { reason?: unknown }).reason)).not.toBe('undefined');
    // A graded 0 is the agent's: a trainer keeps it.
    expect(rollouts[0]!.mask_sample).toBe(false);
  });
});

describe("a command that destroyed its own sandbox is the agent's failure, never infra", () => {
  // Issue 19: an agent (or the code its patch adds, run by the tests) that kills its sandbox
  // would otherwise have the rollout retried and dropped: a way out of any rollout it would fail.
  const cases: FaultPlan[] = [
    { at: 'exec:cat > /tmp/gym-oracle.patch', fault: 'lost' },
    { at: 'exec:git add -A', fault: 'lost' },
    { at: 'stopProcesses', fault: 'lost' },
    { at: `exec:${ROW.test_command}`, fault: 'lost' },
  ];
  it.each(cases)('oracle on swe: $fault at $at is agent_error, reward 0, not retried', async (plan) => {
    const { rollouts, failures } = await runOnce(fakeClient(plan), createOracleHarness(), `lost-${plan.at}`);
    expect(failures).toEqual([]);
    expect(rollouts.map((row) => [gymFields(row).outcome, row.reward])).toEqual([['agent_error', 0]]);
    expect(String((gymFields(rollouts[0]!).verifier as { reason?: unknown }).reason)).toMatch(
      /ran out of memory/,
    );
  });
});

describe('a verifier timeout is never a reward', () => {
  it('goes to the failures file, not retried, and stays out of the rollouts and the metrics', async () => {
    const output = join(directory, 'verifier-timeout.jsonl');
    const summary = await runEval({
      client: fakeClient({ at: `exec:${ROW.test_command}`, fault: 'timeout' }),
      environment,
      rows: [ROW],
      harness: createOracleHarness(),
      harnessName: 'oracle',
      modelName: 'm',
      numRepeats: 1,
      concurrency: 1,
      output,
      resume: false,
      maxInfraAttempts: 3,
      logger: silentLogger,
    });
    expect(await readJsonl(output)).toEqual([]);
    const failures = await readJsonl(output.replace(/\.jsonl$/, '_failures.jsonl'));
    expect(
      failures.map((row) => [
        gymFields(row).outcome,
        row._ng_failure_class,
        row._ng_failure_terminal,
        row.reward,
      ]),
    ).toEqual([['verifier_timeout', 'verifier_timeout', true, null]]);
    expect(summary).toMatchObject({ rollouts: 0, failures: 1 });
    expect(summary.metrics['mean/reward']).toBeUndefined();
    // An agent can cause a timeout (tests its code hangs): the rate shows it, and the mean that
    // counts it as 0 keeps a policy that hangs what it cannot solve from looking better.
    expect(summary.metrics['rate/verifier_timeout']).toBe(1);
    expect(summary.metrics['mean/reward_unjudged_as_0']).toBe(0);
  });
});

describe('a model-driven harness ends on an infrastructure fault instead of carrying on', () => {
  let model: ScriptedModelServer;
  beforeAll(async () => {
    // Reads a file, then (if it is still asked) declares the work done.
    model = await startScriptedModelServer(
      ModelScriptSchema.parse({
        conversations: [
          {
            replies: [
              {
                toolCalls: [
                  { name: 'read_file', arguments: { path: 'x' } },
                  { name: 'write_file', arguments: { path: 'y', content: 'y' } },
                ],
              },
              { toolCalls: [{ name: 'bash', arguments: { command: 'echo hi' } }] },
              { content: 'done' },
            ],
          },
        ],
      }),
    );
  });
  afterAll(async () => {
    await model.close();
  });

  const cases: FaultPlan[] = [
    { at: 'readFile:/testbed/x', fault: 'PROVIDER_ERROR' },
    { at: 'readFile:/testbed/x', fault: 'SANDBOX_NOT_FOUND' },
    { at: 'exec:echo hi', fault: 'DAEMON_UNAVAILABLE' },
    { at: 'exec:echo hi', fault: 'sandbox_gone' },
  ];
  it.each(cases)('tool-calling: $fault at $at', async (plan) => {
    const url = model.baseUrl.replace(/\/v1$/, '');
    const { rollouts, failures } = await runOnce(
      fakeClient(plan, url),
      createToolCallingHarness(),
      `tools-${plan.at}-${plan.fault}`,
    );
    expect(rollouts).toEqual([]);
    expect(failures.map((row) => gymFields(row).outcome)).toEqual(['infra_error']);
    // A trainer reading the line drops it: its 0 is no measurement of the agent.
    expect(failures[0]).toMatchObject({
      mask_sample: true,
      failure_reason: expect.stringMatching(/^infra_error: ./),
    });
  });

  // What the agent's files cause is an error the model sees; the run goes on and is graded.
  const mistakes: FaultPlan[] = [
    { at: 'readFile:/testbed/x', fault: 'FILE_TOO_LARGE' },
    {
      at: 'writeFile:/testbed/y',
      fault: 'PROVIDER_ERROR',
      message: 'Docker write file failed: write /testbed/y: no space left on device',
    },
  ];
  it.each(mistakes)('tool-calling: $fault at $at is shown to the model, not infra', async (plan) => {
    const url = model.baseUrl.replace(/\/v1$/, '');
    const { rollouts, failures } = await runOnce(
      fakeClient(plan, url),
      createToolCallingHarness(),
      `tools-mistake-${plan.at}-${plan.fault}`,
    );
    expect(failures).toEqual([]);
    expect(rollouts.map((row) => [gymFields(row).outcome, row.reward])).toEqual([['reward', 1]]);
    const [first] = gymFields(rollouts[0]!).trajectory as Array<{ observation?: string }>;
    expect(first?.observation).toMatch(/error:/);
  });

  it.each(['null', '[1]', '"text"'])(
    'tool-calling: arguments %s from the model are its mistake to see, not infra',
    async (raw) => {
      const own = await startScriptedModelServer(
        ModelScriptSchema.parse({
          conversations: [
            { replies: [{ toolCalls: [{ name: 'bash', arguments: raw }] }, { content: 'done' }] },
          ],
        }),
      );
      try {
        const { rollouts, failures } = await runOnce(
          fakeClient(null, own.baseUrl.replace(/\/v1$/, '')),
          createToolCallingHarness(),
          `tools-arguments-${raw}`,
        );
        expect(failures).toEqual([]);
        expect(rollouts.map((row) => [gymFields(row).outcome, row.reward])).toEqual([['reward', 1]]);
        const [first] = gymFields(rollouts[0]!).trajectory as Array<{ observation?: string }>;
        expect(first?.observation).toMatch(/must be a JSON object/);
      } finally {
        await own.close();
      }
    },
  );

  it("mini-swe: a command the daemon refuses (a NUL byte) is the model's to fix, not the end of the run", async () => {
    const bash = (command: string) => ({ content: `\`\`\`bash\n${command}\n\`\`\`` });
    const own = await startScriptedModelServer(
      ModelScriptSchema.parse({
        conversations: [{ replies: [bash('printf refused'), bash('echo hi'), bash('echo again')] }],
      }),
    );
    try {
      const { rollouts, failures } = await runOnce(
        fakeClient(
          { at: 'exec:printf refused', fault: 'VALIDATION_FAILED' },
          own.baseUrl.replace(/\/v1$/, ''),
        ),
        createMiniSweHarness(),
        'mini-swe-refused',
      );
      expect(failures).toEqual([]);
      // Three steps (the limit), then graded as SWE-bench grades a run that hit its limit.
      expect(rollouts.map((row) => [gymFields(row).outcome, row.reward])).toEqual([['reward', 1]]);
      const [first] = gymFields(rollouts[0]!).trajectory as Array<{ observation?: string }>;
      expect(first?.observation).toMatch(/refused/);
    } finally {
      await own.close();
    }
  });

  it('a model gateway that does not answer is infra, not the agent failing', async () => {
    const loop = new ModelLoop(
      { baseUrl: 'http://127.0.0.1:9/v1', basePath: '/v1', apiKey: 'k', model: 'm' },
      { ...DEFAULT_LIMITS, wallTimeMs: 5_000 },
      [{ role: 'user', content: 'hi' }],
    );
    const asked = await loop.step();
    expect('result' in asked && asked.result.outcome).toBe('infra_error');
  });
});
