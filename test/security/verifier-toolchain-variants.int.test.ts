/**
 * Issue 19, finding 9, variants of the toolchain attacks: python finds a module by its import path
 * in order (the script's or working folder, the standard library's zip and folder, then the site
 * folders), so a module the agent adds earlier on that path under a name the test runner imports
 * replaces the image's own without changing any of its files. Each attack here makes
 * `python3 -m pytest` exit 0 with the answer never written; each must end reward 0, graded, with
 * the reason "verifier toolchain tampered".
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { type HarborTestRun, verifyScript } from '../../environments/verifiers/script.ts';
import type { Verdict } from '../../environments/verifiers/verifier.ts';
import { clientSandboxHandle } from '../../harnesses/sandbox-handle.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const image = skipReason === undefined ? await testImage(docker, 'debian-base') : 'missing';

/** What the planted module does: end the python process at once, with status 0. */
const QUIT = 'import os; os._exit(0)';

describe.skipIf(skipReason !== undefined)(
  'the toolchain check against modules planted earlier on python’s path',
  () => {
    let daemon: TestDaemon;
    let client: GymClient;
    let tests = '';
    const harbor: HarborTestRun = { workdir: '/app', env: {} };

    beforeAll(async () => {
      daemon = await startTestDaemon(
        { namespace: `toolchain-variants-${Math.random().toString(36).slice(2, 8)}` },
        { listen: true },
      );
      client = new GymClient({ url: daemon.address.url!, token: daemon.token });
      tests = await mkdtemp(join(tmpdir(), 'gym-toolchain-variants-'));
      await writeFile(
        join(tests, 'test.sh'),
        '#!/bin/bash\nmkdir -p /logs/verifier\nif python3 -m pytest -q -p no:cacheprovider /tests/test_answer.py; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n',
      );
      await writeFile(
        join(tests, 'test_answer.py'),
        'def test_answer():\n    assert open("/app/answer.txt").read().strip() == "42"\n',
      );
    }, 180_000);

    afterAll(async () => {
      await daemon?.cleanup();
      await rm(tests, { recursive: true, force: true });
    });

    async function graded(attack: string): Promise<Verdict> {
      const sandbox = await client.createSandbox({ image, ttlSeconds: 300 });
      try {
        const handle = clientSandboxHandle(client, sandbox.id);
        const ran = await handle.exec({
          command: `mkdir -p /app && ${attack}`,
          user: '0',
          timeoutMs: 60_000,
        });
        expect(ran, `${ran.stdout}${ran.stderr}`).toMatchObject({ status: 'ok', exitCode: 0 });
        return await verifyScript(handle, tests, 60_000, harbor);
      } finally {
        await client.destroySandbox(sandbox.id).catch(() => {});
      }
    }

    const expectTampered = (verdict: Verdict, path: string) => {
      expect(verdict, JSON.stringify(verdict.details)).toMatchObject({ outcome: 'reward', reward: 0 });
      expect(String(verdict.details.reason)).toContain('verifier toolchain tampered');
      expect(verdict.details.tamperedPaths).toContain(path);
    };

    it('still scores an honest agent 1, with its own modules in its working folder', {
      timeout: 120_000,
    }, async () => {
      const verdict = await graded(
        "echo 42 > /app/answer.txt && echo 'x = 1' > /app/solution.py && mkdir -p /app/mypkg && touch /app/mypkg/__init__.py",
      );
      expect(verdict, JSON.stringify(verdict.details)).toMatchObject({ outcome: 'reward', reward: 1 });
    });

    it('scores 0 for a pytest.py in the working folder (python -m puts it first)', {
      timeout: 120_000,
    }, async () => {
      expectTampered(await graded(`echo '${QUIT}' > /app/pytest.py`), '/app/pytest.py');
    });

    it('scores 0 for a standard module pytest imports, shadowed from the working folder', {
      timeout: 120_000,
    }, async () => {
      expectTampered(await graded(`echo '${QUIT}' > /app/argparse.py`), '/app/argparse.py');
    });

    it("scores 0 for a pytest added to the standard library's folder, before the site folders", {
      timeout: 120_000,
    }, async () => {
      expectTampered(
        await graded(`echo '${QUIT}' > /usr/lib/python3.11/pytest.py`),
        '/usr/lib/python3.11/pytest.py',
      );
    });

    it('scores 0 for a pytest added to an earlier site folder than the image’s', {
      timeout: 120_000,
    }, async () => {
      expectTampered(
        await graded(
          `mkdir -p /usr/local/lib/python3.11/dist-packages && echo '${QUIT}' > /usr/local/lib/python3.11/dist-packages/pytest.py`,
        ),
        '/usr/local/lib/python3.11/dist-packages/pytest.py',
      );
    });

    it('scores 0 for a .pth whose code line python reads after a bare carriage return', {
      timeout: 120_000,
    }, async () => {
      expectTampered(
        await graded(`printf '/nowhere\\r${QUIT}\\r' > /usr/lib/python3/dist-packages/zz-cr.pth`),
        '/usr/lib/python3/dist-packages/zz-cr.pth',
      );
    });

    it('scores 0 for a pytest plugin declared in a folder a plain .pth line adds', {
      timeout: 120_000,
    }, async () => {
      expectTampered(
        await graded(
          [
            'mkdir -p /opt/evil/evil-1.0.dist-info',
            "printf '[pytest11]\\nevil = evilplugin\\n' > /opt/evil/evil-1.0.dist-info/entry_points.txt",
            "printf 'Metadata-Version: 2.1\\nName: evil\\nVersion: 1.0\\n' > /opt/evil/evil-1.0.dist-info/METADATA",
            `echo '${QUIT}' > /opt/evil/evilplugin.py`,
            'echo /opt/evil > /usr/lib/python3/dist-packages/evil.pth',
          ].join(' && '),
        ),
        '/opt/evil/evil-1.0.dist-info/entry_points.txt',
      );
    });

    it("scores 0 for a pytest in a folder a .pth adds before the image's site folder", {
      timeout: 120_000,
    }, async () => {
      expectTampered(
        await graded(
          `mkdir -p /opt/early /usr/local/lib/python3.11/dist-packages && echo '${QUIT}' > /opt/early/pytest.py && echo /opt/early > /usr/local/lib/python3.11/dist-packages/early.pth`,
        ),
        '/opt/early/pytest.py',
      );
    });

    it("scores 0 for a standard library zip the image lacks, first on python's path", {
      timeout: 120_000,
    }, async () => {
      expectTampered(
        await graded(
          `python3 -c "import zipfile; z = zipfile.ZipFile('/usr/lib/python311.zip', 'w'); z.writestr('pytest.py', '${QUIT}'); z.close()"`,
        ),
        '/usr/lib/python311.zip',
      );
    });
  },
);
