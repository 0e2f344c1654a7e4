import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { ProviderContext } from '../providers/sandbox-provider.ts';
import { startTestDaemon } from '../test/daemon-harness.ts';
import { MemoryProvider } from '../test/fixtures/memory-provider.ts';

const factories = { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) };
const providers = [{ name: 'memory' }];

describe('daemon start-up', () => {
  it('refuses a second daemon on the same state directory, and frees it on stop', async () => {
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-lock-'));
    const first = await startTestDaemon({ stateDir, providers }, { factories });
    const second = await startTestDaemon({ stateDir, providers }, { factories }).catch(
      (error: unknown) => error,
    );
    expect(second).toMatchObject({ code: 'DAEMON_CONFLICT' });
    expect((second as Error).message).toContain(`pid ${process.pid}`);
    await first.stop();
    const third = await startTestDaemon({ stateDir, providers }, { factories });
    await third.stop();
    await rm(stateDir, { recursive: true, force: true });
  });

  it('says clearly when its port is taken, and leaves the state directory free', async () => {
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const port = (blocker.address() as { port: number }).port;
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-port-'));
    const error = await startTestDaemon(
      { stateDir, providers, listen: { host: '127.0.0.1', port } },
      { factories, listen: true },
    ).catch((caught: unknown) => caught);
    expect(error).toMatchObject({ code: 'DAEMON_CONFLICT' });
    expect((error as Error).message).toContain(`cannot listen on 127.0.0.1:${port}`);
    blocker.close();
    const retried = await startTestDaemon({ stateDir, providers }, { factories });
    await retried.stop();
    await rm(stateDir, { recursive: true, force: true });
  });
});
