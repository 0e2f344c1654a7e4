/**
 * The converse of issue 9's item 6, on real Docker: what the agent's own code or files do to a
 * grading step is graded (reward 0 with the reason), never an infra error an agent could use to
 * have any rollout it would fail retried and then dropped.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildSweMiniImages } from '../../cli/task-images.ts';
import { GymClient } from '../../client/client.ts';
import { loadEnvironment, readRows } from '../../environments/environment.ts';
import { extractPatch, type SweTask, sweTaskFromRow, verifySwe } from '../../environments/verifiers/swe.ts';
import { clientSandboxHandle } from '../../harnesses/sandbox-handle.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { dockerTestEnvironment, localImages } from '../docker-available.ts';

const { docker, skipReason } = await dockerTestEnvironment();

/** A conftest.py that SIGKILLs the pytest that loads it. */
const SELF_KILLING_CONFTEST = [
  'diff --git a/conftest.py b/conftest.py',
  'new file mode 100644',
  '--- /dev/null',
  '+++ b/conftest.py',
  '@@ -0,0 +1,2 @@',
  '+import os, signal',
  '+os.kill(os.getpid(), signal.SIGKILL)',
  '',
].join('\n');

describe.skipIf(skipReason !== undefined)("faults the agent's code causes are graded", () => {
  let daemon: TestDaemon;
  let client: GymClient;
  let task: SweTask;
  let goldPatch = '';

  beforeAll(async () => {
    await buildSweMiniImages(localImages(docker));
    daemon = await startTestDaemon(
      { namespace: `graded-${randomBytes(3).toString('hex')}` },
      { listen: true },
    );
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
    const [row] = await readRows((await loadEnvironment('swe-mini')).dataPath);
    task = sweTaskFromRow(row!);
    goldPatch = String(row!.patch);
  }, 300_000);

  afterAll(async () => {
    await daemon?.cleanup();
  });

  it('scores 0 a patch whose conftest.py SIGKILLs pytest (the gold fix alone scores 1)', {
    timeout: 120_000,
  }, async () => {
    expect(await verifySwe(client, task, goldPatch)).toMatchObject({ outcome: 'reward', reward: 1 });
    const verdict = await verifySwe(client, task, `${goldPatch}${SELF_KILLING_CONFTEST}`);
    expect(verdict, JSON.stringify(verdict.details)).toMatchObject({ outcome: 'reward', reward: 0 });
    expect(String(verdict.details.reason)).toMatch(/killed/);
  });

  it('scores 0 an agent sandbox whose repository git cannot read (the agent removed .git)', {
    timeout: 60_000,
  }, async () => {
    const sandbox = await client.createSandbox({ image: task.image, ttlSeconds: 300 });
    try {
      const handle = clientSandboxHandle(client, sandbox.id);
      expect(await handle.exec({ command: 'rm -rf .git', cwd: task.workdir })).toMatchObject({
        status: 'ok',
        exitCode: 0,
      });
      const extracted = await extractPatch(handle, task);
      expect(extracted).toMatchObject({ verdict: { outcome: 'reward', reward: 0 } });
      expect(String('verdict' in extracted && extracted.verdict.details.reason)).toMatch(
        /^the agent's changes could not be read/,
      );
    } finally {
      await client.destroySandbox(sandbox.id).catch(() => {});
    }
  });
});
