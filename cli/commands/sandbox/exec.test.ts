import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { GymClient } from '../../../client/client.ts';
import { silentLogger } from '../../../core/logger.ts';
import type { ProviderContext } from '../../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../../../test/daemon-harness.ts';
import { MemoryProvider } from '../../../test/fixtures/memory-provider.ts';
import { sandboxExecCommand } from './exec.ts';

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
    const exitCode = await sandboxExecCommand.run({
      args: [id, '--state-dir', daemon.stateDir, '--session', 'main', '--', 'echo', 'hi'],
      stdout,
      stderr,
      logger: silentLogger,
      env: {},
    });
    expect(exitCode).toBe(0);
    expect(err()).toContain('no sessions; the command ran one-shot');
  });
});
