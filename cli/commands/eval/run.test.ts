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

describe("gym eval run's policy key and URL from different sources", () => {
  const memoryModule = new URL('../../../test/fixtures/memory-provider.ts', import.meta.url).pathname;

  /**
   * Runs `gym eval run` (one mcqa rollout) in a folder whose ./env.yaml is `envYaml`, as a
   * downloaded folder would be run; the loopback model server stands in for the URL the file
   * names and records what arrives. Returns the exit code, what was said, and the
   * Authorization headers the file's URL received.
   */
  async function runInFoundFolder(options: {
    envYaml: (url: string) => string;
    args?: string[];
    env?: Record<string, string>;
    /** Run against a daemon already running (else the run starts one in-process under GYM_CONFIG). */
    runningDaemon?: boolean;
    /** Extra lines for GYM_CONFIG (in-process daemon only). */
    configLines?: string[];
  }): Promise<{ exitCode: number; said: string; authorizations: Array<string | undefined> }> {
    model = await startScriptedModelServer(
      ModelScriptSchema.parse({ conversations: [{ replies: [{ content: 'Answer: B' }] }] }),
    );
    outputDir = await mkdtemp(join(tmpdir(), 'gym-eval-found-key-'));
    await writeFile(join(outputDir, 'env.yaml'), options.envYaml(model.baseUrl));
    const env: Record<string, string> = { ...options.env };
    const args = ['eval', 'run', '--env', 'mcqa', '--limit', '1', '-o', join(outputDir, 'out.jsonl')];
    if (options.runningDaemon === true) {
      daemon = await startTestDaemon(
        { providers: [{ name: 'memory' }] },
        {
          factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
          listen: true,
        },
      );
      args.push('--state-dir', daemon.stateDir);
    } else {
      const config = join(outputDir, 'gym.yaml');
      await writeFile(
        config,
        [
          `stateDir: ${join(outputDir, 'state')}`,
          'providers:',
          `  - { name: memory, module: ${memoryModule} }`,
          ...(options.configLines ?? []),
          '',
        ].join('\n'),
      );
      env.GYM_CONFIG = config;
    }
    const stderr = new PassThrough();
    let said = '';
    stderr.on('data', (chunk: Buffer) => {
      said += chunk.toString();
    });
    const before = process.cwd();
    process.chdir(outputDir);
    let exitCode: number;
    try {
      exitCode = await runCli([...args, ...(options.args ?? [])], { stdout: new PassThrough(), stderr, env });
    } finally {
      process.chdir(before);
    }
    const authorizations = model.requests.map(
      (request) => request.headers.authorization as string | undefined,
    );
    return { exitCode, said, authorizations };
  }

  it.each([
    { runningDaemon: false, label: 'an in-process daemon' },
    { runningDaemon: true, label: 'a running daemon' },
  ])(
    "never sends --policy-api-key to a found env.yaml's policy_base_url ($label)",
    async ({ runningDaemon }) => {
      // Seen: a downloaded folder's env.yaml with only policy_base_url got the operator's key.
      const { exitCode, said, authorizations } = await runInFoundFolder({
        envYaml: (url) => `policy_base_url: ${url}\n`,
        args: ['--policy-api-key', 'sk-operator-secret'],
        runningDaemon,
      });
      expect(authorizations.filter((header) => header?.includes('sk-operator-secret'))).toEqual([]);
      expect(exitCode).not.toBe(0);
      expect(said).toContain(
        'the key of --policy-api-key would go to the URL of policy_base_url in ./env.yaml (only found in the current directory)',
      );
    },
  );

  it("never sends the daemon's configured key (GYM_CONFIG or GYM_POLICY_API_KEY) to a found file's URL", async () => {
    const fromConfig = await runInFoundFolder({
      envYaml: (url) => `policy_base_url: ${url}\n`,
      configLines: [
        'gateway: { upstream: { baseUrl: http://127.0.0.1:9/v1, apiKey: sk-from-config }, maxRetries: 0 }',
      ],
    });
    expect(fromConfig.exitCode).toBe(0);
    expect(fromConfig.authorizations.length).toBeGreaterThan(0);
    expect(fromConfig.authorizations.filter((header) => header?.includes('sk-from-config'))).toEqual([]);
    await model?.close();
    await rm(outputDir!, { recursive: true, force: true });

    const fromEnvironment = await runInFoundFolder({
      envYaml: (url) => `policy_base_url: ${url}\n`,
      env: { GYM_POLICY_BASE_URL: 'http://127.0.0.1:9/v1', GYM_POLICY_API_KEY: 'sk-from-environment' },
    });
    expect(fromEnvironment.exitCode).toBe(0);
    expect(fromEnvironment.authorizations.length).toBeGreaterThan(0);
    expect(
      fromEnvironment.authorizations.filter((header) => header?.includes('sk-from-environment')),
    ).toEqual([]);
  });

  it("lets a found file's own key go to its own URL, and the operator's key to a URL the operator gave", async () => {
    // The file's key is its author's, not the operator's: nothing of the operator's leaves.
    const own = await runInFoundFolder({
      envYaml: (url) => `policy_base_url: ${url}\npolicy_api_key: sk-folder-author\n`,
    });
    expect(own.exitCode).toBe(0);
    expect(own.authorizations[0]).toBe('Bearer sk-folder-author');
    await model?.close();
    await rm(outputDir!, { recursive: true, force: true });

    // Given with --env-yaml, the same file is the operator's choice: the flag's key goes to its URL.
    const given = await runInFoundFolder({
      envYaml: (url) => `policy_base_url: ${url}\n`,
      args: ['--env-yaml', 'env.yaml', '--policy-api-key', 'sk-operator'],
    });
    expect(given.exitCode).toBe(0);
    expect(given.authorizations[0]).toBe('Bearer sk-operator');
  });
});

describe('policyConfig, a key and a URL from each pair of sources', () => {
  const cases: Array<{
    name: string;
    file?: string;
    given?: boolean;
    flags?: { baseUrl?: string; apiKey?: string };
    refused: boolean;
  }> = [
    {
      name: 'flag key, found URL',
      file: 'policy_base_url: http://found/v1\n',
      flags: { apiKey: 'k' },
      refused: true,
    },
    {
      name: "flag key over a found file's own key, found URL",
      file: 'policy_base_url: http://found/v1\npolicy_api_key: theirs\n',
      flags: { apiKey: 'k' },
      refused: true,
    },
    {
      name: 'flag key, flag URL, found file',
      file: 'policy_base_url: http://found/v1\n',
      flags: { apiKey: 'k', baseUrl: 'http://mine/v1' },
      refused: false,
    },
    {
      name: 'found key, flag URL',
      file: 'policy_api_key: theirs\n',
      flags: { baseUrl: 'http://mine/v1' },
      refused: false,
    },
    {
      name: 'found key, found URL',
      file: 'policy_base_url: http://found/v1\npolicy_api_key: theirs\n',
      refused: false,
    },
    {
      name: 'flag key, given file URL',
      file: 'policy_base_url: http://given/v1\n',
      given: true,
      flags: { apiKey: 'k' },
      refused: false,
    },
    {
      name: 'given file key, flag URL',
      file: 'policy_api_key: mine\n',
      given: true,
      flags: { baseUrl: 'http://mine/v1' },
      refused: false,
    },
    { name: 'flag key, no URL', flags: { apiKey: 'k' }, refused: false },
  ];
  it.each(cases)('$name: refused $refused', async ({ file, given, flags, refused }) => {
    outputDir = await mkdtemp(join(tmpdir(), 'gym-policy-sources-'));
    if (file !== undefined) await writeFile(join(outputDir, 'env.yaml'), file);
    const result = policyConfig(
      given === true ? join(outputDir, 'env.yaml') : undefined,
      flags ?? {},
      {},
      new PassThrough(),
      outputDir,
    );
    if (refused) await expect(result).rejects.toMatchObject({ code: 'VALIDATION_FAILED' });
    else await expect(result).resolves.toBeDefined();
  });
});

describe("gym eval run's stderr", () => {
  const environment = new URL('../../../test/fixtures/verifier-error-env', import.meta.url).pathname;

  async function run(
    env: Record<string, string>,
  ): Promise<{ exitCode: number; said: string; output: string }> {
    daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }] },
      {
        factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
        listen: true,
      },
    );
    outputDir = await mkdtemp(join(tmpdir(), 'gym-eval-stderr-'));
    const output = join(outputDir, 'out.jsonl');
    const stderr = new PassThrough();
    let said = '';
    stderr.on('data', (chunk: Buffer) => {
      said += chunk.toString();
    });
    const args = ['eval', 'run', '--env', environment, '--concurrency', '1', '-o', output];
    const exitCode = await runCli([...args, '--state-dir', daemon.stateDir], {
      stdout: new PassThrough(),
      stderr,
      env,
    });
    return { exitCode, said, output };
  }

  it('names each rollout as it ends, a verifier error too, with the running mean the run ends with; logs are readable lines', async () => {
    // Seen: after a verifier error the line named the previous rollout, the running mean counted
    // the rollout without a reward as a 0 (0.500 against a final 0.667), and the warning was a
    // raw JSON line among the readable ones.
    const { said, output } = await run({});
    const lines = said.split('\n').filter((line) => line.startsWith('rollout '));
    expect(lines).toHaveLength(4);
    expect(lines[1]).toMatch(/^rollout 2\/4 task 1 repeat 0: verifier_error \(mean 1\.000,/);
    expect(lines[3]).toMatch(/^rollout 4\/4 task 3 repeat 0: reward 1 \(mean 0\.667,/);
    const [metrics] = JSON.parse(
      await readFile(output.replace(/\.jsonl$/, '_aggregate_metrics.json'), 'utf8'),
    ) as Array<{ agent_metrics: Record<string, number> }>;
    expect(metrics!.agent_metrics['mean/reward']!.toFixed(3)).toBe('0.667');
    expect(said).toContain(
      'gym: warning: verifier error: no reward (task 1, rollout 0, reason the test wrote no reward)',
    );
    expect(said.split('\n').filter((line) => line.startsWith('{'))).toEqual([]);
  });

  it('writes pino JSON log lines when GYM_LOG_FORMAT=json asks for them', async () => {
    const { said } = await run({ GYM_LOG_FORMAT: 'json' });
    const json = said
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as { msg: string; task: number });
    expect(json).toContainEqual(expect.objectContaining({ msg: 'verifier error: no reward', task: 1 }));
  });
});
