/**
 * `gym eval run`, unchanged, against a daemon whose only provider is an SSH runtime (a row of
 * `ssh-runtimes.ts`: a real sshd, the runtime's stand-in): the swe-mini task image is made on the
 * host as a derived image from the Debian base, and the oracle scores 1, a no-op 0; the mini-swe
 * harness with the scripted model (through the daemon's gateway, by the relay in the sandbox;
 * commands in a session) scores the terminal task 1, as on Docker. Docker only exports the base's
 * root filesystem in the set-up (the builder would take a minute of debootstrap); the node puts it
 * in the runtime's format (a sandbox directory, a `.sqsh`).
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
import { runGym } from '../cli-process.ts';
import { spawnDaemonProcess } from '../daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';
import { exportRootfs } from '../fixtures/export-rootfs.ts';
import { type RuntimeNode, SSH_RUNTIMES, type SshRuntimeRow } from './ssh-runtimes.ts';

/** Registers the suite for one runtime's row (each row has a test file of its own, so rows run in parallel). */
export async function describeSshRuntimeEval(runtime: SshRuntimeRow['runtime']): Promise<void> {
  const row = SSH_RUNTIMES.find((candidate) => candidate.runtime === runtime)!;
  const { docker, skipReason } = await dockerTestEnvironment();

  describe.skipIf(skipReason !== undefined)(`gym eval run on ${runtime} over ssh`, () => {
    let node: RuntimeNode;
    let directory = '';
    let stateDir = '';
    let child: ChildProcess | undefined;
    let model: ScriptedModelServer | undefined;
    const gym = (args: string[]) => runGym(args, stateDir);
    /** Nothing left: no sandbox the daemon knows, nothing the runtime lists on the node. */
    const expectNothingLeft = async () => {
      expect(JSON.parse((await gym(['sandbox', 'ls', '--json'])).stdout)).toEqual([]);
      expect(node.listed()).toEqual([]);
    };

    beforeAll(async () => {
      node = await row.node(row.evalAddress, row.evalPortBase + (process.pid % 1000));
      directory = await mkdtemp(join(tmpdir(), `gym-${runtime}-eval-`));
      stateDir = join(directory, 'state');
      await mkdir(stateDir);
      const base = await testImage(docker, 'debian-base');
      const root = join(directory, 'base-root');
      await exportRootfs(docker, base, root);
      // The terminal tasks name the base by its tag: the same image on the host.
      await node.placeImage(root, base, ['gym/debian-base:latest']);
      // The scripted model solves count-errors in one step, then submits (as in the Docker tests).
      model = await startScriptedModelServer(
        ModelScriptSchema.parse({
          conversations: [
            {
              match: 'ERROR',
              replies: [
                {
                  content: 'Count them.\n```bash\ngrep -c ERROR /app/server.log > /app/error_count.txt\n```',
                },
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
          `  - name: ${runtime}`,
          `    options: { hosts: [${JSON.stringify(node.host)}] }`,
          `gateway: { upstream: { baseUrl: ${model.baseUrl} }, maxRetries: 0 }`,
          '',
        ].join('\n'),
      );
      child = (await spawnDaemonProcess(configPath, stateDir)).child;
    }, 240_000);

    afterAll(async () => {
      child?.kill('SIGTERM');
      await new Promise((resolve) =>
        child?.exitCode === null ? child.once('exit', resolve) : resolve(null),
      );
      await model?.close();
      await node?.cleanup();
      await rm(directory, { recursive: true, force: true });
    });

    it('scores a swe-mini task 1 with the oracle and 0 with a no-op, leaving no sandbox', async () => {
      for (const [harness, expected] of [
        ['oracle', 1],
        ['noop', 0],
      ] as const) {
        const output = join(directory, `${harness}.jsonl`);
        const run = await gym([
          ...['eval', 'run', '--env', 'swe-mini', '--harness', harness, '--limit', '1'],
          ...['--output', output],
        ]);
        expect(run.code, run.stderr).toBe(0);
        const rollouts = await readJsonl(output);
        expect(
          rollouts.map((line) => [gymFields(line).outcome, line.reward]),
          JSON.stringify(rollouts.map((line) => [gymFields(line).verifier, line.response])).slice(0, 3000),
        ).toEqual([['reward', expected]]);
      }
      await expectNothingLeft();
    }, 600_000);

    it(`runs the mini-swe harness with the scripted model in a session on ${runtime}: reward 1, as on Docker`, async () => {
      const input = join(directory, 'one-task.jsonl');
      const rows = (
        await readFile(join(import.meta.dirname, '../../environments/terminal/data/example.jsonl'), 'utf8')
      )
        .split('\n')
        .filter((line) => line.includes('"count-errors"'));
      await writeFile(input, `${rows.join('\n')}\n`);
      const output = join(directory, 'mini-swe.jsonl');
      const run = await gym([
        'eval',
        'run',
        '--env',
        'terminal',
        '--input',
        input,
        '--harness',
        'mini-swe',
        '--output',
        output,
      ]);
      expect(run.code, run.stderr).toBe(0);
      const [rollout] = await readJsonl(output);
      expect(rollout).toMatchObject({ id: 'count-errors', _gym: { outcome: 'reward' }, reward: 1 });
      expect((gymFields(rollout!).model_calls as unknown[]).length).toBe(2);
      await expectNothingLeft();
    }, 300_000);
  });
}
