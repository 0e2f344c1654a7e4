import { afterEach, describe, expect, it } from 'vitest';
import { GymClient } from '../client/client.ts';
import type { ProviderContext } from '../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../test/daemon-harness.ts';
import { MemoryProvider } from '../test/fixtures/memory-provider.ts';
import { clientSandboxHandle } from './sandbox-handle.ts';

let daemon: TestDaemon | undefined;
afterEach(async () => {
  await daemon?.cleanup();
  daemon = undefined;
});

async function handleOnDaemon() {
  daemon = await startTestDaemon(
    { providers: [{ name: 'memory' }] },
    {
      factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
      listen: true,
    },
  );
  const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
  const { id } = await client.createSandbox({ image: 'img' });
  return clientSandboxHandle(client, id);
}

describe('clientSandboxHandle.readFile', () => {
  it('stops reading a file past its byte limit with FILE_TOO_LARGE', async () => {
    // Seen: an agent's result file was read whole into the eval runner's memory.
    const handle = await handleOnDaemon();
    await handle.writeFile('/out/result.json', Buffer.alloc(3 * 1024 * 1024, 'r'));
    const error = await handle
      .readFile('/out/result.json', { maxBytes: 64 * 1024 })
      .catch((caught: unknown) => caught);
    expect(error).toMatchObject({ code: 'FILE_TOO_LARGE', details: { maxBytes: 64 * 1024 } });
    expect((error as Error).message).toContain('/out/result.json');
  });

  it('reads a file within the limit, and by default up to 16 MiB', async () => {
    const handle = await handleOnDaemon();
    await handle.writeFile('/out/small.txt', Buffer.from('0.75\n'));
    expect((await handle.readFile('/out/small.txt', { maxBytes: 5 })).toString()).toBe('0.75\n');
    await handle.writeFile('/out/big.bin', Buffer.alloc(17 * 1024 * 1024, 1));
    await expect(handle.readFile('/out/big.bin')).rejects.toMatchObject({ code: 'FILE_TOO_LARGE' });
    await handle.writeFile('/out/fits.bin', Buffer.alloc(1024 * 1024, 1));
    expect((await handle.readFile('/out/fits.bin')).length).toBe(1024 * 1024);
  });
});
