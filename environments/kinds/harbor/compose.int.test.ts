/**
 * Multi-container tasks end to end against real Docker: a Terminal-Bench task whose
 * docker-compose.yaml puts a server beside the agent's client (the tests ask it by name), and a
 * Harbor task whose MCP server is a Compose service and whose [environment.healthcheck] gates the
 * agent. The oracle scores 1 and a do-nothing agent 0; a service that never becomes healthy fails
 * the rollout with its name, and nothing of any group is left behind.
 */
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../../client/client.ts';
import { silentLogger } from '../../../core/logger.ts';
import { SERVICE_LABEL } from '../../../providers/docker/service-group.ts';
import { startTestDaemon, type TestDaemon } from '../../../test/daemon-harness.ts';
import { dockerTestEnvironment, removeImagesTagged, testImage } from '../../../test/docker-available.ts';
import { runTestEval } from '../../../test/eval-run.ts';
import { loadEnvironment, readRows } from '../../environment.ts';
import { gymFields } from '../../runner/rollout-line.ts';

const { docker, skipReason } = await dockerTestEnvironment();

async function put(path: string, text: string, mode = 0o644): Promise<void> {
  await mkdir(join(path, '..'), { recursive: true });
  await writeFile(path, text);
  await chmod(path, mode);
}

/** A Terminal-Bench task: a client (the agent's) and a server `db` that holds a secret. */
async function terminalBenchTask(
  root: string,
  name: string,
  secret: string,
  dbHealth = 'wget -q -O /dev/null http://127.0.0.1:8080/secret',
) {
  const task = join(root, name);
  await put(
    join(task, 'task.yaml'),
    `instruction: |-\n  The server db answers http://db:8080/secret. Write what it answers into /app/answer.txt.\nauthor_name: Gym Tests\ndifficulty: easy\nparser_name: pytest\nmax_agent_timeout_sec: 120.0\nmax_test_timeout_sec: 60.0\n`,
  );
  await put(join(task, 'Dockerfile'), 'FROM gym/debian-base:latest\nWORKDIR /app\n');
  await put(
    join(task, 'db/Dockerfile'),
    `FROM gym/busybox:latest\nRUN mkdir -p /www && echo ${secret} > /www/secret\nCMD ["httpd", "-f", "-p", "8080", "-h", "/www"]\n`,
  );
  await put(
    join(task, 'docker-compose.yaml'),
    `services:
  client:
    build:
      dockerfile: Dockerfile
    image: \${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
    container_name: \${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    environment:
      - TEST_DIR=\${T_BENCH_TEST_DIR}
      - SECRET_URL=http://db:8080/secret
    volumes:
      - \${T_BENCH_TASK_LOGS_PATH}:\${T_BENCH_CONTAINER_LOGS_PATH}
    depends_on:
      db:
        condition: service_healthy
  db:
    build: ./db
    container_name: \${T_BENCH_TASK_DOCKER_NAME_PREFIX}__db
    healthcheck:
      test: ["CMD-SHELL", "${dbHealth}"]
      interval: 200ms
      timeout: 5s
      retries: 5
`,
  );
  await put(
    join(task, 'run-tests.sh'),
    '#!/bin/bash\npython3 -m pytest "$TEST_DIR/test_outputs.py" -rA -p no:cacheprovider\n',
    0o755,
  );
  await put(
    join(task, 'tests/test_outputs.py'),
    `import os
import urllib.request
from pathlib import Path


def test_answer_is_the_servers():
    served = urllib.request.urlopen(os.environ["SECRET_URL"]).read().decode().strip()
    assert served
    assert Path("/app/answer.txt").read_text().strip() == served
`,
  );
  await put(
    join(task, 'solution.sh'),
    '#!/bin/bash\npython3 -c "import os, urllib.request; print(urllib.request.urlopen(os.environ[\'SECRET_URL\']).read().decode().strip())" > /app/answer.txt\n',
    0o755,
  );
  return task;
}

/** The MCP server: JSON-RPC over HTTP (streamable-http's POST), one tool that returns the secret. */
const MCP_SERVER = await readFile(
  join(
    import.meta.dirname,
    '../../../test/fixtures/harbor-tasks-compose/mcp-health/environment/mcp/server.py',
  ),
  'utf8',
);

const LOOKUP = `wget -q -O - --header 'Content-Type: application/json' --post-data '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup","arguments":{}}}' http://mcp:8000/mcp | sed 's/.*"text": "\\([^"]*\\)".*/\\1/'`;

/** A Harbor task whose MCP server is a Compose service, its agent gated by a health check. */
async function harborTask(root: string, name: string, secret: string, healthcheck: string) {
  const task = join(root, name);
  await put(
    join(task, 'task.toml'),
    `schema_version = "1.4"

[task]
name = "gym/${name}"

[verifier]
timeout_sec = 60.0

[agent]
timeout_sec = 120.0

[environment]
build_timeout_sec = 300.0

[environment.healthcheck]
command = "${healthcheck}"
interval_sec = 0.2
start_period_sec = 60
start_interval_sec = 0.2
retries = 3

[[environment.mcp_servers]]
name = "lookup"
transport = "streamable-http"
url = "http://mcp:8000/mcp"
`,
  );
  await put(
    join(task, 'instruction.md'),
    'Call the MCP server lookup and write its answer into /app/answer.txt.\n',
  );
  await put(join(task, 'environment/Dockerfile'), 'FROM gym/busybox:latest\nWORKDIR /app\n');
  await put(
    join(task, 'environment/mcp/Dockerfile'),
    `FROM gym/debian-base:latest\nCOPY server.py /srv/server.py\nRUN echo ${secret} > /srv/secret\nCMD ["python3", "/srv/server.py"]\n`,
  );
  await put(join(task, 'environment/mcp/server.py'), MCP_SERVER);
  await put(
    join(task, 'environment/docker-compose.yaml'),
    'services:\n  main:\n    depends_on:\n      - mcp\n  mcp:\n    build:\n      context: ./mcp\n',
  );
  // The oracle answers only if the health check ran before it (it leaves its mark).
  await put(
    join(task, 'solution/solve.sh'),
    `#!/bin/sh\nif [ -e /tmp/healthchecked ]; then ${LOOKUP} > /app/answer.txt; fi\n`,
    0o755,
  );
  await put(
    join(task, 'tests/test.sh'),
    `#!/bin/sh\nexpected=$(${LOOKUP})\nif [ -n "$expected" ] && [ "$(cat /app/answer.txt 2>/dev/null)" = "$expected" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n`,
    0o755,
  );
  return task;
}

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
