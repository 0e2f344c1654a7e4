import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
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

describe('gym sandbox create --pool', () => {
  it('refuses --image, --cpus, --memory and the other spec options, naming them, and creates nothing', async () => {
    // Seen: `--pool P --cpus 4 --memory 8192` printed an id of a sandbox of the pool's own size.
    daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }] },
      {
        factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
        listen: true,
      },
    );
    const stderr = new PassThrough();
    const said = collect(stderr);
    const exitCode = await runCli(
      [
        'sandbox',
        'create',
        '--pool',
        'p',
        '--image',
        'other',
        '--cpus',
        '4',
        '--memory',
        '8192',
        '--state-dir',
        daemon.stateDir,
      ],
      { stdout: new PassThrough(), stderr, env: {} },
    );
    expect(exitCode).toBe(2);
    expect(said()).toContain('--image, --cpus, --memory cannot be used with it');
    expect(daemon.manager.lifecycle.list({}).length).toBe(0);
  });
});
