import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { ModelScriptSchema } from '../../../harnesses/scripted-model/script.ts';
import {
  type ScriptedModelServer,
  startScriptedModelServer,
} from '../../../harnesses/scripted-model/server.ts';
import type { ProviderContext } from '../../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../../../test/daemon-harness.ts';
import { MemoryProvider } from '../../../test/fixtures/memory-provider.ts';
import { runCli } from '../../program.ts';
import { evalDaemonConfig } from './run.ts';

let daemon: TestDaemon | undefined;
let model: ScriptedModelServer | undefined;
let outputDir: string | undefined;
afterEach(async () => {
  await daemon?.cleanup();
  await model?.close();
  if (outputDir !== undefined) await rm(outputDir, { recursive: true, force: true });
  daemon = model = outputDir = undefined;
});

describe('gym eval run --token-ids', () => {
  /** A running daemon and a scripted model that answers (with ids as vLLM gives them when asked). */
  async function runWithTokenIds(
    extraArgs: string[],
    envYaml = '/dev/null',
    reply: Record<string, unknown> = {},
  ) {
    daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }] },
      {
        factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
        listen: true,
      },
    );
    model = await startScriptedModelServer(
      ModelScriptSchema.parse({
        model: 'scripted',
        conversations: [
          {
            replies: [{ content: 'Answer: B', ...reply }],
          },
        ],
      }),
    );
    outputDir = await mkdtemp(join(tmpdir(), 'gym-eval-token-ids-'));
    const output = join(outputDir, 'rollouts.jsonl');
    const exitCode = await runCli(
      [
        'eval',
        'run',
        '--env',
        'mcqa',
        '--limit',
        '1',
        '-o',
        output,
        '--model-url',
        model.baseUrl,
        '--model',
        'scripted',
        '--state-dir',
        daemon.stateDir,
        '--env-yaml',
        envYaml,
        ...extraArgs,
      ],
      { stdout: new PassThrough(), stderr: new PassThrough(), env: {} },
    );
    const failures = join(outputDir, 'rollouts_failures.jsonl');
    expect(exitCode, existsSync(failures) ? await readFile(failures, 'utf8') : '').toBe(0);
    const [line] = (await readFile(output, 'utf8'))
      .trim()
      .split('\n')
      .map((text) => JSON.parse(text) as Record<string, unknown>);
    return line!;
  }

  it("asks the run's own upstream for ids and writes each line's training response, NeMo Gym's fields beside it", async () => {
    // Seen: --policy-base-url replaced the upstream and dropped requestTokenIds, so no run could ask.
    const line = await runWithTokenIds(['--token-ids']);
    expect(model!.requests.every((request) => request.body.return_token_ids === true)).toBe(true);
    expect(line).toMatchObject({
      reward: 1,
      mask_sample: false,
      _ng_token_capture: { n_calls: 1, chains: 1, roots: 1, delivered_fraction: 1, mask_reasons: [] },
    });
    // The output is the call's answer, its ids on it as the upstream gave them.
    const upstream = model!.requests[0]!;
    const [item] = (line.response as { output: Array<Record<string, unknown>> }).output;
    expect(item).toMatchObject({ type: 'message', content: [{ type: 'output_text', text: 'Answer: B' }] });
    const records = (line._gym as { model_calls: Array<{ tokens: Record<string, number[]> }> }).model_calls;
    expect(item!.prompt_token_ids).toEqual(records[0]!.tokens.promptTokenIds);
    expect(item!.generation_token_ids).toEqual(records[0]!.tokens.completionTokenIds);
    expect(item!.generation_log_probs).toEqual(records[0]!.tokens.completionLogprobs);
    expect(upstream.body.logprobs).toBe(true);
    // The share of masked rollouts among the run's metrics.
    const metrics = JSON.parse(await readFile(join(outputDir!, 'rollouts_aggregate_metrics.json'), 'utf8'));
    expect(metrics[0].agent_metrics['mean/mask_sample']).toBe(0);
  });

  it('masks a rollout whose upstream gave a call no ids, saying why, and keeps its response as it was', async () => {
    const line = await runWithTokenIds(['--token-ids'], '/dev/null', { withholdTokenIds: true });
    expect(line.reward).toBe(1);
    expect(line.mask_sample).toBe(true);
    const capture = line._ng_token_capture as {
      n_calls: number;
      capture_incomplete: boolean;
      lost_calls: Array<{ call: number; reason: string }>;
      mask_reasons: string[];
    };
    expect(capture).toMatchObject({ n_calls: 0, capture_incomplete: true });
    expect(capture.lost_calls).toEqual([
      { call: 0, reason: expect.stringContaining('no token ids: the upstream returned no') },
    ]);
    expect(capture.mask_reasons[0]).toMatch(/^call 0 lost its token ids/);
    // Nothing stitched from text: the response is the line's usual one, with no token fields.
    const output = (line.response as { output: Array<Record<string, unknown>> }).output;
    expect(output).toHaveLength(1);
    expect(output[0]).not.toHaveProperty('generation_token_ids');
  });

  it("takes NeMo Gym's token_id_capture.enabled from env.yaml; without either, lines keep today's shape", async () => {
    const withFile = join(await mkdtemp(join(tmpdir(), 'gym-token-yaml-')), 'env.yaml');
    await writeFile(withFile, 'token_id_capture:\n  enabled: true\n');
    try {
      const line = await runWithTokenIds([], withFile);
      expect(line.mask_sample).toBe(false);
      expect(model!.requests[0]!.body.return_token_ids).toBe(true);
    } finally {
      await rm(dirname(withFile), { recursive: true, force: true });
    }
    await daemon?.cleanup();
    await model?.close();
    const plain = await runWithTokenIds([]);
    // Failure facts are on every line; the capture metrics only when ids were asked for.
    expect(plain).toMatchObject({ mask_sample: false, failure_reason: null });
    expect(plain).not.toHaveProperty('_ng_token_capture');
    expect(model!.requests[0]!.body.return_token_ids).toBeUndefined();
    expect((plain.response as { output: unknown[] }).output).toHaveLength(1);
  });
});

describe('the daemon gym eval run starts, with --token-ids', () => {
  it("asks whichever upstream it has for ids: the run's own, or the configured one", async () => {
    outputDir = await mkdtemp(join(tmpdir(), 'gym-token-config-'));
    const config = join(outputDir, 'gym.yaml');
    await writeFile(
      config,
      'gateway: { upstream: { baseUrl: http://127.0.0.1:9/v1, apiKey: sk-configured } }\n',
    );
    const env = { GYM_CONFIG: config };
    expect((await evalDaemonConfig('/s', { tokenIds: true }, env)).gateway.upstream).toEqual({
      baseUrl: 'http://127.0.0.1:9/v1',
      apiKey: 'sk-configured',
      requestTokenIds: true,
    });
    expect(
      (await evalDaemonConfig('/s', { baseUrl: 'http://127.0.0.1:10/v1', tokenIds: true }, env)).gateway
        .upstream,
    ).toEqual({ baseUrl: 'http://127.0.0.1:10/v1', requestTokenIds: true });
    // Not asked, neither is.
    expect((await evalDaemonConfig('/s', {}, env)).gateway.upstream?.requestTokenIds).toBeUndefined();
  });
});
