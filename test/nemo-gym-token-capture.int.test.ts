/**
 * Our training responses against NeMo Gym's own token capture. Rollouts run for real against the
 * scripted model answering with token ids as vLLM does: a native tool-calling loop through
 * `runEval` on Docker (the line it writes), and Claude Code in a sandbox (its Messages calls
 * translated to Chat Completions). NeMo Gym's code, from the `nemo-gym` framework runtime, then
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

function nemoGym(input: {
  rollout_id: string;
  records: unknown[];
  response: unknown;
}): Promise<NemoGymVerdict> {
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
      else resolve(JSON.parse(stdout) as NemoGymVerdict);
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

  it("gives a Claude Code rollout, its history re-tokenised once, NeMo Gym's chains, tokens and mask", async () => {
    const hostBinary = await ensureAgentOnHost(CLAUDE_CODE_RECIPE.source as NpmHostSource, AGENT_CACHE_DIR);
    const sandbox = await client.createSandbox({
      image: await testImage(docker, 'debian-base'),
      providerOptions: {
        readOnlyBinds: [
          { hostPath: dirname(hostBinary), path: dirname(CLAUDE_CODE_RECIPE.sandboxBinaryPath) },
        ],
      },
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
      const result = await (await new HarnessRegistry().create('claude-code')).run({
        sandbox: clientSandboxHandle(client, sandbox.id),
        task: {
          id: 'claude-capture',
          instruction: 'Fix add() in calc.py (task claude-capture).',
          workdir: '/work/repo',
        },
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
      const records = await client.rolloutRecords(rollout.rolloutId);
      const capture = buildTrainingCapture(records);
      const response = { object: 'response', output: capture.output };
      const theirs = await nemoGym({ rollout_id: rollout.rolloutId, records, response });
      expect(theirs.contiguity).toBeNull();
      expect(tokenFields(capture.output!)).toEqual(tokenFields(theirs.build.output!));
      expect(shared(capture.metrics as unknown as Record<string, unknown>)).toEqual(
        shared(theirs.build.metrics),
      );
      // The re-tokenised call starts a chain of its own (as do the side calls): more than one, masked.
      expect(capture.metrics.chains).toBeGreaterThan(1);
      expect(capture.maskSample).toBe(true);
      expect(theirs.build.mask_sample).toBe(true);
      expect(capture.metrics.mask_reasons.join('\n')).toMatch(/chains; only the main one is delivered/);
    } finally {
      await client.destroySandbox(sandbox.id);
    }
  }, 240_000);
});
