/**
 * Harbor's own `harbor run` (0.26.0 from PyPI, the framework runtime set-up step 7 made) with our
 * daemon as its environment: `--env gym_sandboxd.harbor:GymSandboxdEnvironment`, on the daemon's
 * Docker provider and on its Kubernetes provider (the test-only API emulator; the task images are
 * built on the Docker provider, whose engine the emulator's Pods run on). Harbor's `oracle` agent
 * scores each task 1 and `nop` 0, in Harbor's own job and trial result files; `gym eval run
 * --input` gives the same rewards for the same folder. What we cannot run is refused clearly:
 * a Compose task before any trial, a network policy beyond the operator's egress cap in the
 * trial's own result, a daemon that is not there by Harbor's preflight.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../client/client.ts';
import { readJsonl } from '../environments/runner/files.ts';
import { readRuntimeManifest } from '../harnesses/installed/python-runtime.ts';
import { runGym } from './cli-process.ts';
import { collectProcess } from './collect-process.ts';
import { startTestDaemon, type TestDaemon } from './daemon-harness.ts';
import { dockerTestEnvironment, testImage } from './docker-available.ts';
import { frameworkRuntimeDir } from './frameworks/runtimes.ts';
import { KubernetesEmulator } from './k8s-emulator/emulator.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const REPOSITORY = new URL('..', import.meta.url).pathname;
const RUNTIME = frameworkRuntimeDir('harbor');
const DRIVER = join(REPOSITORY, 'test', 'fixtures', 'harbor-run.py');
const CONTRACT = join(REPOSITORY, 'test', 'fixtures', 'harbor-environment-contract.py');
const TASKS = join(REPOSITORY, 'test', 'fixtures', 'harbor-tasks');
const REFUSED = join(REPOSITORY, 'test', 'fixtures', 'harbor-tasks-refused');
const COMPOSE = join(REPOSITORY, 'test', 'fixtures', 'harbor-tasks-compose');
const ATTACKS = join(REPOSITORY, 'test', 'fixtures', 'harbor-tasks-attacks');
/** Harbor agents of the tests' own (`--agent late_agent:LateAgent`). */
const AGENTS = join(REPOSITORY, 'test', 'fixtures', 'harbor-agents');
const ENVIRONMENT = 'gym_sandboxd.harbor:GymSandboxdEnvironment';
const K8S_NAMESPACE = 'gym-harbor';

interface TrialResult {
  task_name: string;
  verifier_result: { rewards: Record<string, number> } | null;
  exception_info: { exception_type: string; exception_message: string } | null;
  config: { environment: { import_path: string | null; kwargs: Record<string, unknown> } };
}

function run(
  args: string[],
  env: NodeJS.ProcessEnv,
  script = DRIVER,
): Promise<{ code: number | null; output: string }> {
  const path = [join(REPOSITORY, 'python'), AGENTS].join(':');
  return collectProcess(join(RUNTIME, 'bin', 'python'), [script, path, ...args], env);
}

describe.skipIf(skipReason !== undefined)('Harbor 0.26.0 with GymSandboxdEnvironment', () => {
  let emulator: KubernetesEmulator;
  let daemon: TestDaemon;
  let client: GymClient;
  let directory = '';
  const namespace = `harbor-env-${randomBytes(3).toString('hex')}`;

  beforeAll(async () => {
    // set-up made it (step 7); a missing runtime is a failure, not a skip.
    expect(
      await readRuntimeManifest(RUNTIME),
      `no runtime at ${RUNTIME}: run scripts/framework-runtimes.ts harbor`,
    ).not.toBeNull();
    await testImage(docker, 'busybox');
    await testImage(docker, 'debian-base');
    directory = await mkdtemp(join(tmpdir(), 'gym-harbor-env-'));
    emulator = await KubernetesEmulator.start(docker);
    const kubeconfigPath = join(directory, 'kubeconfig');
    await writeFile(kubeconfigPath, emulator.kubeconfig(K8S_NAMESPACE), { mode: 0o600 });
    daemon = await startTestDaemon(
      {
        namespace,
        destroyOnShutdown: true,
        // The folder the contract script's read-only bind mount comes from, by the operator's leave.
        providers: [
          { name: 'docker', options: { allowedHostPaths: [directory] } },
          { name: 'kubernetes', options: { kubeconfigPath } },
        ],
        defaultProvider: 'docker',
      },
      { listen: true },
    );
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
  }, 300_000);

  afterAll(async () => {
    await daemon?.cleanup();
    await emulator?.close();
    if (directory !== '') await rm(directory, { recursive: true, force: true });
  });

  /** `harbor run` as a user types it, plus our `--ek`; Harbor's job folder. */
  async function harborRun(jobName: string, path: string, agent: string, kwargs: string[] = []) {
    const jobs = join(directory, 'jobs');
    const result = await run(
      [
        'run',
        '--path',
        path,
        '--agent',
        agent,
        '--env',
        ENVIRONMENT,
        '--ek',
        `gym_command=${join(REPOSITORY, 'bin', 'gym')}`,
        ...kwargs.flatMap((kwarg) => ['--ek', kwarg]),
        '--jobs-dir',
        jobs,
        '--job-name',
        jobName,
        '--n-concurrent',
        '4',
        '--yes',
      ],
      {
        PATH: process.env.PATH,
        HOME: directory,
        GYM_STATE_DIR: daemon.stateDir,
        // No reach beyond loopback: Harbor's telemetry and LiteLLM's price list stay off.
        HARBOR_TELEMETRY: '0',
        LITELLM_LOCAL_MODEL_COST_MAP: 'True',
      },
    );
    return { ...result, job: join(jobs, jobName) };
  }

  async function trials(job: string): Promise<TrialResult[]> {
    const entries = await readdir(job, { withFileTypes: true });
    const results = await Promise.all(
      entries
        .filter((entry) => entry.isDirectory())
        .map(
          async (entry) =>
            JSON.parse(await readFile(join(job, entry.name, 'result.json'), 'utf8')) as TrialResult,
        ),
    );
    return results.sort((a, b) => a.task_name.localeCompare(b.task_name));
  }

  const rewards = (results: TrialResult[]) =>
    results.map((trial) => [
      trial.task_name,
      trial.verifier_result?.rewards.reward ?? null,
      trial.exception_info,
    ]);

  for (const provider of ['docker', 'kubernetes'] as const) {
    it(`on ${provider}: the oracle scores each task 1 and nop 0, in Harbor's own result files`, async () => {
      const kwargs = provider === 'docker' ? [] : ['provider=kubernetes', 'build_provider=docker'];
      const expected: Record<string, number> = { oracle: 1, nop: 0 };
      for (const agent of ['oracle', 'nop']) {
        const { code, output, job } = await harborRun(`${agent}-${provider}`, TASKS, agent, kwargs);
        expect(code, output).toBe(0);
        const results = await trials(job);
        // One task's tests run in a separate verifier environment (a second sandbox, from
        // tests/Dockerfile); another's image starts a service by its ENTRYPOINT, which its tests need.
        expect(rewards(results), output.slice(-4000)).toEqual([
          ['gym/hello-file', expected[agent], null],
          ['gym/sales-total', expected[agent], null],
          ['gym/separate-verifier', expected[agent], null],
          ['gym/service-entrypoint', expected[agent], null],
        ]);
        expect(results[0]!.config.environment.import_path).toBe(ENVIRONMENT);
        // The job's own summary counts both trials, none errored.
        const summary = JSON.parse(await readFile(join(job, 'result.json'), 'utf8'));
        expect(summary.n_total_trials).toBe(4);
        expect(summary.stats.n_completed_trials).toBe(4);
        expect(summary.stats.n_errored_trials).toBe(0);
        const trialDirs = (await readdir(job, { withFileTypes: true })).filter((entry) =>
          entry.isDirectory(),
        );
        for (const trialDir of trialDirs) {
          // The verifier's output came back to the host from the sandbox.
          const verifierFiles = await readdir(join(job, trialDir.name, 'verifier'));
          expect(
            verifierFiles.some((name) => name.startsWith('reward')),
            verifierFiles.join(', '),
          ).toBe(true);
          // The trial ran on the provider asked for, in the image gym eval run builds for the task.
          const log = await readFile(join(job, trialDir.name, 'trial.log'), 'utf8');
          expect(log).toMatch(new RegExp(`gym-sandboxd sandbox sbx-\\S+ \\(${provider}\\) from gym/harbor-`));
          // The daemon's token is in no file Harbor wrote.
          expect(await readFile(join(job, trialDir.name, 'config.json'), 'utf8')).not.toContain(daemon.token);
        }
        expect(await readFile(join(job, 'config.json'), 'utf8')).not.toContain(daemon.token);
      }
      // Every trial's sandbox is gone.
      expect(await client.listSandboxes({ labels: { harbor: '1' } })).toEqual([]);
    }, 300_000);
  }

  it("keeps Harbor's exec, file and mount semantics, and switches each phase's network in place", async () => {
    const scratch = await mkdtemp(join(directory, 'contract-'));
    const { code, output } = await run(
      [join(TASKS, 'hello-file'), scratch],
      {
        PATH: process.env.PATH,
        HOME: directory,
        GYM_STATE_DIR: daemon.stateDir,
        GYM_COMMAND: join(REPOSITORY, 'bin', 'gym'),
      },
      CONTRACT,
    );
    expect(code, output).toBe(0);
    const seen = JSON.parse(output.trim().split('\n').at(-1)!);
    const ok = (stdout: string) => ({ stdout, stderr: null, return_code: 0 });
    expect(seen.capabilities).toMatchObject({
      disable_internet: true,
      network_allowlist: true,
      dynamic_network_policy: true,
      network_allowlist_ipv4_cidrs: false,
      docker_compose: false,
      gpus: false,
      mounted: false,
    });
    // The startup policy is the first phase's narrowest; a switch changes the sandbox's own.
    expect(seen.policy_at_start).toEqual({ mode: 'none', allowedHosts: [] });
    expect(seen.policy_after_switch).toEqual({ mode: 'allowlist', allowedHosts: [] });
    expect(seen.public_refused.type).toBe('ForbiddenByConfigError');
    expect(seen.cidr_refused.message).toContain('CIDR ranges is not supported by gym-sandboxd');
    // stdout and stderr apart, the exit code as it is.
    expect(seen.streams).toEqual({ stdout: 'out\n', stderr: 'err\n', return_code: 3 });
    // The image's WORKDIR unless a cwd is given; the task's env, a call's env over it.
    expect(seen.cwd_default).toEqual(ok('/app\n'));
    expect(seen.cwd_given).toEqual(ok('/tmp\n'));
    expect(seen.env).toEqual(ok('from-task from-call\n'));
    expect(seen.env_override).toEqual(ok('from-call\n'));
    // A user as Harbor passes one (an int, or the default user it sets), else the image's (root).
    expect(seen.user_int).toEqual(ok('1234\n'));
    expect(seen.user_default).toEqual(ok('4321\n'));
    expect(seen.user_root).toEqual(ok('0\n'));
    // A timeout raises as Harbor's Docker environment does, and nothing of the command is left.
    expect(seen.timeout).toEqual({ type: 'RuntimeError', message: 'Command timed out after 2 seconds' });
    expect(seen.after_timeout.stdout).not.toContain('sleep');
    // Files both ways: a file keeps its mode, a folder's contents land in the target folder.
    expect(seen.uploaded_file_runs).toEqual(ok('ran\n'));
    expect(seen.uploaded_dir).toEqual(ok('./run.sh\n./sub/data.txt\n'));
    expect(seen.is_dir).toEqual([true, false]);
    expect(seen.is_file).toEqual([true, false]);
    expect(seen.downloaded).toEqual(['down-dir/a.txt', 'down-dir/deep/b.txt', 'down/a.txt']);
    expect(seen.download_missing.type).toBe('FileNotFoundInSandboxError');
    // A read-only bind mount (Harbor's --mounts-json) reaches the sandbox, read-only; a writable
    // one is refused before any sandbox is made.
    expect(seen.mounts.writable_refused).toContain('read-only only');
    expect(seen.mounts.read).toEqual(ok('from the host\n'));
    expect(seen.mounts.write).not.toBe(0);
    expect(seen.mounts.host_unchanged).toEqual(['data.txt']);
    // Stopped with delete: the sandbox is gone, and the environment says it has stopped.
    expect(seen.left).toEqual([]);
    expect(seen.exec_after_stop.message).toContain('has not started (or has stopped)');
  }, 300_000);

  it('gives the rewards gym eval run --input gives for the same folder', async () => {
    for (const [harness, reward] of [
      ['oracle', 1],
      ['noop', 0],
    ] as const) {
      const output = join(directory, `eval-${harness}.jsonl`);
      const result = await runGym(
        ['eval', 'run', '--input', TASKS, '--harness', harness, '--concurrency', '2', '--output', output],
        daemon.stateDir,
      );
      expect(result.code, result.stderr).toBe(0);
      const lines = await readJsonl(output);
      expect(lines.map((line) => [line.id, line.reward]).sort()).toEqual([
        ['gym/hello-file', reward],
        ['gym/sales-total', reward],
        ['gym/separate-verifier', reward],
        ['gym/service-entrypoint', reward],
      ]);
    }
  }, 300_000);

  it('gives an agent past its time limit no more time, and no way out through what comes back', async () => {
    // An agent whose command outlives the task's [agent] timeout_sec and writes its answer while
    // the tests run (they look after that write would have landed): Harbor cancels the call, and
    // the command dies with it, so the answer never comes.
    const late = await harborRun('late', join(ATTACKS, 'late-agent'), 'late_agent:LateAgent');
    expect(late.code, late.output).toBe(0);
    const [lateTrial] = await trials(late.job);
    expect(lateTrial!.exception_info?.exception_type).toBe('AgentTimeoutError');
    expect(lateTrial!.verifier_result?.rewards.reward, late.output.slice(-3000)).toBe(0);

    // The agent's links in the folders Harbor copies back (one to a host path, one climbing out):
    // nothing is written through or outside the trial's folder; the trial is still judged.
    const links = await harborRun('links', join(ATTACKS, 'link-escape'), 'oracle');
    expect(links.code, links.output).toBe(0);
    const [linked] = await trials(links.job);
    expect(linked!.verifier_result?.rewards.reward).toBe(1);
    const [linkedDir] = (await readdir(links.job, { withFileTypes: true })).filter((entry) =>
      entry.isDirectory(),
    );
    const agentDir = join(links.job, linkedDir!.name, 'agent');
    const copied = await readdir(agentDir);
    expect(copied).not.toContain('ssh');
    expect(copied).not.toContain('up');
    expect(await readFile(join(links.job, linkedDir!.name, 'trial.log'), 'utf8')).toContain('ARCHIVE_UNSAFE');

    expect(await client.listSandboxes({ labels: { harbor: '1' } })).toEqual([]);
  }, 300_000);

  it("runs a Compose task whose MCP server is a service beside the sandbox, behind Harbor's health check: oracle 1, nop 0", async () => {
    const expected: Record<string, number> = { oracle: 1, nop: 0 };
    for (const agent of ['oracle', 'nop']) {
      const { code, output, job } = await harborRun(`compose-${agent}`, COMPOSE, agent);
      expect(code, output).toBe(0);
      expect(rewards(await trials(job)), output.slice(-4000)).toEqual([
        ['gym/mcp-health', expected[agent], null],
      ]);
    }
    expect(await client.listSandboxes({ labels: { harbor: '1' } })).toEqual([]);
    const services = await docker.listContainers({
      all: true,
      filters: { label: ['gym.service', `gym.namespace=${namespace}`] },
    });
    expect(services).toEqual([]);
  }, 300_000);

  it('refuses what it cannot run, clearly and before anything hangs', async () => {
    // A Compose task with a prebuilt image (its services are built with its image): refused
    // before any trial starts, naming why.
    const compose = await harborRun('compose', join(REFUSED, 'compose-task'), 'oracle');
    expect(compose.code).not.toBe(0);
    expect(compose.output.replace(/[│\s]+/g, ' ')).toContain(
      "builds a Compose task's services with its image: a Compose task with a prebuilt",
    );

    // Harbor's default network (public) beyond the daemon's egress cap: the trial's own error.
    const publicTask = await harborRun('public', join(REFUSED, 'public-task'), 'oracle');
    expect(publicTask.code, publicTask.output).toBe(0);
    const [trial] = await trials(publicTask.job);
    expect(trial!.verifier_result).toBeNull();
    expect(trial!.exception_info?.exception_type).toBe('ForbiddenByConfigError');
    expect(trial!.exception_info?.exception_message).toContain('egress.allowPublic');
    expect(trial!.exception_info?.exception_message).toContain('network policy is public');

    // No daemon at all: Harbor's preflight says so before queueing anything.
    const nowhere = await harborRun('nowhere', TASKS, 'oracle', [
      `state_dir=${join(directory, 'no-daemon')}`,
    ]);
    expect(nowhere.code).not.toBe(0);
    expect(nowhere.output).toContain('gym-sandboxd: no daemon to run Harbor');
    expect(await client.listSandboxes({ labels: { harbor: '1' } })).toEqual([]);
  }, 300_000);
});
