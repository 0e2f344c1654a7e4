/**
 * Folders as users have them, against real Docker: a Harbor dataset mixing good tasks with ones
 * this runner cannot take (a Compose service whose image is not here, an MCP server outside the
 * task, network it does not give, a build that fails),
 * and a Terminal-Bench dataset in its own format. The fixtures are written here in each format's
 * published shape (every field), on images this project builds (busybox, debian-base).
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, cp, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../../client/client.ts';
import { silentLogger } from '../../../core/logger.ts';
import { startTestDaemon, type TestDaemon } from '../../../test/daemon-harness.ts';
import { dockerTestEnvironment, removeImagesTagged, testImage } from '../../../test/docker-available.ts';
import { runTestEval } from '../../../test/eval-run.ts';
import { type LoadedEnvironment, loadEnvironment, readRows } from '../../environment.ts';
import { readJsonl } from '../../runner/files.ts';
import { gymFields } from '../../runner/rollout-line.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const NONE = { mode: 'none', allowedHosts: [] };
const EXAMPLES = join(import.meta.dirname, '../../harbor/tasks');
const CLI = join(import.meta.dirname, '../../../cli/main.ts');

async function put(path: string, text: string, mode = 0o644): Promise<void> {
  await mkdir(join(path, '..'), { recursive: true });
  await writeFile(path, text);
  await chmod(path, mode);
}

/** A Harbor task from the hello-file example with task.toml replaced and, optionally, more files. */
async function harborTask(root: string, name: string, toml: string, files: Record<string, string> = {}) {
  const task = join(root, name);
  await cp(join(EXAMPLES, 'hello-file'), task, { recursive: true });
  await put(join(task, 'task.toml'), toml);
  for (const [path, text] of Object.entries(files)) await put(join(task, path), text, 0o755);
  return task;
}

const TOML_HEAD = (name: string) => `schema_version = "1.4"

[task]
name = "gym/${name}"
version = "1.0.0"
description = "A fixture in Harbor's published shape"
authors = [{ name = "Gym Tests", email = "tests@example.invalid" }]
keywords = ["fixture"]

[metadata]
difficulty = "easy"
category = "file-operations"

[verifier]
timeout_sec = 60.0

[verifier.env]
EXPECTED = "Hello, world!"

[agent]
timeout_sec = 300.0

[solution.env]

`;

const ENVIRONMENT = `[environment]
build_timeout_sec = 120.0
cpus = 1
memory_mb = 256
storage_mb = 1024
gpus = 0

[environment.env]
GREETING = "\${GYM_HARBOR_GREETING:-Hello, world!}"
`;

/** A Terminal-Bench 1.x task folder: task.yaml, Dockerfile, docker-compose.yaml, run-tests.sh, tests/, solution.sh. */
async function terminalBenchTask(root: string, name: string, tag: string) {
  const task = join(root, name);
  await put(
    join(task, 'task.yaml'),
    `# Terminal-Bench Canary String, DO NOT REMOVE: fixture ${tag}
instruction: |-
  Write the word "ready" into /app/status.txt and count the lines of /app/input.txt into /app/count.txt.
author_name: Gym Tests
author_email: tests@example.invalid
difficulty: easy
category: file-operations
tags:
  - files
  - bash
parser_name: pytest
max_agent_timeout_sec: 180.0
max_test_timeout_sec: 60.0
run_tests_in_same_shell: false
disable_asciinema: false
estimated_duration_sec: 30
expert_time_estimate_min: 1
junior_time_estimate_min: 5
`,
  );
  await put(
    join(task, 'Dockerfile'),
    `FROM gym/debian-base:latest\nWORKDIR /app\nCOPY input.txt /app/input.txt\n`,
  );
  await put(join(task, 'input.txt'), `one\ntwo\nthree ${tag}\n`);
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
    volumes:
      - \${T_BENCH_TASK_LOGS_PATH}:\${T_BENCH_CONTAINER_LOGS_PATH}
      - \${T_BENCH_TASK_AGENT_LOGS_PATH}:\${T_BENCH_CONTAINER_AGENT_LOGS_PATH}
`,
  );
  // Published run-tests.sh fetch uv first; these images carry pytest, so this one runs it directly.
  await put(
    join(task, 'run-tests.sh'),
    `#!/bin/bash\nset -u\npython3 -m pytest "$TEST_DIR/test_outputs.py" -rA -p no:cacheprovider\n`,
    0o755,
  );
  await put(
    join(task, 'tests/test_outputs.py'),
    `from pathlib import Path


def test_status_is_ready():
    assert Path("/app/status.txt").read_text().strip() == "ready"


def test_line_count():
    assert Path("/app/count.txt").read_text().strip() == "3"
`,
  );
  await put(
    join(task, 'solution.sh'),
    `#!/bin/bash\necho ready > /app/status.txt\nwc -l < /app/input.txt | tr -d ' ' > count.txt\n`,
    0o755,
  );
  return task;
}

describe.skipIf(skipReason !== undefined)('published task formats against real Docker', () => {
  let daemon: TestDaemon;
  let client: GymClient;
  let directory = '';

  beforeAll(async () => {
    await testImage(docker, 'busybox');
    await testImage(docker, 'debian-base');
    directory = await mkdtemp(join(tmpdir(), 'gym-formats-'));
    daemon = await startTestDaemon(
      { namespace: `formats-${randomBytes(3).toString('hex')}` },
      { listen: true },
    );
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
  }, 300_000);

  afterAll(async () => {
    await daemon?.cleanup();
    // Only the images these tests made (their tags carry the fixtures' random content).
    await removeImagesTagged(docker, /^gym\/harbor-(gym-gym-formats-|terminal-bench-tb-)/);
    await rm(directory, { recursive: true, force: true });
  });

  async function run(path: string, harnessName: string, options: Record<string, unknown> = {}) {
    const loaded = await loadEnvironment('harbor');
    const environment: LoadedEnvironment = { ...loaded, options: { ...loaded.options, ...options } };
    const rows = await readRows(path);
    const notices: string[] = [];
    await environment.implementation.prepareImages!({
      client,
      environment,
      rows,
      logger: silentLogger,
      onNotice: (message) => notices.push(message),
    });
    const { summary, rollouts, failures } = await runTestEval({
      client,
      environment,
      rows,
      harnessName,
      directory,
    });
    return {
      summary,
      notices,
      rollouts,
      failures,
    };
  }

  it('runs the good tasks of a mixed Harbor folder and explains each of the others in one failure line', async () => {
    // Seen: one unsupported task or one failed build aborted the whole folder; a task whose tests
    // needed the network scored 0, exit 0, and nothing said why.
    const root = join(directory, 'harbor');
    const salt = randomBytes(4).toString('hex');
    await harborTask(root, 'a-good', `${TOML_HEAD('gym-formats-good')}${ENVIRONMENT}`, {
      'environment/README.txt': `gym-formats ${salt}\n`,
    });
    await harborTask(root, 'b-compose', `${TOML_HEAD('gym-formats-compose')}${ENVIRONMENT}`, {
      'environment/docker-compose.yaml': 'services:\n  main:\n    build: .\n  db:\n    image: postgres:16\n',
    });
    await harborTask(
      root,
      'c-mcp',
      `${TOML_HEAD('gym-formats-mcp')}${ENVIRONMENT}\n[[environment.mcp_servers]]\nname = "search"\ntransport = "streamable-http"\nurl = "http://mcp.invalid/mcp"\n`,
    );
    await harborTask(
      root,
      'd-network',
      `${TOML_HEAD('gym-formats-network').replace('timeout_sec = 60.0\n', 'timeout_sec = 60.0\nnetwork_mode = "public"\n')}${ENVIRONMENT.replace('gpus = 0\n', 'gpus = 0\nnetwork_mode = "no-network"\n')}`,
    );
    await harborTask(
      root,
      'e-legacy-internet',
      `${TOML_HEAD('gym-formats-legacy')}${ENVIRONMENT.replace('gpus = 0\n', 'gpus = 0\nallow_internet = true\n')}`,
    );
    await harborTask(root, 'f-build-fails', `${TOML_HEAD('gym-formats-build')}${ENVIRONMENT}`, {
      'environment/Dockerfile': `FROM gym/busybox:latest\nWORKDIR /app\nRUN echo ${salt} && exit 3\n`,
    });
    const { summary, rollouts, failures } = await run(root, 'oracle');
    expect(rollouts.map((row) => [row.id, gymFields(row).outcome, row.reward])).toEqual([
      ['gym/gym-formats-good', 'reward', 1],
    ]);
    // Declared nothing: ran with none, and the line says so.
    expect(gymFields(rollouts[0]!).task).toEqual({
      verifier_environment: 'shared',
      network: {
        declared: { environment: null, agent: null, verifier: null },
        applied: { environment: NONE, agent: NONE, verifier: NONE },
      },
    });
    const reasons = Object.fromEntries(
      failures.map((row) => [String(row.task_dir).split('/').at(-1), gymFields(row).reason]),
    );
    expect(failures.every((row) => row._ng_failure_class === 'invalid_row')).toBe(true);
    expect(Object.keys(reasons).sort()).toEqual([
      'b-compose',
      'c-mcp',
      'd-network',
      'e-legacy-internet',
      'f-build-fails',
    ]);
    // Nothing is pulled: a service's image must be here, or built from the task.
    expect(reasons['b-compose']).toMatch(/the image of its service db: .*postgres:16/);
    expect(reasons['c-mcp']).toMatch(
      /\[\[environment\.mcp_servers\]\] search: an MCP server must be a service of environment\/docker-compose\.yaml/,
    );
    expect(reasons['d-network']).toMatch(
      /the verifier phase declares network_mode public, beyond the operator's egress configuration \(.*egress\.allowPublic/,
    );
    expect(reasons['d-network']).not.toMatch(/agent phase declares/);
    expect(reasons['e-legacy-internet']).toMatch(/the agent phase declares network_mode public/);
    expect(reasons['f-build-fails']).toMatch(/Dockerfile line 3: RUN .*failed with exit 3/);
    expect(summary.rollouts).toBe(1);
  }, 600_000);

  it("runs a network-needing task under the operator's cap when told to, recording what it declared and what it got", async () => {
    const root = join(directory, 'capped');
    await harborTask(
      root,
      'needs-network',
      `${TOML_HEAD('gym-formats-capped').replace('timeout_sec = 60.0\n', 'timeout_sec = 60.0\nnetwork_mode = "public"\n')}${ENVIRONMENT}`,
      {
        // What published tests do first; without a network it cannot, and the 0 says why.
        'tests/test.sh':
          '#!/bin/sh\nif wget -q -T 2 -O /dev/null http://deb.debian.org/; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n',
      },
    );
    const { rollouts, notices } = await run(root, 'oracle', {
      taskNetwork: { maximum: 'none', overMaximum: 'cap' },
    });
    expect(rollouts.map((row) => [row.id, row.reward])).toEqual([['gym/gym-formats-capped', 0]]);
    expect(gymFields(rollouts[0]!).task).toMatchObject({
      network: {
        declared: { environment: null, agent: null, verifier: { mode: 'public' } },
        applied: { environment: NONE, agent: NONE, verifier: NONE },
        capped: [expect.stringMatching(/verifier phase declares network_mode public.*: ran with none/)],
      },
    });
    expect(notices).toEqual([expect.stringMatching(/task gym\/gym-formats-capped: .*ran with none/)]);
  }, 600_000);

  it("runs the image's ENTRYPOINT as Harbor does (CMD replaced by a keepalive), its services up while the tests run", async () => {
    // Seen: the image's ENTRYPOINT never ran, so a task whose entrypoint starts a service failed.
    const root = join(directory, 'entrypoint');
    const salt = randomBytes(4).toString('hex');
    await harborTask(root, 'service', `${TOML_HEAD('gym-formats-entrypoint')}${ENVIRONMENT}`, {
      'environment/Dockerfile': [
        'FROM gym/busybox:latest',
        'WORKDIR /app',
        'COPY --chmod=755 start.sh /usr/local/bin/start.sh',
        'ENTRYPOINT ["/usr/local/bin/start.sh"]',
        'CMD ["sh", "-c", "touch /tmp/cmd-ran"]',
      ].join('\n'),
      'environment/start.sh': `#!/bin/sh\n# ${salt}\necho "$*" > /tmp/entrypoint-args\n(while true; do date > /tmp/heartbeat; sleep 1; done) &\nexec "$@"\n`,
      'tests/test.sh': [
        '#!/bin/sh',
        'rm -f /tmp/heartbeat; sleep 3',
        'if [ -e /tmp/heartbeat ] && [ "$(cat /tmp/entrypoint-args)" = "sh -c sleep infinity" ] && [ ! -e /tmp/cmd-ran ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt',
        '',
      ].join('\n'),
    });
    const { rollouts } = await run(root, 'noop');
    expect(rollouts.map((row) => [row.id, gymFields(row).outcome, row.reward])).toEqual([
      ['gym/gym-formats-entrypoint', 'reward', 1],
    ]);
    expect(rollouts[0]!.entrypoint).toEqual(['/usr/local/bin/start.sh']);
  }, 600_000);

  it("runs the tests of a separate verifier in their own sandbox with only the agent's artifacts, whatever its tar writes", async () => {
    const root = join(directory, 'separate');
    const salt = randomBytes(4).toString('hex');
    const toml = (name: string) =>
      `artifacts = ["/app/result.txt"]\n${TOML_HEAD(name)}${ENVIRONMENT}\n[verifier.environment]\nbuild_timeout_sec = 120.0\ncpus = 1\nmemory_mb = 256\nnetwork_mode = "no-network"\n`;
    const verifierFiles = {
      'tests/Dockerfile':
        'FROM gym/busybox:latest\nWORKDIR /grading\nCOPY --chmod=755 test.sh /tests/test.sh\n',
      'tests/test.sh': [
        '#!/bin/sh',
        `# ${salt}`,
        // Only what was published reaches this sandbox: the agent's other files do not.
        'if [ "$(cat /logs/artifacts/answer.txt)" = 42 ] && [ "$(cat /app/result.txt)" = done ] && [ ! -e /app/agent-only ] && [ "$(pwd)" = /grading ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt',
        '',
      ].join('\n'),
    };
    await harborTask(root, 'a-honest', toml('gym-formats-separate'), {
      ...verifierFiles,
      'solution/solve.sh':
        '#!/bin/sh\nmkdir -p /logs/artifacts\necho 42 > /logs/artifacts/answer.txt\necho done > /app/result.txt\ntouch /app/agent-only\n',
    });
    // The agent owns its sandbox's tar: this one packs a test.sh that writes reward 1 and a
    // reward file, hoping they land on the verifier's. Only files under the declared sources may.
    const fakeTar = [
      '#!/bin/sh',
      'exec python3 - <<PY',
      'import tarfile',
      "archive = tarfile.open('/tmp/.gym-artifacts.tar', 'w')",
      "archive.add('/tmp/forged/tests', arcname='tests')",
      "archive.add('/tmp/forged/logs', arcname='logs')",
      "archive.add('/tmp/forged/marker', arcname='logs/artifacts/marker')",
      'archive.close()',
      'PY',
    ].join('\n');
    await harborTask(root, 'b-forging', toml('gym-formats-separate-forge'), {
      ...verifierFiles,
      'environment/Dockerfile': `FROM gym/debian-base:latest\nWORKDIR /app\nRUN echo ${salt}\n`,
      'solution/fake-tar': `${fakeTar}\n`,
      'solution/solve.sh': [
        '#!/bin/sh',
        'mkdir -p /logs/artifacts /tmp/forged/tests /tmp/forged/logs/verifier /tmp/forged/logs/artifacts',
        'echo 41 > /tmp/forged/logs/artifacts/answer.txt; touch /tmp/forged/marker',
        "printf '#!/bin/sh\\necho 1 > /logs/verifier/reward.txt\\n' > /tmp/forged/tests/test.sh",
        'chmod 755 /tmp/forged/tests/test.sh; echo 1 > /tmp/forged/logs/verifier/reward.txt',
        'ln -s /tests/test.sh /logs/artifacts/link',
        'install -m 755 /solution/fake-tar /usr/bin/tar; install -m 755 /solution/fake-tar /bin/tar',
        '',
      ].join('\n'),
    });
    const { rollouts, failures } = await run(root, 'oracle');
    expect(failures).toEqual([]);
    expect(rollouts.map((row) => [row.id, gymFields(row).outcome, row.reward])).toEqual([
      ['gym/gym-formats-separate', 'reward', 1],
      ['gym/gym-formats-separate-forge', 'reward', 0],
    ]);
    expect(gymFields(rollouts[0]!).verifier).toMatchObject({
      verifier_environment: 'separate',
      artifacts_copied: expect.arrayContaining(['/logs/artifacts/answer.txt', '/app/result.txt']),
    });
    // The forged tar was the one read (its marker came through); its tests and reward did not.
    expect(
      (gymFields(rollouts[1]!).verifier as { artifacts_copied: string[] }).artifacts_copied.sort(),
    ).toEqual(['/logs/artifacts/answer.txt', '/logs/artifacts/marker']);
    expect(gymFields(rollouts[0]!).task).toMatchObject({ verifier_environment: 'separate' });
  }, 600_000);

  it('gym eval run exits after a failed image build, with the build error on its failure line', async () => {
    // Seen: after printing the build error, gym eval run did not exit (killed at 600 s).
    const root = join(directory, 'cli-build');
    const salt = randomBytes(4).toString('hex');
    await harborTask(root, 'fails', `${TOML_HEAD('gym-formats-cli')}${ENVIRONMENT}`, {
      'environment/Dockerfile': `FROM gym/busybox:latest\nRUN echo ${salt} && exit 7\n`,
    });
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-formats-cli-'));
    const output = join(directory, `cli-${salt}.jsonl`);
    const cli = spawn(
      process.execPath,
      [CLI, 'eval', 'run', '--input', root, '--harness', 'oracle', '--output', output],
      {
        env: { ...process.env, GYM_STATE_DIR: stateDir, GYM_LOG_LEVEL: 'error' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let stderr = '';
    cli.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const code = await Promise.race([
      new Promise((resolve) => cli.once('exit', resolve)),
      new Promise((resolve) => setTimeout(resolve, 240_000, 'still running')),
    ]);
    cli.kill('SIGKILL');
    await rm(stateDir, { recursive: true, force: true });
    expect(code).toBe(1);
    expect(stderr).toMatch(/RUN .*failed with exit 7/);
    const failures = await readJsonl(output.replace(/\.jsonl$/, '_failures.jsonl'));
    expect(failures.map((row) => gymFields(row).reason)).toEqual([
      expect.stringMatching(/Dockerfile line 2: RUN .*exit 7/),
    ]);
  }, 300_000);

  it('runs a Terminal-Bench folder in its own format: the oracle scores 1, noop 0, a broken task is a failure line', async () => {
    // Seen: task.yaml folders gave EISDIR: illegal operation on a directory.
    const root = join(directory, 'terminal-bench');
    const tag = randomBytes(4).toString('hex');
    await terminalBenchTask(root, `tb-${tag}-count`, tag);
    const broken = join(root, `tb-${tag}-two-services`);
    await terminalBenchTask(root, `tb-${tag}-two-services`, tag);
    await put(
      join(broken, 'docker-compose.yaml'),
      'services:\n  client:\n    build:\n      dockerfile: Dockerfile\n  redis:\n    image: redis:7\n',
    );
    const oracle = await run(root, 'oracle');
    expect(oracle.rollouts.map((row) => [row.id, gymFields(row).outcome, row.reward])).toEqual([
      [`tb-${tag}-count`, 'reward', 1],
    ]);
    const tests = (gymFields(oracle.rollouts[0]!).verifier as { tests: Record<string, string> }).tests;
    expect(Object.entries(tests).map(([id, status]) => [id.split('::').at(-1), status])).toEqual([
      ['test_status_is_ready', 'PASSED'],
      ['test_line_count', 'PASSED'],
    ]);
    expect(oracle.rollouts[0]!.workdir).toBe('/app');
    expect(oracle.failures.map((row) => gymFields(row).reason)).toEqual([
      expect.stringMatching(/the image of its service redis: .*redis:7/),
    ]);
    const noop = await run(root, 'noop');
    expect(noop.rollouts.map((row) => [row.id, gymFields(row).outcome, row.reward])).toEqual([
      [`tb-${tag}-count`, 'reward', 0],
    ]);
    expect(String((gymFields(noop.rollouts[0]!).verifier as { reason: string }).reason)).toMatch(
      /not every test passed/,
    );
  }, 600_000);
});
