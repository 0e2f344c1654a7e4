import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { GymClient } from '../../../client/client.ts';
import type { ProviderContext } from '../../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../../../test/daemon-harness.ts';
import { MemoryProvider } from '../../../test/fixtures/memory-provider.ts';
import { runCli } from '../../program.ts';

let daemon: TestDaemon | undefined;
afterEach(async () => {
  await daemon?.cleanup();
  daemon = undefined;
});

function collect(stream: PassThrough): () => string {
  const chunks: Buffer[] = [];
  stream.on('data', (chunk: Buffer) => chunks.push(chunk));
  return () => Buffer.concat(chunks).toString('utf8');
}

describe('gym sandbox exec --session', () => {
  it('says on stderr when the provider has no sessions and the command ran one-shot', async () => {
    daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }] },
      {
        factories: {
          memory: (_options: unknown, context: ProviderContext) =>
            new MemoryProvider(context, { capabilities: { sessions: false } }),
        },
        listen: true,
      },
    );
    const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
    const { id } = await client.createSandbox({ image: 'img' });
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    const err = collect(stderr);
    const exitCode = await runCli(
      ['sandbox', 'exec', id, '--state-dir', daemon.stateDir, '--session', 'main', '--', 'echo', 'hi'],
      { stdout, stderr, env: {} },
    );
    expect(exitCode).toBe(0);
    expect(err()).toContain('no sessions; the command ran one-shot');
  });

  it('passes everything after -- to the sandbox as the command, options included', async () => {
    const provider: { current?: MemoryProvider } = {};
    daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }] },
      {
        factories: {
          memory: (_options: unknown, context: ProviderContext) => {
            provider.current = new MemoryProvider(context);
            return provider.current;
          },
        },
        listen: true,
      },
    );
    const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
    const { id } = await client.createSandbox({ image: 'img' });
    const stdout = new PassThrough();
    const out = collect(stdout);
    const exitCode = await runCli(
      [
        'sandbox',
        'exec',
        id,
        '--env',
        'A=1',
        '--state-dir',
        daemon.stateDir,
        '--json',
        '--',
        'ls',
        '--help',
        '--env',
        'B=2',
      ],
      { stdout, stderr: new PassThrough(), env: {} },
    );
    expect(exitCode).toBe(0);
    // The memory provider echoes the argv it was given (in the result: it streams nothing).
    expect(JSON.parse(out())).toMatchObject({ status: 'ok', stdout: 'ls --help --env B=2\n' });
    expect(provider.current?.execs.at(-1)).toMatchObject({
      argv: ['ls', '--help', '--env', 'B=2'],
      env: { A: '1' },
    });
  });
});
