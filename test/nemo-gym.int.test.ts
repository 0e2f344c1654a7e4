/**
 * Our NeMo Gym provider under the real NeMo Gym (0.7.0 from PyPI, the `nemo-gym` framework runtime
 * set-up makes): the provider's tests in `python/tests` that need NeMo Gym run with that runtime's
 * Python against a real daemon on Docker. NeMo Gym's own registry finds the provider by its entry
 * point, its `resolve_provider_config` reads the `sandbox:` block, and its `AsyncSandbox`/`Sandbox`
 * facades drive it; one of its own resources servers (Terminal-Bench 2.1's) verifies a task in our
 * sandbox. Every test must pass and none be skipped; a missing runtime is a failure, not a skip.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readRuntimeManifest } from '../harnesses/installed/python-runtime.ts';
import { collectProcess } from './collect-process.ts';
import { startTestDaemon, type TestDaemon } from './daemon-harness.ts';
import { dockerTestEnvironment, removeNamespaceContainers, testImage } from './docker-available.ts';
import { FRAMEWORK_RUNTIMES, frameworkRuntimeDir } from './frameworks/runtimes.ts';
import { relayBinaryForTests } from './relay-binary.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';
// Terminal-Bench's resources server runs its commands with bash.
const debian = skipReason === undefined ? await testImage(docker, 'debian-base') : 'gym/debian-base:missing';
const RUNTIME = frameworkRuntimeDir('nemo-gym');
const VERSION = FRAMEWORK_RUNTIMES.find((source) => source.name === 'nemo-gym')!.version;
/** The files whose tests need NeMo Gym, and how many tests they hold at least. */
const NEMO_TESTS = [
  'python/tests/test_nemo_provider.py',
  'python/tests/test_nemo_gym_resources_server.py',
  'python/tests/test_nemo_without_nemo_gym.py',
  'python/tests/test_nemo_pty.py',
];
const MIN_NEMO_TESTS = 23;

const run = collectProcess;

describe.skipIf(skipReason !== undefined)('the NeMo Gym provider under the real NeMo Gym', () => {
  const namespace = `nemo-${randomBytes(4).toString('hex')}`;
  const runId = randomBytes(4).toString('hex');
  let daemon: TestDaemon;

  beforeAll(async () => {
    // set-up step 7 made it (scripts/framework-runtimes.ts).
    expect(
      await readRuntimeManifest(RUNTIME),
      `no NeMo Gym runtime at ${RUNTIME}: run scripts/with-node.sh node scripts/framework-runtimes.ts nemo-gym`,
    ).not.toBeNull();
    daemon = await startTestDaemon(
      {
        namespace,
        destroyOnShutdown: true,
        // A relay as new as its source (declared ports need its connect mode).
        providers: [{ name: 'docker', options: { relayHelperPath: relayBinaryForTests() } }],
      },
      { listen: true },
    );
  });

  afterAll(async () => {
    await daemon?.cleanup();
    await removeNamespaceContainers(docker, namespace);
  });

  it('passes the provider tests with every test run', { timeout: 480_000 }, async () => {
    const { code, output } = await run(
      join(RUNTIME, 'bin', 'python'),
      // -B: the runtime's Python runs isolated (-I), so PYTHONDONTWRITEBYTECODE does not reach it.
      ['-B', '-m', 'pytest', ...NEMO_TESTS, '-q', '-p', 'no:cacheprovider', '-rfEs'],
      {
        ...process.env,
        GYM_STATE_DIR: daemon.stateDir,
        GYM_TEST_IMAGE: busybox,
        GYM_TEST_BASH_IMAGE: debian,
        GYM_TEST_RUN: runId,
        // The suite checks that this installed distribution is the NeMo Gym it drives.
        GYM_TEST_NEMO_GYM_VERSION: VERSION,
        PYTHONDONTWRITEBYTECODE: '1',
      },
    );
    const summary = output.trim().split('\n').at(-1) ?? '';
    expect(code, output).toBe(0);
    expect(summary, output).not.toMatch(/failed|skipped|error|xfail/);
    expect(Number(/(\d+) passed/.exec(summary)?.[1] ?? 0), output).toBeGreaterThanOrEqual(MIN_NEMO_TESTS);
  });
});
