/**
 * Issue 9, item 10: an agent's background process must not rewrite the reward. A loop left
 * behind by the "agent" keeps writing 1 into the reward file; the task's test writes 0. The script
 * verifier must stop every agent process before the tests and again before it reads the reward.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { verifyScript } from '../../environments/verifiers/script.ts';
import type { SandboxHandle } from '../../harnesses/harness.ts';
import { clientSandboxHandle } from '../../harnesses/sandbox-handle.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const image = skipReason === undefined ? await testImage(docker, 'busybox') : 'missing';

/** What an agent leaves behind: a loop that writes reward 1 every 20 ms, detached from its exec. */
const REWARD_REWRITER =
  "setsid sh -c 'while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; sleep 0.02; done' >/dev/null 2>&1 &";

describe.skipIf(skipReason !== undefined)('the script verifier against agent processes', () => {
  let daemon: TestDaemon;
  let client: GymClient;
  let testsDirectory = '';

  beforeAll(async () => {
    daemon = await startTestDaemon(
      { namespace: `verifier-${Math.random().toString(36).slice(2, 8)}` },
      { listen: true },
    );
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
    testsDirectory = await mkdtemp(join(tmpdir(), 'gym-verifier-test-'));
    // The test writes 0, then gives a rewriter time to strike before the verifier reads it.
    await writeFile(
      join(testsDirectory, 'test.sh'),
      'mkdir -p /logs/verifier; echo 0 > /logs/verifier/reward.txt; sleep 0.5\n',
    );
  }, 120_000);

  afterAll(async () => {
    await daemon?.cleanup();
    await rm(testsDirectory, { recursive: true, force: true });
  });

  it('scores 0 when a background loop of the agent keeps writing reward 1', { timeout: 60_000 }, async () => {
    const sandbox = await client.createSandbox({ image, ttlSeconds: 300 });
    try {
      const handle = clientSandboxHandle(client, sandbox.id);
      const started = await handle.exec({ command: REWARD_REWRITER, timeoutMs: 10_000 });
      expect(started).toMatchObject({ status: 'ok', exitCode: 0 });
      const verdict = await verifyScript(handle, testsDirectory, 30_000);
      expect(verdict, JSON.stringify(verdict.details)).toMatchObject({ outcome: 'reward', reward: 0 });
      // The sandbox's keeper survived: it still runs commands.
      expect(await handle.exec({ argv: ['echo', 'alive'] })).toMatchObject({
        status: 'ok',
        stdout: 'alive\n',
      });
    } finally {
      await client.destroySandbox(sandbox.id).catch(() => {});
    }
  });

  it('grades, not infra, when the agent planted /tests as a file and /logs as a link (and follows no link)', {
    timeout: 60_000,
  }, async () => {
    const sandbox = await client.createSandbox({ image, ttlSeconds: 300 });
    try {
      const handle = clientSandboxHandle(client, sandbox.id);
      const planted = await handle.exec({
        command:
          'mkdir -p /keep/verifier && echo mine > /keep/verifier/x && ln -s /keep /logs && echo x > /tests',
        timeoutMs: 10_000,
      });
      expect(planted).toMatchObject({ status: 'ok', exitCode: 0 });
      const verdict = await verifyScript(handle, testsDirectory, 30_000);
      // The test ran and its own reward file was read (a reason would say it was not).
      expect(verdict, JSON.stringify(verdict.details)).toMatchObject({ outcome: 'reward', reward: 0 });
      expect(verdict.details.reason).toBeUndefined();
      // What the link pointed to was not removed through it.
      expect(await handle.exec({ argv: ['cat', '/keep/verifier/x'] })).toMatchObject({ stdout: 'mine\n' });
    } finally {
      await client.destroySandbox(sandbox.id).catch(() => {});
    }
  });

  it('is an infra error, never a reward, when the sandbox cannot stop its processes', async () => {
    const sandbox = await client.createSandbox({ image, ttlSeconds: 300 });
    try {
      const { stopProcesses: _dropped, ...handle }: SandboxHandle = clientSandboxHandle(client, sandbox.id);
      const verdict = await verifyScript(handle, testsDirectory, 30_000);
      expect(verdict.outcome).toBe('infra_error');
      expect(String(verdict.details.reason)).toMatch(/stop/);
    } finally {
      await client.destroySandbox(sandbox.id).catch(() => {});
    }
  });
});
