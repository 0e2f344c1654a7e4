/**
 * Multi-container tasks end to end against real Docker: a Terminal-Bench task whose
 * docker-compose.yaml puts a server beside the agent's client (the tests ask it by name), and a
 * Harbor task whose MCP server is a Compose service and whose [environment.healthcheck] gates the
 * agent. The oracle scores 1 and a do-nothing agent 0; a service that never becomes healthy fails
 * the rollout with its name, and nothing of any group is left behind.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../../client/client.ts';
import { silentLogger } from '../../../core/logger.ts';
import { SERVICE_LABEL } from '../../../providers/docker/service-group.ts';
import { startTestDaemon, type TestDaemon } from '../../../test/daemon-harness.ts';
import { dockerTestEnvironment, removeImagesTagged, testImage } from '../../../test/docker-available.ts';
import { runTestEval } from '../../../test/eval-run.ts';
import { harborTask, terminalBenchTask } from '../../../test/fixtures/compose-tasks.ts';
import { loadEnvironment, readRows } from '../../environment.ts';
import { gymFields } from '../../runner/rollout-line.ts';

const { docker, skipReason } = await dockerTestEnvironment();

describe.skipIf(skipReason !== undefined)('multi-container tasks against real Docker', () => {
  let daemon: TestDaemon;
  let client: GymClient;
  let directory = '';
  const namespace = `compose-${randomBytes(3).toString('hex')}`;

  beforeAll(async () => {
    await testImage(docker, 'busybox');
    await testImage(docker, 'debian-base');
    directory = await mkdtemp(join(tmpdir(), 'gym-compose-'));
    daemon = await startTestDaemon({ namespace }, { listen: true });
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
  }, 300_000);

  afterAll(async () => {
    await daemon?.cleanup();
    await removeImagesTagged(docker, /^gym\/harbor-(gym-compose-|terminal-bench-compose-|compose-)/);
    await rm(directory, { recursive: true, force: true });
  });

  async function run(path: string, harnessName: string) {
    const environment = await loadEnvironment('harbor');
    const rows = await readRows(path);
    await environment.implementation.prepareImages!({ client, environment, rows, logger: silentLogger });
    const { rollouts, failures } = await runTestEval({ client, environment, rows, harnessName, directory });
    return { rollouts, failures };
  }

  /** Why a rollout failed (an infra error keeps its reason with the verifier's fields). */
  const reasonOf = (line: Record<string, unknown>) => [
    gymFields(line).outcome,
    String((gymFields(line).verifier as { reason?: unknown } | undefined)?.reason),
  ];

  /** Service containers of this daemon's namespace still there. */
  const leftServices = async () =>
    (
      await docker.listContainers({
        all: true,
        filters: { label: [SERVICE_LABEL, `gym.namespace=${namespace}`] },
      })
    ).length;

  it('runs a Terminal-Bench task with a server beside its client: the oracle scores 1, noop 0, a server never healthy is its failure', async () => {
    const root = join(directory, 'terminal-bench');
    const tag = randomBytes(4).toString('hex');
    await terminalBenchTask(root, `compose-${tag}-served`, `s3cret-${tag}`);
    await terminalBenchTask(root, `compose-${tag}-sick`, `s3cret-${tag}`, 'exit 1');
    const oracle = await run(root, 'oracle');
    expect(oracle.rollouts.map((row) => [row.id, gymFields(row).outcome, row.reward])).toEqual([
      [`compose-${tag}-served`, 'reward', 1],
    ]);
    // The task's fault, not an outage: a task error, no reward, not retried.
    expect(oracle.failures.map((row) => [row.task_dir, ...reasonOf(row)])).toEqual([
      [
        expect.stringMatching(/compose-\w+-sick$/),
        'task_error',
        expect.stringMatching(/service db is unhealthy: its health check failed its retries/),
      ],
    ]);
    const noop = await run(join(root, `compose-${tag}-served`), 'noop');
    expect(noop.rollouts.map((row) => [row.id, gymFields(row).outcome, row.reward])).toEqual([
      [`compose-${tag}-served`, 'reward', 0],
    ]);
    expect(await leftServices()).toBe(0);
  }, 900_000);

  it('runs a Harbor task whose MCP server is a Compose service, behind its health check: the oracle scores 1, noop 0', async () => {
    const root = join(directory, 'harbor');
    const tag = randomBytes(4).toString('hex');
    await harborTask(
      root,
      `compose-${tag}-mcp`,
      `mcp-${tag}`,
      'wget -q -O /dev/null http://mcp:8000/health && touch /tmp/healthchecked',
    );
    const [row] = await readRows(join(root, `compose-${tag}-mcp`));
    expect(row?.mcp_servers).toEqual([
      expect.objectContaining({ name: 'lookup', transport: 'streamable-http', url: 'http://mcp:8000/mcp' }),
    ]);
    const oracle = await run(root, 'oracle');
    expect(oracle.failures).toEqual([]);
    expect(oracle.rollouts.map((line) => [line.id, gymFields(line).outcome, line.reward])).toEqual([
      [`gym/compose-${tag}-mcp`, 'reward', 1],
    ]);
    const noop = await run(root, 'noop');
    expect(noop.rollouts.map((line) => [line.id, gymFields(line).outcome, line.reward])).toEqual([
      [`gym/compose-${tag}-mcp`, 'reward', 0],
    ]);
    expect(await leftServices()).toBe(0);
  }, 900_000);

  it('fails a Harbor task whose health check never passes, naming it, before any agent runs', async () => {
    const root = join(directory, 'harbor-sick');
    const tag = randomBytes(4).toString('hex');
    const task = await harborTask(root, `compose-${tag}-sick`, `mcp-${tag}`, 'test -e /tmp/never');
    // No start period: three failures in a row end it.
    const toml = join(task, 'task.toml');
    await writeFile(
      toml,
      (await readFile(toml, 'utf8')).replace('start_period_sec = 60', 'start_period_sec = 0'),
    );
    const { rollouts, failures } = await run(root, 'oracle');
    expect(rollouts).toEqual([]);
    expect(failures.map(reasonOf)).toEqual([
      [
        'task_error',
        expect.stringMatching(
          /\[environment\.healthcheck\] failed 3 times in a row \(exit 1\): test -e \/tmp\/never/,
        ),
      ],
    ]);
    expect(await leftServices()).toBe(0);
  }, 900_000);
});
