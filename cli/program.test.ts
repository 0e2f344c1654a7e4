import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { integer, keyValue, positiveNumber } from './arguments.ts';
import { EXIT_OK, EXIT_USAGE, evalRun, runCli } from './program.ts';

/** Runs `gym ARGS...` in this process; none of these calls gets as far as a daemon. */
async function gym(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const chunks = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
  stdout.on('data', (chunk: Buffer) => chunks.stdout.push(chunk));
  stderr.on('data', (chunk: Buffer) => chunks.stderr.push(chunk));
  const code = await runCli(args, { stdout, stderr, env: {} });
  return {
    code,
    stdout: Buffer.concat(chunks.stdout).toString(),
    stderr: Buffer.concat(chunks.stderr).toString(),
  };
}

describe('gym --help', () => {
  it('lists every command as noun and verb; with no command it is a usage error', async () => {
    const help = await gym(['--help']);
    expect(help.code).toBe(EXIT_OK);
    for (const command of [
      'daemon start',
      'sandbox exec',
      'sandbox fork',
      'snapshot ls',
      'snapshot rm',
      'access grant',
      'access revoke',
      'eval run',
      'eval profile',
      'image build',
      'doctor',
    ])
      expect(help.stdout).toMatch(new RegExp(`^  ${command} `, 'm'));
    const bare = await gym([]);
    expect(bare.code).toBe(EXIT_USAGE);
    expect(bare.stderr).toContain('eval run');
  });

  it("lists a group's verbs, and a verb's options with their aliases", async () => {
    const group = await gym(['eval', '--help']);
    expect(group.code).toBe(EXIT_OK);
    expect(group.stdout).toContain('Usage: gym eval');
    for (const verb of ['run', 'reverify', 'profile'])
      expect(group.stdout).toMatch(new RegExp(`^  ${verb} `, 'm'));
    const run = await gym(['eval', 'run', '--help']);
    expect(run.code).toBe(EXIT_OK);
    for (const option of [
      '-i, --input <FILE>',
      '-o, --output <FILE>',
      '--model-url, --policy-base-url <URL>',
      '--model-api-key, --policy-api-key <KEY>',
      '--limit <N>',
      '--concurrency <N>',
    ])
      expect(run.stdout).toContain(option);
    const exec = await gym(['sandbox', 'exec', '-h']);
    expect(exec.stdout).toContain('Usage: gym sandbox exec [options] <id> <command...>');
  });

  it('takes `gym help NOUN VERB` as `gym NOUN VERB --help`', async () => {
    const help = await gym(['help', 'eval', 'run']);
    expect(help.code).toBe(EXIT_OK);
    expect(help.stdout).toContain('Usage: gym eval run [options]');
    expect((await gym(['help'])).stdout).toContain('sandbox exec');
  });

  it('answers a group named without a verb with its help, as a usage error', async () => {
    const result = await gym(['sandbox']);
    expect(result.code).toBe(EXIT_USAGE);
    expect(result.stderr).toContain('Usage: gym sandbox');
  });
});

describe('usage errors exit 2 and say what is wrong', () => {
  it.each([
    [
      ['eval', 'run', '-o', 'out.jsonl', '--limit=-1'],
      "option '--limit <N>' argument '-1' is invalid. It must be at least 1.",
    ],
    [['eval', 'run', '-o', 'out.jsonl', '--limit', '0'], 'It must be at least 1.'],
    [['eval', 'run', '-o', 'out.jsonl', '--limit', '2.5'], 'It must be an integer.'],
    [['eval', 'run', '-o', 'out.jsonl', '--concurrency', '0'], "'--concurrency <N>' argument '0' is invalid"],
    [['eval', 'run', '-o', 'out.jsonl', '--num-repeats', 'three'], 'It must be an integer.'],
    [['eval', 'run', '-o', 'out.jsonl', '--max-infra-attempts', '1e3'], 'It must be an integer.'],
    [['daemon', 'start', '--port', '65536'], 'It must be between 0 and 65535.'],
    [['daemon', 'stop', '--timeout', '-5'], 'It must be greater than 0.'],
    [['sandbox', 'create', '--image', 'x', '--cpus', 'lots'], 'It must be a number.'],
    [['sandbox', 'create', '--image', 'x', '--memory=-4'], "'--memory <MIB>' argument '-4' is invalid"],
    [
      ['sandbox', 'create', '--image', 'x', '--network', 'overlay'],
      'Allowed choices are none, host, bridge.',
    ],
    [['sandbox', 'ls', '--label', 'novalue'], 'It must be KEY=VALUE'],
    [['pool', 'create', 'p', '--image', 'x', '--min-idle', '-1'], 'It must be zero or more.'],
    [['eval', 'run', '-o', 'out.jsonl', '--bogus'], "unknown option '--bogus'"],
    [['eval', 'frobnicate'], "unknown command 'frobnicate'"],
    [['eval', 'run'], "required option '-o, --output <FILE>' not specified"],
    [['sandbox', 'exec', 'sbx-1'], "missing required argument 'command'"],
    [['sandbox', 'exec', 'sbx-1', 'ls', '-la'], 'the command goes after --'],
    [['env', 'show', 'a', 'b'], 'too many arguments'],
    [['sandbox', 'exec', 'sbx-1', 'ls', '--version'], "unknown option '--version'"],
  ])('gym %j', async (args, message) => {
    const result = await gym(args);
    expect(result.code).toBe(EXIT_USAGE);
    expect(result.stderr).toContain(message);
    expect(result.stderr).toMatch(/^gym: /);
    expect(result.stdout).toBe('');
  });

  it('reports a usage mistake the body finds (neither --env nor --input) the same way', async () => {
    const result = await gym(['eval', 'run', '-o', 'out.jsonl']);
    expect(result).toMatchObject({
      code: EXIT_USAGE,
      stderr: expect.stringContaining('--env NAME or --input FILE'),
    });
  });

  it.each([
    ['{binaryPath', '--harness-options is not JSON'],
    ['["/usr/local/bin/mini"]', '--harness-options must be a JSON object'],
  ])('refuses --harness-options %s before any rollout', async (value, message) => {
    const result = await gym(['eval', 'run', '--env', 'mcqa', '-o', 'out.jsonl', '--harness-options', value]);
    expect(result).toMatchObject({ code: EXIT_USAGE, stderr: expect.stringContaining(message) });
  });

  it('hands --harness-options to the harness (which checks them before any rollout)', async () => {
    const result = await gym([
      'eval',
      'run',
      '--env',
      'mcqa',
      '-o',
      'out.jsonl',
      '--harness',
      'mini-swe-agent',
      '--harness-options',
      '{"binaryPath": "mini"}',
    ]);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain('binaryPath must be an absolute path, not "mini"');
  });
});

describe("NeMo Gym's flag names for gym eval run", () => {
  it('map onto the options the command reads', () => {
    const command = evalRun()
      .exitOverride()
      .action(() => {});
    command.parse(
      [
        '-i',
        'rows.jsonl',
        '-o',
        'out.jsonl',
        '--model-url',
        'http://127.0.0.1:1/v1',
        '--model-api-key',
        'k1',
      ],
      { from: 'user' },
    );
    expect(command.opts()).toMatchObject({
      input: 'rows.jsonl',
      output: 'out.jsonl',
      policyBaseUrl: 'http://127.0.0.1:1/v1',
      policyApiKey: 'k1',
      numRepeats: 1,
      concurrency: 4,
      maxInfraAttempts: 3,
    });
    const long = evalRun()
      .exitOverride()
      .action(() => {});
    long.parse(['--input=a', '--output=b', '--policy-base-url=u', '--policy-api-key=k2', '--limit=7'], {
      from: 'user',
    });
    expect(long.opts()).toMatchObject({
      input: 'a',
      output: 'b',
      policyBaseUrl: 'u',
      policyApiKey: 'k2',
      limit: 7,
    });
  });
});

describe('option value parsers', () => {
  it('integer: digits only, within range', () => {
    expect(integer(1)('12')).toBe(12);
    expect(integer(0, 10)(' 0 ')).toBe(0);
    for (const bad of ['', '-1', '0x10', '1e3', '2.0', 'NaN', 'Infinity', '11'])
      expect(() => integer(0, 10)(bad), bad).toThrow(/It must be/);
  });

  it('positiveNumber: decimals above zero, nothing else', () => {
    expect(positiveNumber('0.5')).toBe(0.5);
    expect(positiveNumber('2')).toBe(2);
    for (const bad of ['0', '-1', 'Infinity', '1e2', '', 'one'])
      expect(() => positiveNumber(bad), bad).toThrow();
  });

  it('keyValue: collects KEY=VALUE pairs, values may hold =', () => {
    expect(keyValue('B=x=y', keyValue('A=1', {}))).toEqual({ A: '1', B: 'x=y' });
    expect(keyValue('EMPTY=', {})).toEqual({ EMPTY: '' });
    expect(() => keyValue('=v', {})).toThrow(/KEY=VALUE/);
    expect(() => keyValue('novalue', {})).toThrow(/KEY=VALUE/);
  });
});
