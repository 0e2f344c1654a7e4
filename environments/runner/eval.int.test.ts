import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildSweMiniImages } from '../../cli/task-images.ts';
import { GymClient } from '../../client/client.ts';
import { silentLogger } from '../../core/logger.ts';
import { HarnessRegistry } from '../../harnesses/registry.ts';
import { ModelScriptSchema } from '../../harnesses/scripted-model/script.ts';
import { startScriptedModelServer } from '../../harnesses/scripted-model/server.ts';
import { startTestDaemon } from '../../test/daemon-harness.ts';
import { dockerTestEnvironment, localImages } from '../../test/docker-available.ts';
import { SwitchableEngine } from '../../test/switchable-engine.ts';
import { loadEnvironment, readRows } from '../environment.ts';
import { runEval } from './eval.ts';
import { readJsonl } from './files.ts';
import { reverifyRollout } from './reverify.ts';
import { gymFields } from './rollout-line.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const cliEntry = new URL('../../cli/main.ts', import.meta.url).pathname;

async function labelled(namespace: string): Promise<number> {
  return (await docker.listContainers({ all: true, filters: { label: [`gym.namespace=${namespace}`] } }))
    .length;
}

describe.skipIf(skipReason !== undefined)('gym eval against real Docker', () => {
  let outputDir = '';
  beforeAll(async () => {
    outputDir = await mkdtemp(join(tmpdir(), 'gym-eval-test-'));
    await buildSweMiniImages(localImages(docker));
  }, 300_000);
  afterAll(async () => {
    await rm(outputDir, { recursive: true, force: true });
  });

  it('gives the oracle reward 1 and a no-op harness reward 0 on every swe-mini task, leaking nothing', async () => {
    const namespace = `evaltest-${randomBytes(3).toString('hex')}`;
    const daemon = await startTestDaemon({ namespace }, { listen: true });
    try {
      const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
      const environment = await loadEnvironment('swe-mini');
      const rows = await readRows(environment.dataPath);
      expect(rows.length).toBeGreaterThanOrEqual(12);
      for (const [harnessName, expected] of [
        ['oracle', 1],
        ['noop', 0],
      ] as const) {
        const output = join(outputDir, `${harnessName}.jsonl`);
        const summary = await runEval({
          client,
          environment,
          rows,
          harness: await new HarnessRegistry().create(harnessName),
          harnessName,
          modelName: 'none',
          numRepeats: 1,
          concurrency: 4,
          output,
          resume: false,
          maxInfraAttempts: 2,
          logger: silentLogger,
        });
        const rollouts = await readJsonl(output);
        expect(summary.rollouts).toBe(rows.length);
        expect(rollouts.map((row) => [row.instance_id, row.reward, gymFields(row).outcome])).toEqual(
          rows.map((row) => [row.instance_id, expected, 'reward']),
        );
        // Reverifying the stored patches, with no agent, gives the same rewards; a spoiled patch scores 0.
        const again = await reverifyRollout(client, environment, rollouts[0]!);
        expect(again).toMatchObject({ _gym: { reverified: true }, reward: expected });
        if (harnessName === 'oracle') {
          const spoiled = {
            ...rollouts[0]!,
            _gym: {
              ...gymFields(rollouts[0]!),
              verifier: {
                modelPatch: 'diff --git a/nope b/nope\n--- a/nope\n+++ b/nope\n@@ -1 +1 @@\n-a\n+b\n',
              },
            },
          };
          expect(await reverifyRollout(client, environment, spoiled)).toMatchObject({
            reward: 0,
            _gym: { verifier: { reason: 'the patch does not apply' } },
          });
        }
        const metrics = JSON.parse(
          await readFile(join(outputDir, `${harnessName}_aggregate_metrics.json`), 'utf8'),
        );
        expect(metrics[0].agent_metrics['pass@1/reward']).toBe(expected * 100);
        expect(gymFields(rollouts[0]!).timings).toMatchObject({
          sandboxMs: expect.any(Number),
          agentMs: expect.any(Number),
          verifyMs: expect.any(Number),
        });
      }
    } finally {
      await daemon.stop({ destroy: true });
    }
    expect(await labelled(namespace)).toBe(0);
  }, 300_000);

  it('gives the oracle reward 1 and a no-op harness reward 0 on every terminal task; a slow test.sh is a verifier timeout, not a reward', async () => {
    const namespace = `termtest-${randomBytes(3).toString('hex')}`;
    const daemon = await startTestDaemon({ namespace }, { listen: true });
    try {
      const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
      const environment = await loadEnvironment('terminal');
      const rows = await readRows(environment.dataPath);
      expect(rows.length).toBeGreaterThanOrEqual(8);
      for (const [harnessName, expected] of [
        ['oracle', 1],
        ['noop', 0],
      ] as const) {
        const output = join(outputDir, `terminal-${harnessName}.jsonl`);
        await runEval({
          client,
          environment,
          rows,
          harness: await new HarnessRegistry().create(harnessName),
          harnessName,
          modelName: 'none',
          numRepeats: 1,
          concurrency: 4,
          output,
          resume: false,
          maxInfraAttempts: 2,
          logger: silentLogger,
        });
        expect((await readJsonl(output)).map((row) => [row.id, row.reward, gymFields(row).outcome])).toEqual(
          rows.map((row) => [row.id, expected, 'reward']),
        );
      }
      // The same through warm pools (one per shared image, sized to the concurrency).
      const pooled = join(outputDir, 'terminal-pooled.jsonl');
      const pooledSummary = await runEval({
        client,
        environment,
        rows,
        harness: await new HarnessRegistry().create('oracle'),
        harnessName: 'oracle',
        modelName: 'none',
        numRepeats: 2,
        concurrency: 4,
        output: pooled,
        resume: false,
        maxInfraAttempts: 2,
        usePools: true,
        logger: silentLogger,
      });
      expect(pooledSummary.rollouts).toBe(rows.length * 2);
      expect((await readJsonl(pooled)).every((row) => row.reward === 1)).toBe(true);
      expect(await client.listPools()).toEqual([]);
      // A test script that runs too long is the verifier's timeout, never a reward of 0.
      const slowDirectory = await mkdtemp(join(tmpdir(), 'gym-slow-env-'));
      await mkdir(join(slowDirectory, 'tests/slow'), { recursive: true });
      await writeFile(
        join(slowDirectory, 'tests/slow/test.sh'),
        'sleep 30\necho 1 > /logs/verifier/reward.txt\n',
      );
      const slowRows = [
        {
          id: 'slow',
          instruction: 'nothing',
          workdir: '/tmp',
          image: rows[0]!.image,
          tests: 'tests/slow',
          verifier_timeout_sec: 1,
        },
      ];
      const output = join(outputDir, 'slow.jsonl');
      await runEval({
        client,
        environment: { ...environment, directory: slowDirectory },
        rows: slowRows,
        harness: await new HarnessRegistry().create('noop'),
        harnessName: 'noop',
        modelName: 'none',
        numRepeats: 1,
        concurrency: 1,
        output,
        resume: false,
        maxInfraAttempts: 1,
        logger: silentLogger,
      });
      expect(await readJsonl(output)).toEqual([]);
      expect(await readJsonl(join(outputDir, 'slow_failures.jsonl'))).toMatchObject([
        { _gym: { outcome: 'verifier_timeout' }, reward: null, _ng_failure_class: 'verifier_timeout' },
      ]);
      await rm(slowDirectory, { recursive: true, force: true });
    } finally {
      await daemon.stop({ destroy: true });
    }
    expect(await labelled(namespace)).toBe(0);
  }, 300_000);

  it('lets a mini-swe agent submit a terminal task, whose /app is no git repository (it once ran to its step limit)', async () => {
    // A model that does as its prompt says: it solves count-errors, then runs the submit command
    // it was given (the git one, in a folder that is no repository, never submitted).
    const gitSubmit = 'echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached';
    const bash = (command: string) => ({ content: `Next.\n\`\`\`bash\n${command}\n\`\`\`` });
    const solve = bash('grep -c ERROR /app/server.log > /app/error_count.txt');
    const model = await startScriptedModelServer(
      ModelScriptSchema.parse({
        conversations: [
          { match: gitSubmit, replies: [solve, bash(gitSubmit)] },
          { replies: [solve, bash('echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT')] },
        ],
      }),
    );
    const namespace = `miniterm-${randomBytes(3).toString('hex')}`;
    const daemon = await startTestDaemon(
      { namespace, gateway: { upstream: { baseUrl: model.baseUrl }, maxRetries: 0 } },
      { listen: true },
    );
    try {
      const environment = await loadEnvironment('terminal');
      const rows = (await readRows(environment.dataPath)).filter((row) => row.id === 'count-errors');
      const output = join(outputDir, 'terminal-mini-swe.jsonl');
      await runEval({
        client: new GymClient({ url: daemon.address.url!, token: daemon.token }),
        environment: { ...environment, limits: { ...environment.limits, maxSteps: 5 } },
        rows,
        harness: await new HarnessRegistry().create('mini-swe'),
        harnessName: 'mini-swe',
        modelName: 'scripted',
        numRepeats: 1,
        concurrency: 1,
        output,
        resume: false,
        maxInfraAttempts: 1,
        logger: silentLogger,
      });
      const [rollout] = await readJsonl(output);
      expect(rollout).toMatchObject({
        reward: 1,
        response: { object: 'response', status: 'completed' },
        _gym: { outcome: 'reward', harness: { outcome: 'submitted' } },
      });
      expect((gymFields(rollout!).model_calls as unknown[]).length).toBe(2);
    } finally {
      await daemon.stop({ destroy: true });
      await model.close();
    }
    expect(await labelled(namespace)).toBe(0);
  }, 120_000);

  it('resumes a run killed halfway: exactly one line per (task, repeat), the same rewards', async () => {
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-eval-resume-'));
    const output = join(outputDir, 'resume.jsonl');
    const args = [
      cliEntry,
      'eval',
      'run',
      '--env',
      'swe-mini',
      '--harness',
      'oracle',
      '--limit',
      '6',
      '--num-repeats',
      '2',
      '--concurrency',
      '2',
      '--output',
      output,
    ];
    const env = { ...process.env, GYM_STATE_DIR: stateDir, GYM_LOG_LEVEL: 'error' };
    const first = spawn(process.execPath, args, { env, stdio: 'ignore' });
    // Kill it once a few rollouts are on disk.
    const deadline = Date.now() + 120_000;
    while (!existsSync(output) || (await readJsonl(output)).length < 4) {
      expect(first.exitCode, 'the first run ended before it could be killed').toBeNull();
      expect(Date.now(), 'the first run wrote no rollouts in two minutes').toBeLessThan(deadline);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    first.kill('SIGKILL');
    await new Promise((resolve) => first.once('exit', resolve));
    const partial = (await readJsonl(output)).length;
    expect(partial).toBeLessThan(12);

    const second = spawn(process.execPath, [...args, '--resume'], { env, stdio: 'ignore' });
    const code = await new Promise((resolve) => second.once('exit', resolve));
    expect(code).toBe(0);
    const rollouts = await readJsonl(output);
    const keys = rollouts.map((row) => `${row._ng_task_index}/${row._ng_rollout_index}`);
    expect(new Set(keys).size).toBe(12);
    expect(keys).toHaveLength(12);
    expect(rollouts.every((row) => row.reward === 1)).toBe(true);
    // The resumed run's in-process daemon reconciled what the killed one left: nothing remains.
    expect(await labelled('gym-eval')).toBe(0);
    await rm(stateDir, { recursive: true, force: true });
  }, 300_000);

  it('turns an engine outage into infra errors that are retried, never reward 0, never a hang', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'gym-engine-'));
    const engine = new SwitchableEngine(directory);
    await engine.up();
    const namespace = `outage-${randomBytes(3).toString('hex')}`;
    const daemon = await startTestDaemon(
      {
        namespace,
        orphanScanIntervalMs: 500,
        providers: [{ name: 'docker', options: { socketPath: engine.path } }],
      },
      { listen: true },
    );
    try {
      const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
      const environment = await loadEnvironment('swe-mini');
      const rows = (await readRows(environment.dataPath)).slice(0, 4);
      const output = join(outputDir, 'outage.jsonl');
      let isCut = false;
      const run = runEval({
        client,
        environment,
        rows,
        harness: await new HarnessRegistry().create('oracle'),
        harnessName: 'oracle',
        modelName: 'none',
        numRepeats: 1,
        concurrency: 2,
        output,
        resume: false,
        maxInfraAttempts: 6,
        logger: silentLogger,
        onProgress: () => {
          // After the first finished rollout, the engine goes away for three seconds.
          if (isCut) return;
          isCut = true;
          void engine.down().then(() => setTimeout(() => void engine.up(), 3000));
        },
      });
      const summary = await run;
      const rollouts = await readJsonl(output);
      const failures = await readJsonl(join(outputDir, 'outage_failures.jsonl'));
      expect(summary.rollouts).toBe(4);
      expect(rollouts.every((row) => row.reward === 1 && gymFields(row).outcome === 'reward')).toBe(true);
      expect(failures.length).toBeGreaterThan(0);
      expect(
        failures.every(
          (row) => gymFields(row).outcome === 'infra_error' && row._ng_failure_terminal === false,
        ),
      ).toBe(true);
      // Whatever a cut-off create left behind, the orphan scan removes.
      await new Promise((resolve) => setTimeout(resolve, 1500));
    } finally {
      await daemon.stop({ destroy: true });
      await engine.down();
      await rm(directory, { recursive: true, force: true });
    }
    expect(await labelled(namespace)).toBe(0);
  }, 300_000);
});
