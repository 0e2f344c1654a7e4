/**
 * NeMo Gym's own rollout collection (0.7.0, the `nemo-gym` framework runtime, run as a host
 * process) pointed at `gym eval serve`: its `RolloutCollectionHelper` materialises the rows, sends
 * each to our `POST /run`, writes the lines we answer and asks our `POST /aggregate_metrics` for
 * its metrics file. The rows are two terminal tasks run by the mini-swe harness against the
 * scripted model on Docker: the model solves one and gives up on the other, so the lines NeMo Gym
 * writes must carry our rewards (1 and 0), our failure facts and our fields. A missing runtime is
 * a failure, not a skip.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readRows } from '../environments/environment.ts';
import { readJsonl } from '../environments/runner/files.ts';
import { readRuntimeManifest } from '../harnesses/installed/python-runtime.ts';
import { ModelScriptSchema } from '../harnesses/scripted-model/script.ts';
import { type ScriptedModelServer, startScriptedModelServer } from '../harnesses/scripted-model/server.ts';
import { collectProcess } from './collect-process.ts';
import { startTestDaemon, type TestDaemon } from './daemon-harness.ts';
import { dockerTestEnvironment, testImage } from './docker-available.ts';
import { frameworkRuntimeDir } from './frameworks/runtimes.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const REPOSITORY = new URL('..', import.meta.url).pathname;
const RUNTIME = frameworkRuntimeDir('nemo-gym');
const COLLECT = join(REPOSITORY, 'test', 'fixtures', 'nemo-gym-serve-collect.py');
const CLI = join(REPOSITORY, 'cli', 'main.ts');
const TASKS = ['count-errors', 'rename-extensions'];
const REPEATS = 2;

/** Starts `gym eval serve` and resolves with its URL once it prints it. */
function startServe(
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ child: ChildProcess; url: string; log: () => string }> {
  const child = spawn(process.execPath, [CLI, 'eval', 'serve', ...args], {
    cwd: REPOSITORY,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  return new Promise((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const found = / at (http:\/\/\S+) /.exec(output);
      if (found !== null) resolve({ child, url: found[1]!, log: () => output });
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) =>
      reject(new Error(`gym eval serve exited ${code} before serving:\n${output}`)),
    );
  });
}

describe.skipIf(skipReason !== undefined)("NeMo Gym's rollout collection against gym eval serve", () => {
  const namespace = `serve-${randomBytes(3).toString('hex')}`;
  let model: ScriptedModelServer;
  let daemon: TestDaemon;
  let directory = '';
  let serve: ChildProcess | undefined;

  beforeAll(async () => {
    // set-up step 7 made it (scripts/framework-runtimes.ts).
    expect(
      await readRuntimeManifest(RUNTIME),
      `no NeMo Gym runtime at ${RUNTIME}: run scripts/with-node.sh node scripts/framework-runtimes.ts nemo-gym`,
    ).not.toBeNull();
    await testImage(docker, 'debian-base');
    const bash = (command: string) => ({ content: `Next.\n\`\`\`bash\n${command}\n\`\`\`` });
    const submit = bash('echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT');
    model = await startScriptedModelServer(
      ModelScriptSchema.parse({
        conversations: [
          // Solves count-errors; submits anything else untouched.
          {
            match: '/app/server.log',
            replies: [bash('grep -c ERROR /app/server.log > /app/error_count.txt'), submit],
          },
          { replies: [submit] },
        ],
      }),
    );
    daemon = await startTestDaemon(
      {
        namespace,
        destroyOnShutdown: true,
        gateway: { upstream: { baseUrl: model.baseUrl }, maxRetries: 0 },
      },
      { listen: true },
    );
    directory = await mkdtemp(join(tmpdir(), 'gym-nemo-serve-'));
  });

  afterAll(async () => {
    if (serve !== undefined && serve.exitCode === null) {
      const exited = new Promise((resolve) => serve!.once('exit', resolve));
      serve.kill('SIGTERM');
      await exited;
    }
    await daemon?.cleanup();
    await model?.close();
    if (directory !== '') await rm(directory, { recursive: true, force: true });
  });

  it('collects a small dataset end to end, and the lines it writes carry our rewards', {
    timeout: 480_000,
  }, async () => {
    const rows = (
      await readRows(join(REPOSITORY, 'environments', 'terminal', 'data', 'example.jsonl'))
    ).filter((row) => TASKS.includes(String(row.id)));
    const input = join(directory, 'tasks.jsonl');
    // NeMo Gym's rows carry the prompt it expects (`gym eval run`'s materialized inputs have it).
    const prompted = rows.map((row) => ({
      ...row,
      responses_create_params: { input: [{ role: 'user', content: String(row.instruction) }] },
    }));
    await writeFile(input, prompted.map((row) => `${JSON.stringify(row)}\n`).join(''));
    const started = await startServe(
      [
        '--env',
        'terminal',
        '--harness',
        'mini-swe',
        '--input',
        input,
        '--no-token',
        '--concurrency',
        '2',
        '--queue',
        '4',
      ],
      { ...process.env, GYM_STATE_DIR: daemon.stateDir, GYM_LOG_LEVEL: 'warn' },
    );
    serve = started.child;
    const port = new URL(started.url).port;
    const output = join(directory, 'results', 'rollouts.jsonl');
    const { code, output: printed } = await collectProcess(
      join(RUNTIME, 'bin', 'python'),
      // At most concurrency + queue at once: NeMo Gym's client does not retry a 429.
      ['-B', COLLECT, port, input, output, String(REPEATS), '6'],
      { PATH: process.env.PATH, HOME: process.env.HOME, PYTHONDONTWRITEBYTECODE: '1' },
    );
    expect(code, `${printed}\n${started.log()}`).toBe(0);

    const lines = await readJsonl(output);
    expect(lines).toHaveLength(TASKS.length * REPEATS);
    const rewardOf = (id: string) => lines.filter((line) => line.id === id).map((line) => line.reward);
    expect(rewardOf('count-errors')).toEqual([1, 1]);
    expect(rewardOf('rename-extensions')).toEqual([0, 0]);
    for (const line of lines)
      expect(line).toMatchObject({
        agent_ref: { name: 'gym_sandboxd_agent' },
        mask_sample: false,
        failure_reason: null,
        response: { object: 'response' },
        _gym: { outcome: 'reward', harness: { outcome: 'submitted' } },
      });
    // Its metrics file holds what our /aggregate_metrics answered.
    const [metrics] = JSON.parse(
      await readFile(join(directory, 'results', 'rollouts_aggregate_metrics.json'), 'utf8'),
    );
    expect(metrics.agent_ref).toEqual({ name: 'gym_sandboxd_agent' });
    expect(metrics.agent_metrics['mean/reward']).toBe(0.5);
    expect(metrics.group_level_metrics).toHaveLength(TASKS.length);
    // Every row's sandbox went when its row was answered.
    const left = await docker.listContainers({
      all: true,
      filters: { label: [`gym.namespace=${namespace}`] },
    });
    expect(left).toEqual([]);
  });
});
