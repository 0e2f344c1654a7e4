/**
 * Runs the Python package's tests (`python/tests`, pytest) against real daemons: one on TCP and
 * one on a unix socket, each on a temporary state directory with the Docker provider, so the
 * client finds them as the `gym` CLI does. Python is Debian's `python3` with `python3-pytest`
 * (scripts/setup.sh installs it); the run must pass with no test skipped, and its counts are
 * checked so a suite that collected nothing fails too.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { collectProcess } from './collect-process.ts';
import { startTestDaemon, type TestDaemon } from './daemon-harness.ts';
import { dockerTestEnvironment, testImage } from './docker-available.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';
// Debian's interpreter, the one setup.sh gives python3-pytest; GYM_PYTHON picks another.
const PYTHON = process.env.GYM_PYTHON ?? (existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3');
/** Tests the Python suite holds; fewer passing means some were not collected. */
const MIN_PYTHON_TESTS = 40;

const run = collectProcess;

describe.skipIf(skipReason !== undefined)('the Python package against real daemons', () => {
  const namespace = `python-${randomBytes(4).toString('hex')}`;
  const runId = randomBytes(4).toString('hex');
  let tcp: TestDaemon;
  let unix: TestDaemon;
  let socketStateDir: string | undefined;

  beforeAll(async () => {
    tcp = await startTestDaemon({ namespace, destroyOnShutdown: true }, { listen: true });
    socketStateDir = await mkdtemp(join(tmpdir(), 'gym-python-unix-'));
    unix = await startTestDaemon(
      {
        namespace: `${namespace}-unix`,
        destroyOnShutdown: true,
        stateDir: socketStateDir,
        listen: { socket: join(socketStateDir, 'api.sock') },
      },
      { listen: true },
    );
  });

  afterAll(async () => {
    await tcp?.cleanup();
    await unix?.cleanup();
    if (socketStateDir !== undefined) await rm(socketStateDir, { recursive: true, force: true });
    for (const label of [`gym.namespace=${namespace}`, `gym.namespace=${namespace}-unix`]) {
      const containers = await docker.listContainers({ all: true, filters: { label: [label] } });
      for (const container of containers) await docker.getContainer(container.Id).remove({ force: true });
    }
    // Managed snapshots (fork's): removed by the tests; anything a failed one left goes here.
    for (const image of await docker.listImages({ filters: { reference: [`gym-snapshot/${namespace}`] } }))
      await docker
        .getImage(image.Id)
        .remove({ force: true })
        .catch(() => {});
    await docker
      .getImage(`gym-snapshot/python-test-${runId}:v1`)
      .remove({ force: true })
      .catch(() => {});
  });

  // About two minutes here with the machine lightly shared; the bound leaves room for a loaded one.
  it('passes pytest with every test run', { timeout: 480_000 }, async () => {
    const { code, output } = await run(
      PYTHON,
      ['-m', 'pytest', 'python/tests', '-q', '-p', 'no:cacheprovider', '-rfEs'],
      {
        ...process.env,
        GYM_STATE_DIR: tcp.stateDir,
        GYM_TEST_SOCKET_STATE_DIR: unix.stateDir,
        GYM_TEST_IMAGE: busybox,
        GYM_TEST_RUN: runId,
        PYTHONDONTWRITEBYTECODE: '1',
      },
    );
    const summary = output.trim().split('\n').at(-1) ?? '';
    expect(code, output).toBe(0);
    const passed = Number(/(\d+) passed/.exec(summary)?.[1] ?? 0);
    expect(summary, output).not.toMatch(/failed|skipped|error|xfail/);
    expect(passed, output).toBeGreaterThanOrEqual(MIN_PYTHON_TESTS);
  });
});
