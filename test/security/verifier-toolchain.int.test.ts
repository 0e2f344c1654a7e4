/**
 * Issue 19, finding 9: a script verifier runs test.sh with the sandbox's own `sh`, `bash` and
 * `python3`, which a root agent can replace. Each attack here forges reward 1 on a verifier that
 * trusts them (the task's answer is never written); with the toolchain check each ends reward 0,
 * graded, with the reason "verifier toolchain tampered". An honest agent that installs things
 * still scores 1, and the check itself never runs anything in the sandbox.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { type HarborTestRun, verifyScript } from '../../environments/verifiers/script.ts';
import type { Verdict } from '../../environments/verifiers/verifier.ts';
import type { SandboxHandle } from '../../harnesses/harness.ts';
import { clientSandboxHandle } from '../../harnesses/sandbox-handle.ts';
import { overlayChanges, overlayFolders } from '../../providers/docker/overlay-changes.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const image = skipReason === undefined ? await testImage(docker, 'debian-base') : 'missing';

/** Reward 1 only when the agent wrote the answer; python3 judges it. */
const TEST_BODY = `mkdir -p /logs/verifier
if python3 -c 'import sys; sys.exit(0 if open("/app/answer.txt").read().strip() == "42" else 1)'; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
`;

const FORGE = 'mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt';

/** A preload library that writes reward 1 and ends every program at once, with raw syscalls only. */
const PRELOAD_SOURCE = `
static long sys(long n, long a, long b, long c) {
  long r; __asm__ volatile ("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory"); return r;
}
__attribute__((constructor)) static void forge(void) {
  sys(83, (long)"/logs", 0755, 0); sys(83, (long)"/logs/verifier", 0755, 0);
  long fd = sys(2, (long)"/logs/verifier/reward.txt", 01101, 0644);
  if (fd >= 0) sys(1, fd, (long)"1\\n", 2);
  sys(231, 0, 0, 0);
}
`;

describe.skipIf(skipReason !== undefined)('the script verifier against a tampered toolchain', () => {
  let daemon: TestDaemon;
  let client: GymClient;
  let scriptTests = '';
  let harborTests = '';
  let pytestTests = '';
  let preload: Buffer | null = null;
  const harbor: HarborTestRun = { workdir: '/', env: {} };

  beforeAll(async () => {
    daemon = await startTestDaemon(
      { namespace: `toolchain-${Math.random().toString(36).slice(2, 8)}` },
      { listen: true },
    );
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
    scriptTests = await mkdtemp(join(tmpdir(), 'gym-toolchain-script-'));
    await writeFile(join(scriptTests, 'test.sh'), TEST_BODY);
    harborTests = await mkdtemp(join(tmpdir(), 'gym-toolchain-harbor-'));
    await writeFile(join(harborTests, 'test.sh'), `#!/bin/bash\n${TEST_BODY}`);
    pytestTests = await mkdtemp(join(tmpdir(), 'gym-toolchain-pytest-'));
    await writeFile(
      join(pytestTests, 'test.sh'),
      '#!/bin/bash\nmkdir -p /logs/verifier\nif python3 -m pytest -q -p no:cacheprovider /tests/test_answer.py; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n',
    );
    await writeFile(
      join(pytestTests, 'test_answer.py'),
      'def test_answer():\n    assert open("/app/answer.txt").read().strip() == "42"\n',
    );
    try {
      const source = join(harborTests, '..', `${Math.random().toString(36).slice(2)}-forge.c`);
      const library = `${source}.so`;
      await writeFile(source, PRELOAD_SOURCE);
      execFileSync('cc', ['-shared', '-fPIC', '-nostdlib', '-O1', '-o', library, source]);
      preload = await readFile(library);
      await rm(source, { force: true });
      await rm(library, { force: true });
    } catch {
      preload = null;
    }
  }, 180_000);

  afterAll(async () => {
    await daemon?.cleanup();
    await rm(scriptTests, { recursive: true, force: true });
    await rm(harborTests, { recursive: true, force: true });
    await rm(pytestTests, { recursive: true, force: true });
  });

  /** A sandbox whose agent ran `attack` as root, graded by the script or Harbor verifier. */
  async function graded(
    attack: string,
    mode: 'script' | 'harbor' | 'pytest',
    files: Record<string, Buffer> = {},
  ): Promise<Verdict> {
    const sandbox = await client.createSandbox({ image, ttlSeconds: 300 });
    try {
      const handle: SandboxHandle = clientSandboxHandle(client, sandbox.id);
      for (const [path, content] of Object.entries(files)) await handle.writeFile(path, content, 0o755);
      const ran = await handle.exec({ command: attack, user: '0', timeoutMs: 60_000 });
      expect(ran, `${ran.stdout}${ran.stderr}`).toMatchObject({ status: 'ok', exitCode: 0 });
      return await verifyScript(
        handle,
        { script: scriptTests, harbor: harborTests, pytest: pytestTests }[mode],
        60_000,
        mode === 'script' ? undefined : harbor,
      );
    } finally {
      await client.destroySandbox(sandbox.id).catch(() => {});
    }
  }

  const expectTampered = (verdict: Verdict, path: string) => {
    expect(verdict, JSON.stringify(verdict.details)).toMatchObject({ outcome: 'reward', reward: 0 });
    expect(String(verdict.details.reason)).toContain('verifier toolchain tampered');
    expect(verdict.details.tamperedPaths).toContain(path);
  };

  it('scores an honest agent 1, with its installs, touches and ldconfig', { timeout: 120_000 }, async () => {
    const verdict = await graded(
      [
        'mkdir -p /app && echo 42 > /app/answer.txt',
        // What installs do: new programs and libraries, packages in the site folders, a rebuilt
        // loader cache, an unchanged file touched.
        "printf '#!/bin/sh\\necho tool\\n' > /usr/local/bin/mytool && chmod 755 /usr/local/bin/mytool",
        'mkdir -p /usr/local/lib/python3.11/dist-packages/somepkg && echo "x = 1" > /usr/local/lib/python3.11/dist-packages/somepkg/__init__.py',
        'echo /opt/mylib > /usr/local/lib/python3.11/dist-packages/somepkg.pth',
        'mkdir -p /opt/mylib && echo /opt/mylib > /etc/ld.so.conf.d/mylib.conf && ldconfig',
        'touch /usr/bin/python3.11',
      ].join(' && '),
      'harbor',
    );
    expect(verdict, JSON.stringify(verdict.details)).toMatchObject({ outcome: 'reward', reward: 1 });
    expect(verdict.details.toolchainCheck).toBe('passed');
  });

  it('scores 0 when the agent replaced /bin/sh with a script that writes reward 1 (script kind)', {
    timeout: 120_000,
  }, async () => {
    const verdict = await graded(
      `printf '#!/bin/bash\\n${FORGE}\\n' > /tmp/sh && chmod 755 /tmp/sh && mv /tmp/sh /usr/bin/sh`,
      'script',
    );
    expectTampered(verdict, '/usr/bin/sh');
  });

  it("scores 0 when the agent replaced /bin/bash, the test's shebang (Harbor)", {
    timeout: 120_000,
  }, async () => {
    const verdict = await graded(
      `printf '#!/usr/bin/dash\\n${FORGE}\\n' > /tmp/b && cp /tmp/b /usr/bin/bash`,
      'harbor',
    );
    expectTampered(verdict, '/usr/bin/bash');
  });

  it('scores 0 when the agent put a python3 that exits 0 earlier on the PATH', {
    timeout: 120_000,
  }, async () => {
    const verdict = await graded(
      "printf '#!/bin/sh\\nexit 0\\n' > /usr/local/bin/python3 && chmod 755 /usr/local/bin/python3",
      'harbor',
    );
    expectTampered(verdict, '/usr/local/bin/python3');
  });

  it('scores 0 when a .pth file makes every python exit 0 at start', { timeout: 120_000 }, async () => {
    const verdict = await graded(
      "echo 'import os; os._exit(0)' > /usr/lib/python3/dist-packages/zz-quick.pth",
      'script',
    );
    expectTampered(verdict, '/usr/lib/python3/dist-packages/zz-quick.pth');
  });

  it("scores 0 when the agent edited Debian's sitecustomize (outside the system trees)", {
    timeout: 120_000,
  }, async () => {
    const verdict = await graded(
      "printf 'import os\\nos._exit(0)\\n' >> /etc/python3.11/sitecustomize.py",
      'harbor',
    );
    expectTampered(verdict, '/etc/python3.11/sitecustomize.py');
  });

  it("scores a pytest task's honest agent 1", { timeout: 120_000 }, async () => {
    const verdict = await graded('mkdir -p /app && echo 42 > /app/answer.txt', 'pytest');
    expect(verdict, JSON.stringify(verdict.details)).toMatchObject({ outcome: 'reward', reward: 1 });
  });

  it("scores 0 when the agent edited the image's pytest to end every run passed", {
    timeout: 120_000,
  }, async () => {
    const verdict = await graded(
      'echo "import os; os._exit(0)" >> /usr/lib/python3/dist-packages/_pytest/__init__.py',
      'pytest',
    );
    expectTampered(verdict, '/usr/lib/python3/dist-packages/_pytest/__init__.py');
  });

  it('scores 0 when the agent planted a pytest configuration and conftest above /tests', {
    timeout: 120_000,
  }, async () => {
    const verdict = await graded(
      "printf '[pytest]\\n' > /pytest.ini && printf 'import os\\nos._exit(0)\\n' > /conftest.py",
      'pytest',
    );
    expectTampered(verdict, '/conftest.py');
    expectTampered(verdict, '/pytest.ini');
  });

  it('scores 0 when /etc/ld.so.preload loads a library that writes reward 1', {
    timeout: 120_000,
  }, async (context) => {
    if (preload === null) context.skip();
    const verdict = await graded('echo /usr/local/lib/forge.so > /etc/ld.so.preload', 'harbor', {
      '/usr/local/lib/forge.so': preload!,
    });
    expectTampered(verdict, '/etc/ld.so.preload');
  });

  it('checks from outside: nothing runs in the sandbox, even with its programs gone', {
    timeout: 120_000,
  }, async () => {
    const sandbox = await client.createSandbox({ image, ttlSeconds: 300 });
    try {
      const handle = clientSandboxHandle(client, sandbox.id);
      // The agent removes every program; a check that ran anything in the sandbox could not answer.
      await handle.exec({ command: 'rm -rf /usr/bin/* /usr/sbin/*', user: '0', timeoutMs: 60_000 });
      await handle.stopProcesses!();
      const execsBefore = await execCount(client);
      const result = await client.checkToolchain(sandbox.id, { tools: ['python3'] });
      expect(await execCount(client)).toBe(execsBefore);
      const paths = result.tampered.map((finding) => finding.path);
      expect(paths).toContain('/usr/bin/bash');
      expect(paths).toContain('/usr/bin/python3');
      expect(result.tampered.find((finding) => finding.path === '/usr/bin/bash')?.change).toBe('removed');
    } finally {
      await client.destroySandbox(sandbox.id).catch(() => {});
    }
  });
});

describe.skipIf(skipReason !== undefined)("the host's reading of a container's overlay folders", () => {
  it("lists what the engine's own change list does", { timeout: 120_000 }, async (context) => {
    // Only a daemon run as root beside the engine reads the folders; elsewhere the engine's list is used.
    if (process.getuid?.() !== 0) context.skip();
    const container = await docker.createContainer({
      Image: image,
      Entrypoint: ['sleep', '120'],
      Labels: { 'gym.test': 'overlay-changes' },
      HostConfig: { NetworkMode: 'none' },
    });
    try {
      await container.start();
      const run = await container.exec({
        Cmd: [
          'sh',
          '-c',
          'rm /usr/bin/grep; echo x >> /usr/bin/env; touch /usr/bin/bash; mkdir -p /new/deep && echo y > /new/deep/f; ' +
            'rm -rf /usr/local/share && mkdir /usr/local/share && echo z > /usr/local/share/f; ln -s /tmp /usr/local/bin/l',
        ],
        AttachStdout: true,
        AttachStderr: true,
      });
      const stream = await run.start({});
      await new Promise((resolve) => stream.on('end', resolve).resume());
      const info = await container.inspect();
      const folders = await overlayFolders(info.GraphDriver);
      expect(folders).not.toBeNull();
      // The whole tree as scope: the same list the engine gives.
      const ours = (await overlayChanges(folders!, { trees: ['/'], folders: [], paths: [] }, 100_000)) ?? [];
      const raw = await container.changes();
      const engine = JSON.parse(Buffer.isBuffer(raw) ? raw.toString() : JSON.stringify(raw)) as Array<{
        Path: string;
        Kind: number;
      }>;
      const kinds = ['modified', 'added', 'removed'];
      // The engine leaves out folders whose own metadata did not change; every other entry matches.
      const engineSet = new Set(engine.map((entry) => `${kinds[entry.Kind]} ${entry.Path}`));
      const oursSet = new Set(ours.map((entry) => `${entry.change} ${entry.path}`));
      for (const entry of engineSet) expect(oursSet).toContain(entry);
      for (const entry of oursSet) if (!entry.startsWith('modified ')) expect(engineSet).toContain(entry);
      expect(oursSet).toContain('removed /usr/bin/grep');
      expect(oursSet).toContain('removed /usr/local/share/man');
      expect(oursSet).toContain('added /usr/local/bin/l');
    } finally {
      await container.remove({ force: true }).catch(() => {});
    }
  });
});

/** Every exec the daemon ran, whatever its provider, status or mode. */
async function execCount(client: GymClient): Promise<number> {
  const text = await client.metrics();
  return text
    .split('\n')
    .filter((line) => line.startsWith('gym_exec_seconds_count'))
    .reduce((sum, line) => sum + Number(line.split(' ').pop()), 0);
}
