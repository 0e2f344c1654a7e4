/**
 * `gym eval run`, unchanged, against a daemon whose only provider is apptainer over SSH (a real
 * sshd, the apptainer stand-in): the swe-mini task images are made on the host as derived images
 * from the Debian base, and the oracle scores 1, a no-op 0; the mini-swe harness with the scripted
 * model (through the daemon's gateway, commands in an apptainer session) scores the terminal task
 * 1, as on Docker. Docker only exports the base's root filesystem in the set-up (the builder would
 * take a minute of debootstrap).
 */
import type { ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
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
import { exportRootfs } from '../fixtures/export-rootfs.ts';
import { computeNode } from './node.ts';

const { docker, skipReason } = await dockerTestEnvironment();

const gym = (args: string[], stateDir: string) => runGym(args, stateDir);

describe.skipIf(skipReason !== undefined)('gym eval run on apptainer over ssh', () => {
  let node: Awaited<ReturnType<typeof computeNode>>;
  let directory = '';
  let stateDir = '';
  let child: ChildProcess | undefined;
  let model: ScriptedModelServer | undefined;

  beforeAll(async () => {
    node = await computeNode('127.0.0.8', 26000 + (process.pid % 1000));
    directory = await mkdtemp(join(tmpdir(), 'gym-apptainer-eval-'));
    stateDir = join(directory, 'state');
    await mkdir(stateDir);
    const base = await testImage(docker, 'debian-base');
    await exportRootfs(docker, base, join(node.workDirectory, 'images', imageFolderName(base)));
    // The terminal tasks name the base by its tag: the same folder on the host.
    await symlink(
      imageFolderName(base),
      join(node.workDirectory, 'images', imageFolderName('gym/debian-base:latest')),
    );
    // The scripted model solves count-errors in one step, then submits (as in the Docker tests).
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
        'namespace: hpc-eval',
        'listen: { host: 127.0.0.1, port: 0 }',
        'logLevel: warn',
        'providers:',
        `  - name: apptainer`,
        `    options: { hosts: [${JSON.stringify(node.host)}] }`,
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
    await node?.cleanup();
    await rm(directory, { recursive: true, force: true });
  });

  it('scores swe-mini tasks 1 with the oracle and 0 with a no-op, leaving no sandbox', async () => {
    for (const [harness, expected] of [
      ['oracle', 1],
      ['noop', 0],
    ] as const) {
      const output = join(directory, `${harness}.jsonl`);
      const run = await gym(
        ['eval', 'run', '--env', 'swe-mini', '--harness', harness, '--limit', '1', '--output', output],
        stateDir,
      );
      expect(run.code, run.stderr).toBe(0);
      const rollouts = await readJsonl(output);
      expect(
        rollouts.map((row) => [gymFields(row).outcome, row.reward]),
        JSON.stringify(rollouts.map((row) => [gymFields(row).verifier, row.response])).slice(0, 3000),
      ).toEqual([['reward', expected]]);
    }
    const left = await gym(['sandbox', 'ls', '--json'], stateDir);
    expect(JSON.parse(left.stdout)).toEqual([]);
  }, 600_000);

  it('runs the mini-swe harness with the scripted model in an apptainer session: reward 1, as on Docker', async () => {
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
    const left = await gym(['sandbox', 'ls', '--json'], stateDir);
    expect(JSON.parse(left.stdout)).toEqual([]);
  }, 300_000);
});
