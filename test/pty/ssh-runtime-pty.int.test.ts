/**
 * Terminals on the SSH runtimes (issue 35, item 3): the shared cases (`pty-cases.ts`) through a
 * daemon whose provider is Apptainer, then Enroot, over real SSH (an OpenSSH server on a loopback
 * address of this file's own) with the runtimes' stand-ins (test/stand-ins/), which run the
 * sandboxes' processes on this host: so a terminal's process that outlived its sandbox would show
 * in this host's /proc.
 */
import { afterAll, beforeAll, describe } from 'vitest';
import { GymClient } from '../../client/client.ts';
import type { ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { BUSYBOX_REFERENCE } from '../fixtures/busybox-root.ts';
import { type RuntimeNode, SSH_RUNTIMES } from '../hpc/ssh-runtimes.ts';
import { hostProcessWith, ptyCases } from './pty-cases.ts';

/** Loopback addresses no other test file uses, one per runtime. */
const ADDRESSES = { apptainer: '127.0.0.51', enroot: '127.0.0.52' } as const;

for (const row of SSH_RUNTIMES) {
  describe(`terminals on ${row.runtime} over ssh (stand-in)`, () => {
    let node: RuntimeNode;
    let daemon: TestDaemon;
    let client: GymClient;

    beforeAll(async () => {
      node = await row.node(ADDRESSES[row.runtime], 34000 + (process.pid % 1000));
      daemon = await startTestDaemon(
        { providers: [{ name: row.runtime, options: { hosts: [node.host] } }] },
        {
          factories: {
            [row.runtime]: (options: unknown, context: ProviderContext) => row.provider(options, context),
          },
          listen: true,
        },
      );
      client = new GymClient({ url: daemon.address.url as string, token: daemon.token });
    }, 120_000);

    afterAll(async () => {
      await daemon?.stop({ destroy: true });
      await daemon?.cleanup();
      await node?.cleanup();
    });

    ptyCases({
      daemon: () => daemon,
      client: () => client,
      sandbox: async () =>
        (await client.createSandbox({ image: BUSYBOX_REFERENCE, provider: row.runtime, ttlSeconds: 600 })).id,
      hostHasProcess: hostProcessWith,
    });
  });
}
