import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { readHarborTask } from '../../../environments/kinds/harbor/task-directory.ts';
import { ModelScriptSchema } from '../../../harnesses/scripted-model/script.ts';
import {
  type ScriptedModelServer,
  startScriptedModelServer,
} from '../../../harnesses/scripted-model/server.ts';
import type { ProviderContext } from '../../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../../../test/daemon-harness.ts';
import { MemoryProvider } from '../../../test/fixtures/memory-provider.ts';
import { resolveStateDir } from '../../connect.ts';
import { runCli } from '../../program.ts';
import { evalDaemonConfig, policyConfig } from './run.ts';

let daemon: TestDaemon | undefined;
let model: ScriptedModelServer | undefined;
let outputDir: string | undefined;
afterEach(async () => {
  await daemon?.cleanup();
  await model?.close();
  if (outputDir !== undefined) await rm(outputDir, { recursive: true, force: true });
  daemon = model = outputDir = undefined;
});

describe('gym eval run against a running daemon', () => {
  it("sends the run's rollouts to --model-url with --model-api-key, though the daemon has no upstream", async () => {
    // Seen: with a daemon running, --policy-* flags were ignored and its own upstream applied.
    daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }] },
      {
        factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
        listen: true,
      },
    );
    model = await startScriptedModelServer(
      ModelScriptSchema.parse({
        model: 'scripted',
        conversations: [{ replies: [{ content: 'Answer: B' }] }],
      }),
    );
    outputDir = await mkdtemp(join(tmpdir(), 'gym-eval-upstream-'));
    const output = join(outputDir, 'rollouts.jsonl');
    const stderr = new PassThrough();
    const exitCode = await runCli(
      [
        'eval',
        'run',
        '--env',
        'mcqa',
        '--limit',
        '1',
        '-o',
        output,
        '--model-url',
        model.baseUrl,
        '--model-api-key',
        'per-run-key',
        '--model',
        'scripted',
        '--state-dir',
        daemon.stateDir,
        '--env-yaml',
        '/dev/null',
      ],
      { stdout: new PassThrough(), stderr, env: {} },
    );
    expect(exitCode).toBe(0);
    expect(model.requests.length).toBeGreaterThan(0);
    expect(model.requests[0]?.headers.authorization).toBe('Bearer per-run-key');
    const [rollout] = (await readFile(output, 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { reward: number; _gym: { outcome: string } });
    expect(rollout).toMatchObject({ _gym: { outcome: 'reward' }, reward: 1 });
  });
});

describe('gym eval run --input without --env', () => {
  it('tells the environment from the rows, says so, and runs them', async () => {
    daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }] },
      {
        factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
        listen: true,
      },
    );
    outputDir = await mkdtemp(join(tmpdir(), 'gym-eval-infer-'));
    const input = join(outputDir, 'questions.jsonl');
    await writeFile(
      input,
      `${JSON.stringify({ id: 'q', question: 'Two plus two?', expected_answer: 'B' })}\n`,
    );
    const output = join(outputDir, 'rollouts.jsonl');
    const stderr = new PassThrough();
    let said = '';
    stderr.on('data', (chunk: Buffer) => {
      said += chunk.toString();
    });
    const args = [
      'eval',
      'run',
      '-i',
      input,
      '-o',
      output,
      '--harness',
      'oracle',
      '--state-dir',
      daemon.stateDir,
    ];
    const exitCode = await runCli(args, { stdout: new PassThrough(), stderr, env: {} });
    expect(said).toContain('holds questions with expected answers: running them as --env mcqa');
    expect(exitCode).toBe(0);
    expect(JSON.parse((await readFile(output, 'utf8')).trim())).toMatchObject({
      _gym: { outcome: 'reward' },
      reward: 1,
    });
  });

  it('asks for --env when the rows fit no environment (it once ran them as swe-mini)', async () => {
    outputDir = await mkdtemp(join(tmpdir(), 'gym-eval-infer-'));
    const input = join(outputDir, 'unknown.jsonl');
    await writeFile(input, `${JSON.stringify({ prompt: 'hello' })}\n`);
    const stderr = new PassThrough();
    let said = '';
    stderr.on('data', (chunk: Buffer) => {
      said += chunk.toString();
    });
    const exitCode = await runCli(['eval', 'run', '-i', input, '-o', join(outputDir, 'out.jsonl')], {
      stdout: new PassThrough(),
      stderr,
      env: {},
    });
    expect(exitCode).not.toBe(0);
    expect(said).toContain('cannot tell which environment row 1');
    expect(said).toContain('give --env NAME');
  });
});

describe('gym eval run without a running daemon, under GYM_CONFIG', () => {
  const memoryModule = new URL('../../../test/fixtures/memory-provider.ts', import.meta.url).pathname;

  it("starts its daemon with the config file's providers, state directory and model upstream", async () => {
    // Seen: the in-process daemon read no config file (Docker, ~/.local/state/gym, no upstream).
    model = await startScriptedModelServer(
      ModelScriptSchema.parse({ conversations: [{ replies: [{ content: 'Answer: B' }] }] }),
    );
    outputDir = await mkdtemp(join(tmpdir(), 'gym-eval-config-'));
    const config = join(outputDir, 'gym.yaml');
    await writeFile(
      config,
      [
        'stateDir: ./state', // relative to the file
        'providers:',
        `  - { name: memory, module: ${memoryModule} }`,
        `gateway: { upstream: { baseUrl: ${model.baseUrl} }, maxRetries: 0 }`,
        '',
      ].join('\n'),
    );
    const output = join(outputDir, 'out.jsonl');
    const stderr = new PassThrough();
    let said = '';
    stderr.on('data', (chunk: Buffer) => {
      said += chunk.toString();
    });
    const exitCode = await runCli(['eval', 'run', '--env', 'mcqa', '--limit', '1', '-o', output], {
      stdout: new PassThrough(),
      stderr,
      env: { GYM_CONFIG: config },
    });
    expect(said).toContain('started one in-process');
    expect(exitCode).toBe(0);
    // The single-turn harness asked the configured upstream (no --policy-base-url given).
    expect(JSON.parse((await readFile(output, 'utf8')).trim())).toMatchObject({
      reward: 1,
      extracted_answer: 'B',
      _gym: { outcome: 'reward', verifier: { extracted_answer: 'B' } },
    });
    // Its state went to the file's stateDir, and the one provider it started was the file's.
    const stateDir = join(outputDir, 'state', 'eval-daemon');
    expect(existsSync(join(stateDir, 'providers', 'memory'))).toBe(true);
    expect(existsSync(join(stateDir, 'providers', 'docker'))).toBe(false);
  });

  it("keeps the file's gateway settings under a run's own policy, and never the configured socket or pools", async () => {
    outputDir = await mkdtemp(join(tmpdir(), 'gym-eval-config-'));
    const config = join(outputDir, 'gym.yaml');
    await writeFile(
      config,
      [
        'stateDir: /nonexistent/from-file',
        'namespace: shared',
        'listen: { socket: /run/gym.sock }',
        'providers:',
        `  - { name: memory, module: ${memoryModule} }`,
        'gateway: { upstream: { baseUrl: http://127.0.0.1:9/v1, apiKey: sk-configured }, maxRequestBytes: 4096 }',
        'pools: { swe: { spec: { image: gym/debian-base:latest }, minIdle: 4, maxTotal: 8 } }',
        '',
      ].join('\n'),
    );
    const env = { GYM_CONFIG: config };
    expect(resolveStateDir(undefined, env)).toBe('/nonexistent/from-file');
    expect(resolveStateDir(undefined, { ...env, GYM_STATE_DIR: '/from-env' })).toBe('/from-env');
    expect(resolveStateDir('/from-flag', { ...env, GYM_STATE_DIR: '/from-env' })).toBe('/from-flag');
    const resolved = await evalDaemonConfig(
      resolveStateDir(undefined, env),
      { baseUrl: 'http://127.0.0.1:10/v1', model: 'mine' },
      env,
    );
    expect(resolved).toMatchObject({
      stateDir: '/nonexistent/from-file/eval-daemon',
      namespace: 'gym-eval',
      providers: [{ name: 'memory', module: memoryModule }],
      pools: {},
      destroyOnShutdown: true,
      gateway: { maxRequestBytes: 4096, upstream: { baseUrl: 'http://127.0.0.1:10/v1', model: 'mine' } },
    });
    // The configured key is for the configured upstream only.
    expect(resolved.gateway.upstream?.apiKey).toBeUndefined();
    expect(resolved.listen).toMatchObject({ host: '127.0.0.1', port: 0 });
    expect(resolved.listen.socket).toBeUndefined();
    // Without a policy of the run's own, the configured upstream is the run's.
    expect((await evalDaemonConfig('/s', {}, env)).gateway.upstream).toEqual({
      baseUrl: 'http://127.0.0.1:9/v1',
      apiKey: 'sk-configured',
    });
  });
});

describe("gym eval run's env.yaml", () => {
  it('does not let a ./env.yaml it only found send a host variable to its policy_base_url; says which file it read', async () => {
    // A downloaded folder's env.yaml: run `gym eval run` in it and the key went to its server.
    outputDir = await mkdtemp(join(tmpdir(), 'gym-env-yaml-found-'));
    await writeFile(
      join(outputDir, 'env.yaml'),
      'policy_base_url: http://127.0.0.1:9/v1\npolicy_api_key: ${oc.env:GYM_TEST_OPENAI_KEY}\n',
    );
    const env = { GYM_TEST_OPENAI_KEY: 'sk-operator-secret' };
    const stderr = new PassThrough();
    await expect(policyConfig(undefined, {}, env, stderr, outputDir)).rejects.toThrow(
      'env.yaml policy_api_key: ${oc.env:GYM_TEST_OPENAI_KEY} reads the host environment, which an env.yaml that was only found in the current directory may not',
    );
    expect(String(stderr.read())).toContain(
      `gym: reading ${join(outputDir, 'env.yaml')} (found in the current directory`,
    );
    // Given explicitly, the same file is the operator's choice.
    const given = new PassThrough();
    expect(await policyConfig(join(outputDir, 'env.yaml'), {}, env, given, '/')).toEqual({
      baseUrl: 'http://127.0.0.1:9/v1',
      apiKey: 'sk-operator-secret',
    });
    expect(String(given.read())).toContain('(--env-yaml)');
    // A found file without host variables still works.
    await writeFile(join(outputDir, 'env.yaml'), 'policy_base_url: http://127.0.0.1:9/v1\n');
    expect(await policyConfig(undefined, {}, env, new PassThrough(), outputDir)).toEqual({
      baseUrl: 'http://127.0.0.1:9/v1',
    });
  });
});

describe("gym eval run and an environment kind's images", () => {
  it("calls a kind's prepareImages with only the rows it runs, and shows what it reports", async () => {
    // A kind of its own folder (not a built-in the CLI knows): its images need no CLI edit.
    daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }] },
      {
        factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
        listen: true,
      },
    );
    outputDir = await mkdtemp(join(tmpdir(), 'gym-eval-kind-images-'));
    const stderr = new PassThrough();
    let said = '';
    stderr.on('data', (chunk: Buffer) => {
      said += chunk.toString();
    });
    const environment = new URL('../../../test/fixtures/imaged-env', import.meta.url).pathname;
    const args = ['eval', 'run', '--env', environment, '--limit', '1', '-o', join(outputDir, 'out.jsonl')];
    const exitCode = await runCli([...args, '--state-dir', daemon.stateDir], {
      stdout: new PassThrough(),
      stderr,
      env: {},
    });
    expect(exitCode).toBe(0);
    // --limit 1: the hook sees the first row only.
    expect(said).toContain('gym: preparing the images of w1\n');
    expect(said).toContain('built gym/imaged-w1:1 in 1.5 s\n');
    expect(said).not.toContain('imaged-w2');
  });
});

describe('gym eval run on Harbor rows from a JSONL file', () => {
  it('builds no image for a row the kind refuses (a row once asked for a 7-day build)', async () => {
    daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }] },
      {
        factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
        listen: true,
      },
    );
    outputDir = await mkdtemp(join(tmpdir(), 'gym-eval-harbor-rows-'));
    const task = join(outputDir, 'task-a');
    await mkdir(join(task, 'tests'), { recursive: true });
    await mkdir(join(task, 'environment'));
    await writeFile(join(task, 'tests', 'test.sh'), 'echo 1 > /logs/verifier/reward.txt\n');
    await writeFile(join(task, 'instruction.md'), 'do it\n');
    await writeFile(join(task, 'task.toml'), '[environment]\nbuild_timeout_sec = 60\n');
    await writeFile(join(task, 'environment', 'Dockerfile'), 'FROM gym/busybox\nRUN true\n');
    const input = join(outputDir, 'rows.jsonl');
    await writeFile(
      input,
      `${JSON.stringify({ ...(await readHarborTask(task)), build_timeout_sec: 604800 })}\n`,
    );
    const stderr = new PassThrough();
    let said = '';
    stderr.on('data', (chunk: Buffer) => {
      said += chunk.toString();
    });
    const args = ['eval', 'run', '-i', input, '-o', join(outputDir, 'out.jsonl'), '--harness', 'oracle'];
    const exitCode = await runCli([...args, '--state-dir', daemon.stateDir], {
      stdout: new PassThrough(),
      stderr,
      env: {},
    });
    expect(exitCode).not.toBe(0);
    expect(said).toContain('running them as --env harbor');
    expect(said).toContain('no row is a valid harbor task');
    expect(said).toContain('build_timeout_sec');
    expect(said).not.toContain('built ');
  });

  it('says which image it is preparing while it builds (a build once said nothing until it ended)', async () => {
    // The memory provider has no image part: the build fails, after the line that names it.
    daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }] },
      {
        factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
        listen: true,
      },
    );
    outputDir = await mkdtemp(join(tmpdir(), 'gym-eval-harbor-ticker-'));
    const task = join(outputDir, 'task-b');
    await mkdir(join(task, 'tests'), { recursive: true });
    await mkdir(join(task, 'environment'));
    await writeFile(join(task, 'tests', 'test.sh'), 'echo 1 > /logs/verifier/reward.txt\n');
    await writeFile(join(task, 'instruction.md'), 'do it\n');
    await writeFile(join(task, 'task.toml'), '[environment]\nbuild_timeout_sec = 60\n');
    await writeFile(join(task, 'environment', 'Dockerfile'), 'FROM gym/busybox\nRUN true\n');
    const stderr = Object.assign(new PassThrough(), { isTTY: true });
    let said = '';
    stderr.on('data', (chunk: Buffer) => {
      said += chunk.toString();
    });
    const args = ['eval', 'run', '-i', task, '-o', join(outputDir, 'out.jsonl'), '--harness', 'oracle'];
    const exitCode = await runCli([...args, '--state-dir', daemon.stateDir], {
      stdout: new PassThrough(),
      stderr,
      env: {},
    });
    expect(exitCode).not.toBe(0);
    expect(said).toMatch(/preparing the task images \(1 of 1: \S+task-b\S*\), 0 s elapsed/);
  });
});
