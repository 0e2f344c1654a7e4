/**
 * `gym eval run`, unchanged, against a daemon whose only provider is the second, minimal one
 * (bubblewrap on this host: no sessions, no snapshot, no gateway reach). Docker is used only by
 * this test's set-up, to export the task image's root filesystem; the daemon never loads it.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readJsonl } from '../../environments/runner/files.ts';
import { gymFields } from '../../environments/runner/rollout-line.ts';
import { ModelScriptSchema } from '../../harnesses/scripted-model/script.ts';
import { type ScriptedModelServer, startScriptedModelServer } from '../../harnesses/scripted-model/server.ts';
import { imageFolderName } from '../../providers/shared/image-folder.ts';
import { runGym } from '../cli-process.ts';
import { spawnDaemonProcess } from '../daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';
import { exportRootfs as exportImage } from '../fixtures/export-rootfs.ts';

const PROVIDER = new URL('../fixtures/bwrap-provider.ts', import.meta.url).pathname;
const TERMINAL_IMAGE = 'gym/debian-base:latest';

const { docker, skipReason } = await dockerTestEnvironment();

/** Unpacks an engine image's root filesystem into `<imageDirectory>/<reference>/`. */
const exportRootfs = (imageDirectory: string, source: string, reference: string) =>
  exportImage(docker, source, join(imageDirectory, imageFolderName(reference)));

const gym = (args: string[], stateDir: string) => runGym(args, stateDir);

describe.skipIf(skipReason !== undefined)('gym eval run on a provider without Docker', () => {
  let directory = '';
  let stateDir = '';
  let child: ChildProcess | undefined;
  let model: ScriptedModelServer;

  beforeAll(async () => {
    directory = await mkdtemp(join(tmpdir(), 'gym-second-provider-'));
    stateDir = join(directory, 'state');
    const imageDirectory = join(directory, 'images');
    await mkdir(stateDir, { recursive: true });
    await exportRootfs(imageDirectory, await testImage(docker, 'debian-base'), TERMINAL_IMAGE);
    // The scripted model solves count-errors in one step, then submits.
    model = await startScriptedModelServer(
      ModelScriptSchema.parse({
        conversations: [
          {
            match: 'ERROR',
            replies: [
              { content: 'Count them.\n```bash\ngrep -c ERROR /app/server.log > /app/error_count.txt\n```' },
              { content: 'Done.\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```' },
            ],
          },
        ],
      }),
    );
    const configPath = join(directory, 'gym.yaml');
    await writeFile(
      configPath,
      [
        `stateDir: ${stateDir}`,
        'namespace: second',
        'listen: { host: 127.0.0.1, port: 0 }',
        'logLevel: warn',
        'providers:',
        `  - { name: bwrap, module: ${PROVIDER}, options: { imageDirectory: ${imageDirectory} } }`,
        `gateway: { upstream: { baseUrl: ${model.baseUrl} }, maxRetries: 0 }`,
        '',
      ].join('\n'),
    );
    child = (await spawnDaemonProcess(configPath, stateDir)).child;
  }, 180_000);

  afterAll(async () => {
    child?.kill('SIGTERM');
    await new Promise((resolve) => (child?.exitCode === null ? child.once('exit', resolve) : resolve(null)));
    await model?.close();
    await rm(directory, { recursive: true, force: true });
  });

  it('scores the terminal tasks 1 with the oracle and 0 with a no-op, leaving no sandbox', async () => {
    for (const [harness, expected] of [
      ['oracle', 1],
      ['noop', 0],
    ] as const) {
      const output = join(directory, `${harness}.jsonl`);
      const run = await gym(
        ['eval', 'run', '--env', 'terminal', '--harness', harness, '--output', output, '--concurrency', '2'],
        stateDir,
      );
      expect(run.code, run.stderr).toBe(0);
      const rollouts = await readJsonl(output);
      expect(rollouts).toHaveLength(8);
      expect(rollouts.map((row) => [row.id, gymFields(row).outcome, row.reward])).toEqual(
        rollouts.map((row) => [row.id, 'reward', expected]),
      );
    }
    const left = await gym(['sandbox', 'ls', '--json'], stateDir);
    expect(left.code, left.stderr).toBe(0);
    expect(JSON.parse(left.stdout)).toEqual([]);
  }, 300_000);

  it('runs the mini-swe harness through the gateway with its sessions falling back to one-shot', async () => {
    const input = join(directory, 'one-task.jsonl');
    const rows = (
      await readFile(join(import.meta.dirname, '../../environments/terminal/data/example.jsonl'), 'utf8')
    )
      .split('\n')
      .filter((line) => line.includes('"count-errors"'));
    await writeFile(input, `${rows.join('\n')}\n`);
    const output = join(directory, 'mini-swe.jsonl');
    const run = await gym(
      ['eval', 'run', '--env', 'terminal', '--input', input, '--harness', 'mini-swe', '--output', output],
      stateDir,
    );
    expect(run.code, run.stderr).toBe(0);
    const [rollout] = await readJsonl(output);
    expect(rollout).toMatchObject({ id: 'count-errors', _gym: { outcome: 'reward' }, reward: 1 });
    expect((gymFields(rollout!).model_calls as unknown[]).length).toBe(2);
  }, 120_000);
});
