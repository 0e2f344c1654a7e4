/**
 * Issue 24, Harbor's network per phase through the daemon's egress proxy, against real Docker: a
 * task in Harbor's published layout whose agent phase has no network and whose verifier's
 * test.sh installs its checker from a package host the task allow-lists. "The internet" is an
 * HTTP server on 127.0.0.5 that only the daemon's injected resolver names (`pkg.test`); nothing
 * leaves the host.
 */
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../../client/client.ts';
import { silentLogger } from '../../../core/logger.ts';
import { startTestDaemon, type TestDaemon } from '../../../test/daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../../../test/docker-available.ts';
import { runTestEval } from '../../../test/eval-run.ts';
import { type LoadedEnvironment, loadEnvironment, readRows } from '../../environment.ts';
import type { NetworkSummary } from '../../runner/network-records.ts';
import { gymFields } from '../../runner/rollout-line.ts';

const { docker, skipReason } = await dockerTestEnvironment();

/** The tool the verifier installs: it grades the agent's file. */
const CHECKER = `#!/bin/sh
if [ "$(cat /tmp/greeting.txt 2>/dev/null)" = "$EXPECTED" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
`;

async function put(path: string, text: string, mode = 0o644): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, text);
  await chmod(path, mode);
}

/**
 * A Harbor task (task.toml, instruction.md, environment/Dockerfile, tests/test.sh,
 * solution/solve.sh) whose test.sh fetches its checker from `fetchFrom` and whose [verifier]
 * allow-lists `verifierHosts`. `docker_image` names our image, so nothing is built.
 */
async function harborTask(
  root: string,
  name: string,
  image: string,
  fetchFrom: string,
  verifierHosts: string[],
  separate = false,
  agentHosts: string[] = [],
) {
  const task = join(root, name);
  const hosts = `[${verifierHosts.map((host) => JSON.stringify(host)).join(', ')}]`;
  await put(
    join(task, 'task.toml'),
    `${separate ? 'artifacts = ["/tmp/greeting.txt"]\n' : ''}schema_version = "1.4"

[task]
name = "gym/${name}"
version = "1.0.0"

[metadata]
difficulty = "easy"
category = "network"

[verifier]
timeout_sec = 60.0
${separate ? '' : `network_mode = "allowlist"\nallowed_hosts = ${hosts}\n`}
[verifier.env]
EXPECTED = "Hello, world!"

[agent]
timeout_sec = 120.0
${agentHosts.length === 0 ? 'network_mode = "no-network"' : `network_mode = "allowlist"\nallowed_hosts = ${JSON.stringify(agentHosts)}`}

[environment]
docker_image = "${image}"
network_mode = "no-network"
cpus = 1
memory_mb = 256
${separate ? `\n[verifier.environment]\ncpus = 1\nmemory_mb = 256\nnetwork_mode = "allowlist"\nallowed_hosts = ${hosts}\n` : ''}`,
  );
  // A separate verifier's image is built from tests/ and carries /tests/test.sh itself.
  if (separate)
    await put(join(task, 'tests/Dockerfile'), `FROM ${image}\nCOPY --chmod=755 test.sh /tests/test.sh\n`);
  await put(join(task, 'instruction.md'), 'Write "Hello, world!" into /tmp/greeting.txt.\n');
  await put(join(task, 'environment/Dockerfile'), `FROM ${image}\n`);
  await put(
    join(task, 'tests/test.sh'),
    `#!/bin/sh
set -e
# What published tasks do: install the test tool from the network first.
python3 -c 'import sys, urllib.request; open("/tmp/check-greeting", "wb").write(urllib.request.urlopen(sys.argv[1], timeout=10).read())' "${fetchFrom}"
chmod +x /tmp/check-greeting
/tmp/check-greeting
`,
    0o755,
  );
  await put(
    join(task, 'solution/solve.sh'),
    '#!/bin/sh\nprintf "Hello, world!" > /tmp/greeting.txt\n',
    0o755,
  );
  return task;
}

describe.skipIf(skipReason !== undefined)("Harbor tasks' network per phase (docker)", () => {
  let daemon: TestDaemon;
  let client: GymClient;
  let packages: { server: Server; port: number };
  let directory = '';
  let image = '';
  const served: string[] = [];
  const madeImages = new Set<string>();

  beforeAll(async () => {
    image = await testImage(docker, 'debian-base');
    directory = await mkdtemp(join(tmpdir(), 'gym-harbor-egress-'));
    const server = createServer((request, response) => {
      served.push(String(request.url));
      response.end(CHECKER);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.5', resolve));
    packages = { server, port: (server.address() as { port: number }).port };
    const names: Record<string, string[]> = { 'pkg.test': ['127.0.0.5'], 'other.test': ['127.0.0.5'] };
    daemon = await startTestDaemon(
      {
        namespace: `harbor-egress-${randomBytes(3).toString('hex')}`,
        // The daemon allows the package host (and other.test); not `blocked.test`.
        egress: { allowedHosts: ['pkg.test:*', 'other.test:*'], allowPrivateAddresses: ['127.0.0.0/8'] },
      },
      {
        listen: true,
        egressResolver: async (host) => {
          const addresses = names[host];
          if (addresses === undefined) throw Object.assign(new Error('unknown'), { code: 'ENOTFOUND' });
          return addresses;
        },
      },
    );
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
  }, 300_000);

  afterAll(async () => {
    await daemon?.cleanup();
    for (const made of madeImages)
      await docker
        .getImage(made)
        .remove({ force: true })
        .catch(() => {});
    packages?.server.close();
    await rm(directory, { recursive: true, force: true });
  });

  /** `gym eval run` as the CLI runs it, the operator's egress cap (as GYM_CONFIG says) in the options. */
  async function run(
    path: string,
    harnessName: string,
    egress: Record<string, unknown>,
    more: { numRepeats?: number; usePools?: boolean } = {},
  ) {
    const loaded = await loadEnvironment('harbor');
    const environment: LoadedEnvironment = { ...loaded, options: { ...loaded.options, egress } };
    const rows = await readRows(path);
    await environment.implementation.prepareImages!({ client, environment, rows, logger: silentLogger });
    for (const row of rows) {
      const verifierImage = (row.verifier_environment as { image?: string } | undefined)?.image;
      if (verifierImage !== undefined) madeImages.add(verifierImage);
    }
    return runTestEval({ client, environment, rows, harnessName, directory, maxInfraAttempts: 2, ...more });
  }

  it('scores 1 with the oracle and 0 with noop when the verifier installs its tool from the allowed host; the egress log goes with the rollout', async () => {
    const url = `http://pkg.test:${packages.port}/check-greeting`;
    const task = await harborTask(directory, 'installs-checker', image, url, [`pkg.test:${packages.port}`]);
    const cap = { allowedHosts: ['pkg.test:*'] };
    const [oracle, noop] = await Promise.all([run(task, 'oracle', cap), run(task, 'noop', cap)]);
    expect(oracle.rollouts.map((row) => [gymFields(row).outcome, row.reward])).toEqual([['reward', 1]]);
    expect(noop.rollouts.map((row) => [gymFields(row).outcome, row.reward])).toEqual([['reward', 0]]);
    expect([...oracle.failures, ...noop.failures]).toEqual([]);
    expect(served.filter((path) => path === '/check-greeting').length).toBe(2);

    const line = gymFields(oracle.rollouts[0]!);
    expect(line.task).toMatchObject({
      network: {
        applied: {
          environment: { mode: 'none' },
          agent: { mode: 'none' },
          verifier: { mode: 'allowlist', allowedHosts: [`pkg.test:${packages.port}`] },
        },
      },
    });
    // The summary in the line (where our fields go), the full log in the run's records folder.
    const network = line.network as NetworkSummary;
    expect(network).toMatchObject({
      attempts: 1,
      allowed: 1,
      refused: 0,
      phases: { verifier: { attempts: 1, refused: 0 } },
      refused_targets: [],
    });
    expect(network.bytes_down).toBeGreaterThanOrEqual(CHECKER.length);
    const log = JSON.parse(await readFile(join(directory, network.log!), 'utf8')) as {
      sandboxes: Array<{
        role: string;
        phases: Array<{ phase: string }>;
        attempts: Array<Record<string, unknown>>;
      }>;
    };
    expect(log.sandboxes).toHaveLength(1);
    expect(log.sandboxes[0]!.phases.map((mark) => mark.phase)).toEqual(['environment', 'agent', 'verifier']);
    expect(log.sandboxes[0]!.attempts).toEqual([
      expect.objectContaining({
        host: 'pkg.test',
        port: packages.port,
        verdict: 'allowed',
        phase: 'verifier',
      }),
    ]);
  }, 300_000);

  it("refuses the task before any sandbox when the operator does not allow the host; a host only the daemon refuses stops the run at the agent's switch and is a verifier error at the verifier's, as is one the task does not list", async () => {
    const url = `http://pkg.test:${packages.port}/check-greeting`;
    // The operator's egress configuration (as this run read it) does not cover pkg.test.
    const refusedTask = await harborTask(directory, 'operator-refuses', image, url, [
      `pkg.test:${packages.port}`,
    ]);
    // Its only row is refused: the run stops with the reason, before any sandbox starts.
    const sandboxesBefore = (await client.listSandboxes()).length;
    await expect(run(refusedTask, 'oracle', { allowedHosts: ['mirror.test'] })).rejects.toThrow(
      new RegExp(
        `task gym/operator-refuses needs network the operator does not allow: the verifier phase declares network_mode allowlist \\[pkg\\.test:${packages.port}\\], beyond the operator's egress configuration \\(.*egress\\.allowedHosts.*pkg\\.test:${packages.port}`,
      ),
    );
    expect((await client.listSandboxes()).length).toBe(sandboxesBefore);

    // The run's configuration allows blocked.test, the daemon's does not: the verifier's switch is
    // refused, a verifier error naming the setting (no reward, not retried as an infra fault).
    const daemonRefuses = await harborTask(directory, 'daemon-refuses', image, url, ['blocked.test']);
    // The task allow-lists other.test, but its tests fetch from pkg.test: the proxy refuses it, the
    // tests write no reward, and the line names the host they were refused.
    const notListed = await harborTask(directory, 'not-listed', image, url, ['other.test']);
    const [byDaemon, byTask] = await Promise.all([
      run(daemonRefuses, 'oracle', { allowedHosts: ['*.test'] }),
      run(notListed, 'oracle', { allowedHosts: ['*.test'] }),
    ]);
    for (const result of [byDaemon, byTask]) {
      expect(result.rollouts).toEqual([]);
      expect(
        result.failures.map((row) => [row._ng_failure_class, row.reward, row._ng_attempt_index]),
      ).toEqual([['verifier_error', null, 0]]);
    }
    expect(String((gymFields(byDaemon.failures[0]!).verifier as { reason: string }).reason)).toMatch(
      /the verifier phase's network \(allowlist \[blocked\.test\]\) is refused by the daemon's egress configuration: .*egress\.allowedHosts.*blocked\.test/,
    );
    // Refused by the daemon at the agent's switch: a set-up mistake every such rollout would
    // repeat, so the run stops with it rather than retrying it as an infra fault.
    const agentRefused = await harborTask(directory, 'daemon-refuses-agent', image, url, [], false, [
      'blocked.test',
    ]);
    await expect(run(agentRefused, 'oracle', { allowedHosts: ['*.test'] })).rejects.toMatchObject({
      code: 'FORBIDDEN_BY_CONFIG',
      message: expect.stringMatching(/egress\.allowedHosts.*blocked\.test/),
    });
    const verifier = gymFields(byTask.failures[0]!).verifier as { reason: string; network_refused: unknown };
    expect(verifier.reason).toMatch(/wrote no \/logs\/verifier\/reward/);
    expect(verifier.network_refused).toEqual([
      {
        target: `pkg.test:${packages.port}`,
        reason: expect.stringMatching(/is not in the sandbox's allowed hosts/),
      },
    ]);
    expect((gymFields(byTask.failures[0]!).network as NetworkSummary).refused_targets).toEqual([
      expect.objectContaining({ target: `pkg.test:${packages.port}`, phase: 'verifier' }),
    ]);
  }, 300_000);
  it("creates a separate verifier's sandbox with the verifier phase's policy, and keeps its log with the rollout", async () => {
    const url = `http://pkg.test:${packages.port}/check-greeting`;
    const task = await harborTask(
      directory,
      'separate-verifier',
      image,
      url,
      [`pkg.test:${packages.port}`],
      true,
    );
    const { rollouts, failures } = await run(task, 'oracle', { allowedHosts: ['pkg.test:*'] });
    expect(failures).toEqual([]);
    expect(rollouts.map((row) => [gymFields(row).outcome, row.reward])).toEqual([['reward', 1]]);
    const network = gymFields(rollouts[0]!).network as NetworkSummary;
    expect(network).toMatchObject({ attempts: 1, allowed: 1, phases: { verifier: { attempts: 1 } } });
    const log = JSON.parse(await readFile(join(directory, network.log!), 'utf8')) as {
      sandboxes: Array<{ role: string; attempts: unknown[] }>;
    };
    // The agent's sandbox (nothing: its phases have no network) and the verifier's.
    expect(log.sandboxes.map((sandbox) => [sandbox.role, sandbox.attempts.length])).toEqual([
      ['agent', 0],
      ['verifier', 1],
    ]);
  }, 300_000);
  it("gives a sandbox taken from a warm pool the task's policy by a switch", async () => {
    const url = `http://pkg.test:${packages.port}/check-greeting`;
    const task = await harborTask(directory, 'pooled', image, url, [`pkg.test:${packages.port}`], false, [
      'other.test',
    ]);
    const { rollouts, failures } = await run(
      task,
      'oracle',
      { allowedHosts: ['*.test:*'] },
      { numRepeats: 2, usePools: true },
    );
    expect(failures).toEqual([]);
    expect(rollouts.map((row) => row.reward)).toEqual([1, 1]);
    for (const row of rollouts)
      expect(gymFields(row).network).toMatchObject({ allowed: 1, phases: { verifier: { attempts: 1 } } });
  }, 300_000);
});
