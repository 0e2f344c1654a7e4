/**
 * `gym eval run`, unchanged, against a daemon whose only provider is apptainer over SSH (a real
 * sshd, the apptainer stand-in): the swe-mini task images are made on the host as derived images
 * from the Debian base, and the oracle scores 1, a no-op 0. Docker only exports the base's root
 * filesystem in the set-up (the builder would take a minute of debootstrap).
 */
import type { ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readJsonl } from '../../environments/runner/files.ts';
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

  beforeAll(async () => {
    node = await computeNode('127.0.0.8', 26000 + (process.pid % 1000));
    directory = await mkdtemp(join(tmpdir(), 'gym-apptainer-eval-'));
    stateDir = join(directory, 'state');
    await mkdir(stateDir);
    const base = await testImage(docker, 'debian-base');
    await exportRootfs(docker, base, join(node.workDirectory, 'images', imageFolderName(base)));
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
        '',
      ].join('\n'),
    );
    child = (await spawnDaemonProcess(configPath, stateDir)).child;
  }, 180_000);

  afterAll(async () => {
    child?.kill('SIGTERM');
    await new Promise((resolve) => (child?.exitCode === null ? child.once('exit', resolve) : resolve(null)));
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
        rollouts.map((row) => [row.outcome, row.reward]),
        JSON.stringify(rollouts.map((row) => [row.verifier, row.response])).slice(0, 3000),
      ).toEqual([['reward', expected]]);
    }
    const left = await gym(['sandbox', 'ls', '--json'], stateDir);
    expect(JSON.parse(left.stdout)).toEqual([]);
  }, 600_000);
});
