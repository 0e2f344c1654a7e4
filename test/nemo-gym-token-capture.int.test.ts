/**
 * Our training responses against NeMo Gym's own token capture. Rollouts run for real against the
 * scripted model answering with token ids as vLLM does: a native tool-calling loop through
 * `runEval` on Docker (the line it writes), Claude Code in a sandbox (its Messages calls
 * translated to Chat Completions), and mini-swe-agent 2.x from PyPI (a Python agent, through
 * litellm). NeMo Gym's code, from the `nemo-gym` framework runtime, then
 * takes the same recorded calls the way its model server takes the calls it serves, links them
 * by its own prefix index and builds its training response
 * (`test/fixtures/nemo-gym-token-capture.py`): ours must pass its prefix-contiguity check and
 * carry the very token fields, metrics and mask its builder gives.
 * Without that runtime (set-up step 7), the test fails rather than skips.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildSweMiniImages } from '../cli/task-images.ts';
import { GymClient } from '../client/client.ts';
import { silentLogger } from '../core/logger.ts';
import { loadEnvironment, readRows } from '../environments/environment.ts';
import { runEval } from '../environments/runner/eval.ts';
import { readJsonl } from '../environments/runner/files.ts';
import { gymFields } from '../environments/runner/rollout-line.ts';
import { buildTrainingCapture } from '../environments/runner/training-response.ts';
import { DEFAULT_LIMITS } from '../harnesses/harness.ts';
import { CLAUDE_CODE_RECIPE } from '../harnesses/installed/claude-code.ts';
import { ensureAgentOnHost, type NpmHostSource } from '../harnesses/installed/installed-agent.ts';
import { MINI_SWE_AGENT_RECIPE } from '../harnesses/installed/mini-swe-agent.ts';
import {
  type PythonHostSource,
  pythonRuntimeDir,
  readRuntimeManifest,
} from '../harnesses/installed/python-runtime.ts';
import { HarnessRegistry } from '../harnesses/registry.ts';
import { clientSandboxHandle } from '../harnesses/sandbox-handle.ts';
import { ModelScriptSchema } from '../harnesses/scripted-model/script.ts';
import { type ScriptedModelServer, startScriptedModelServer } from '../harnesses/scripted-model/server.ts';
import { startTestDaemon, type TestDaemon } from './daemon-harness.ts';
import { dockerTestEnvironment, localImages, testImage } from './docker-available.ts';
import { frameworkRuntimeDir } from './frameworks/runtimes.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const FIXTURE = new URL('./fixtures/nemo-gym-token-capture.py', import.meta.url).pathname;
const AGENT_CACHE_DIR = `${process.env.HOME}/.cache/gym/agents`;
const MINI_RUNTIME = pythonRuntimeDir(AGENT_CACHE_DIR, MINI_SWE_AGENT_RECIPE.source as PythonHostSource);

/**
 * The runtime's python. `GYM_TEST_NEMO_GYM_PYTHON` names another install of the same NeMo Gym
 * (a developer's own virtualenv); without it the framework runtime must be there.
 */
function nemoGymPython(): string {
  return process.env.GYM_TEST_NEMO_GYM_PYTHON ?? join(frameworkRuntimeDir('nemo-gym'), 'bin', 'python');
}

interface NemoGymVerdict {
  build: {
    mask_sample: boolean;
    metrics: Record<string, unknown>;
    error: string | null;
    output: Array<Record<string, unknown>> | null;
  };
  contiguity: string | null;
}

interface NemoGymInput {
  rollout_id: string;
  records: readonly unknown[];
  response: unknown;
}

function nemoGym(input: NemoGymInput): Promise<NemoGymVerdict>;
function nemoGym(input: { rollouts: NemoGymInput[] }): Promise<NemoGymVerdict[]>;
function nemoGym(
  input: NemoGymInput | { rollouts: NemoGymInput[] },
): Promise<NemoGymVerdict | NemoGymVerdict[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(nemoGymPython(), [FIXTURE], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) reject(new Error(`NeMo Gym's capture exited ${code}: ${stderr}`));
      else resolve(JSON.parse(stdout) as NemoGymVerdict | NemoGymVerdict[]);
    });
    child.stdin.end(JSON.stringify(input));
  });
}

/** The token fields of an output, in order: what a trainer reads. */
const tokenFields = (output: ReadonlyArray<Record<string, unknown>>) =>
  output
    .filter((item) => Array.isArray(item.generation_token_ids))
    .map(({ prompt_token_ids, generation_token_ids, generation_log_probs }) => ({
      prompt_token_ids,
      generation_token_ids,
      generation_log_probs,
    }));

/** The metrics both builders report, by NeMo Gym's names. */
const SHARED_METRICS = [
  'n_calls',
  'chains',
  'roots',
  'quarantined_calls',
  'quarantined_fraction',
  'delivered_fraction',
  'generated_tokens_captured',
  'generated_tokens_delivered',
  'empty_generation_calls',
  'capture_incomplete',
] as const;
const shared = (metrics: Record<string, unknown>) =>
  Object.fromEntries(SHARED_METRICS.flatMap((key) => (key in metrics ? [[key, metrics[key]]] : [])));

describe.skipIf(skipReason !== undefined)("training responses against NeMo Gym's token capture", () => {
  let model: ScriptedModelServer;
  let daemon: TestDaemon;
  let client: GymClient;
  let outputDir: string;

  beforeAll(async () => {
    model = await startScriptedModelServer(
      ModelScriptSchema.parse({
        model: 'scripted',
        conversations: [
          {
            match: 'task claude-capture',
            // Claude Code's side calls (a title, a summary) declare no tools: roots of their own.
            rules: [{ hasTools: false, reply: { content: 'Fix add' } }],
            replies: [
              {
                content: 'I will read it first.',
                toolCalls: [
                  { name: 'Bash', arguments: { command: 'cat calc.py', description: 'Read calc' } },
                ],
              },
              {
                content: 'Now the fix.',
                toolCalls: [
                  {
                    name: 'Bash',
                    arguments: { command: "sed -i 's/a - b/a + b/' calc.py", description: 'Fix' },
                  },
                ],
                // The upstream tokenises this call's history anew: its prompt extends no earlier call.
                retokeniseHistory: true,
              },
              { content: 'Fixed with exact tokens.' },
            ],
          },
          {
            match: 'task mini-capture',
            replies: [
              { content: 'Reading.', toolCalls: [{ name: 'bash', arguments: { command: 'cat calc.py' } }] },
              {
                content: 'Fixing.',
                toolCalls: [{ name: 'bash', arguments: { command: "sed -i 's/a - b/a + b/' calc.py" } }],
              },
              {
                content: 'Done.',
                toolCalls: [
                  { name: 'bash', arguments: { command: 'echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT' } },
                ],
              },
            ],
          },
          {
            // The native tool-calling loop on swe-mini's mathutil-1.
            replies: [
              {
                content: 'Reading.',
                toolCalls: [{ name: 'bash', arguments: { command: 'cat mathutil/bounds.py' } }],
              },
              {
                toolCalls: [
                  {
                    name: 'bash',
                    arguments: {
                      command: "sed -i '/value > high/{n;s/return low/return high/}' mathutil/bounds.py",
                    },
                  },
                ],
              },
              { toolCalls: [{ name: 'bash', arguments: { command: 'git diff' } }] },
              { content: 'Fixed clamp.' },
            ],
          },
        ],
      }),
    );
    daemon = await startTestDaemon(
      {
        namespace: `tokcap-${randomBytes(3).toString('hex')}`,
        providers: [{ name: 'docker', options: { allowedHostPaths: [AGENT_CACHE_DIR] } }],
      },
      { listen: true },
    );
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
    outputDir = await mkdtemp(join(tmpdir(), 'gym-token-capture-'));
  }, 120_000);

  afterAll(async () => {
    await daemon?.stop({ destroy: true });
    await model?.close();
    if (outputDir !== undefined) await rm(outputDir, { recursive: true, force: true });
  });

  it("writes a native multi-call tool-calling rollout's training response as NeMo Gym builds it from the same calls", async () => {
    await buildSweMiniImages(localImages(docker));
    const environment = await loadEnvironment('swe-mini');
    const rows = (await readRows(environment.dataPath)).filter((row) => row.instance_id === 'mathutil-1');
    const output = join(outputDir, 'native.jsonl');
    await runEval({
      client,
      environment,
      rows,
      harness: await new HarnessRegistry().create('tool-calling'),
      harnessName: 'tool-calling',
      modelName: 'scripted',
      numRepeats: 1,
      concurrency: 1,
      output,
      resume: false,
      maxInfraAttempts: 1,
      upstream: { baseUrl: model.baseUrl, model: 'scripted' },
      tokenIds: true,
      logger: silentLogger,
    });
    const [line] = await readJsonl(output);
    expect(line).toMatchObject({ reward: 1, mask_sample: false });
    const records = gymFields(line!).model_calls as unknown[];
    expect(records).toHaveLength(4);
    const ours = line!.response as { output: Array<Record<string, unknown>> };
    const theirs = await nemoGym({ rollout_id: String(line!._ng_rollout_id), records, response: ours });
    expect(theirs.contiguity).toBeNull();
    expect(theirs.build.error).toBeNull();
    expect(tokenFields(ours.output)).toEqual(tokenFields(theirs.build.output!));
    expect(tokenFields(ours.output)).toHaveLength(4);
    const metrics = line!._ng_token_capture as Record<string, unknown>;
    expect(shared(metrics)).toEqual(shared(theirs.build.metrics));
    expect(metrics).toMatchObject({ n_calls: 4, chains: 1, roots: 1, delivered_fraction: 1 });
    expect(theirs.build.mask_sample).toBe(false);
    // The text beside the tokens: the agent's tool calls and its answer, as Responses items.
    expect(ours.output.map((item) => item.type)).toEqual([
      'message',
      'function_call',
      'function_call',
      'function_call',
      'message',
    ]);
  }, 300_000);

  /** An installed agent's rollout on the calc task, its upstream asked for ids; the gateway's records of it. */
  async function agentRollout(harnessName: string, taskId: string, bind: { hostPath: string; path: string }) {
    const sandbox = await client.createSandbox({
      image: await testImage(docker, 'debian-base'),
      providerOptions: { readOnlyBinds: [bind] },
    });
    try {
      const setup = await client.exec(sandbox.id, {
        command: [
          'mkdir -p /work/repo && cd /work/repo && git init -q',
          "printf 'def add(a, b):\\n    return a - b\\n' > calc.py",
          'git add -A && git -c user.email=gym@example.invalid -c user.name=gym commit -qm init',
        ].join(' && '),
      });
      expect(setup.exitCode, setup.stderr).toBe(0);
      const rollout = await client.openRollout({
        upstream: { baseUrl: model.baseUrl, model: 'scripted', requestTokenIds: true },
      });
      const result = await (await new HarnessRegistry().create(harnessName)).run({
        sandbox: clientSandboxHandle(client, sandbox.id),
        task: { id: taskId, instruction: `Fix add() in calc.py (task ${taskId}).`, workdir: '/work/repo' },
        model: {
          baseUrl: `${client.url}${rollout.basePath}`,
          basePath: rollout.basePath,
          apiKey: rollout.key,
          model: 'any',
        },
        limits: { ...DEFAULT_LIMITS, wallTimeMs: 150_000 },
        logger: silentLogger,
      });
      expect(result.outcome, result.message).toBe('submitted');
      return { rolloutId: rollout.rolloutId, records: await client.rolloutRecords(rollout.rolloutId) };
    } finally {
      await client.destroySandbox(sandbox.id);
    }
  }

  /** Our training response of an agent's records, checked against NeMo Gym's of the same calls. */
  async function checkedCapture(rolloutId: string, records: unknown[]) {
    const capture = buildTrainingCapture(records);
    const theirs = await nemoGym({
      rollout_id: rolloutId,
      records,
      response: { object: 'response', output: capture.output },
    });
    expect(theirs.contiguity).toBeNull();
    expect(tokenFields(capture.output!)).toEqual(tokenFields(theirs.build.output!));
    expect(shared(capture.metrics as unknown as Record<string, unknown>)).toEqual(
      shared(theirs.build.metrics),
    );
    expect(capture.maskSample).toBe(theirs.build.mask_sample);
    return capture;
  }

  it("gives a Claude Code rollout, its history re-tokenised once, NeMo Gym's chains, tokens and mask", async () => {
    const hostBinary = await ensureAgentOnHost(CLAUDE_CODE_RECIPE.source as NpmHostSource, AGENT_CACHE_DIR);
    const { rolloutId, records } = await agentRollout('claude-code', 'claude-capture', {
      hostPath: dirname(hostBinary),
      path: dirname(CLAUDE_CODE_RECIPE.sandboxBinaryPath),
    });
    const capture = await checkedCapture(rolloutId, records);
    // The re-tokenised call starts a chain of its own (as do side calls): more than one, masked.
    expect(capture.metrics.chains).toBeGreaterThan(1);
    expect(capture.maskSample).toBe(true);
    expect(capture.metrics.mask_reasons.join('\n')).toMatch(/chains; only the main one is delivered/);
  }, 240_000);

  it("gives a Python agent's rollout (mini-swe-agent 2.x through litellm) NeMo Gym's one chain, unmasked", async () => {
    // set-up made the runtime (`gym agent install`); a missing one is a failure, not a skip.
    expect(await readRuntimeManifest(MINI_RUNTIME), `no runtime at ${MINI_RUNTIME}`).not.toBeNull();
    const { rolloutId, records } = await agentRollout('mini-swe-agent', 'mini-capture', {
      hostPath: MINI_RUNTIME,
      path: '/opt/gym-agents/mini-swe-agent',
    });
    expect(records).toHaveLength(3);
    const capture = await checkedCapture(rolloutId, records);
    expect(capture.metrics).toMatchObject({ n_calls: 3, chains: 1, roots: 1, delivered_fraction: 1 });
    expect(capture.maskSample).toBe(false);
  }, 240_000);
});

/**
 * Synthetic rollouts of every shape the builder meets: calls continuing earlier ones (tool output
 * between them), retries of a call (one extended later, or none), compacted prompts, calls that
 * generated nothing, lost calls, completion times that tie. Generated ids are unique, so no two
 * calls have the same ids (an ambiguous parent, where NeMo Gym 0.7's lineage leaves the call
 * unresolved and ours quarantines it, is covered by the unit tests).
 */
function syntheticRollouts(count: number, seed: number): NemoGymInput[] {
  let state = seed;
  const random = () => {
    state = (Math.imul(state, 1_103_515_245) + 12_345) >>> 0;
    return state / 4_294_967_296;
  };
  const pick = <T>(items: readonly T[]) => items[Math.floor(random() * items.length)]!;
  let nextId = 10_000;
  const fresh = (length: number) => Array.from({ length }, () => nextId++);
  return Array.from({ length: count }, (_, rolloutIndex) => {
    const calls: Array<{ prompt: number[]; generation: number[]; isLost: boolean }> = [];
    const callCount = 1 + Math.floor(random() * 7);
    for (let index = 0; index < callCount; index += 1) {
      const kept = calls.filter((call) => !call.isLost && call.generation.length > 0);
      const roll = random();
      let prompt: number[];
      if (kept.length === 0 || roll < 0.15) prompt = [1, 2, ...fresh(Math.floor(random() * 3))];
      else if (roll < 0.3) prompt = [...pick(calls).prompt];
      else {
        const parent = pick(kept);
        prompt = [...parent.prompt, ...parent.generation, ...fresh(Math.floor(random() * 3))];
      }
      const generation = random() < 0.1 ? [] : fresh(1 + Math.floor(random() * 3));
      calls.push({ prompt, generation, isLost: random() < 0.05 });
    }
    const records = calls.map((call, index) => ({
      index,
      rolloutId: `synthetic-${rolloutIndex}`,
      api: 'chat.completions',
      // Whole seconds and round durations: some calls complete at the same time.
      startedAt: new Date(Date.UTC(2026, 0, 1, 0, 0, Math.floor(random() * 4))).toISOString(),
      durationMs: pick([0, 250, 500]),
      stream: false,
      request: { messages: [] },
      status: call.isLost ? 'error' : 'ok',
      ...(call.isLost ? { error: { code: 'MODEL_UPSTREAM_ERROR', message: 'lost' } } : {}),
      response: {
        object: 'chat.completion',
        choices: [{ index: 0, message: { role: 'assistant', content: `call ${index}` } }],
      },
      ...(call.isLost
        ? {}
        : {
            tokens: {
              promptTokenIds: call.prompt,
              completionTokenIds: call.generation,
              completionLogprobs: call.generation.map((id) => -id / 100_000),
            },
          }),
    }));
    return { rollout_id: `synthetic-${rolloutIndex}`, records, response: null };
  });
}

describe("the training-response builder against NeMo Gym's, on synthetic rollouts", () => {
  it('chains, quarantines, delivers and masks 300 rollouts of every shape exactly as NeMo Gym does', async () => {
    const rollouts = syntheticRollouts(300, 34);
    const verdicts = await nemoGym({ rollouts });
    const seen = { masked: 0, multiChain: 0, quarantined: 0, incomplete: 0, failed: 0, unresolved: 0 };
    for (const [index, theirs] of verdicts.entries()) {
      const capture = buildTrainingCapture(rollouts[index]!.records);
      const label = `rollout ${index}: ${JSON.stringify(rollouts[index]!.records.map((record) => (record as { tokens?: unknown }).tokens))}`;
      expect(capture.maskSample, label).toBe(theirs.build.mask_sample);
      expect(shared(capture.metrics as unknown as Record<string, unknown>), label).toEqual(
        shared(theirs.build.metrics),
      );
      expect(capture.output === undefined, label).toBe(theirs.build.output === null);
      if (capture.output !== undefined)
        expect(tokenFields(capture.output), label).toEqual(tokenFields(theirs.build.output!));
      seen.masked += capture.maskSample ? 1 : 0;
      seen.multiChain += (capture.metrics.chains ?? 0) > 1 ? 1 : 0;
      seen.quarantined += (capture.metrics.quarantined_calls ?? 0) > 0 ? 1 : 0;
      seen.incomplete += capture.metrics.capture_incomplete === true ? 1 : 0;
      seen.failed += capture.output === undefined ? 1 : 0;
      seen.unresolved += capture.metrics.mask_reasons.some((reason) => reason.includes('share one prompt'))
        ? 1
        : 0;
    }
    // Every shape was met, and some rollouts were sound.
    for (const [shape, count] of Object.entries(seen)) expect(count, shape).toBeGreaterThan(0);
    expect(seen.masked).toBeLessThan(rollouts.length);
  }, 120_000);
});
