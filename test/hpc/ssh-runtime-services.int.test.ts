/**
 * A spec's service, health check and declared port through the daemon on each SSH runtime (a real
 * sshd with the runtime's stand-in, the busybox image): the service runs in the instance, its
 * health check gates create, and its port is fetched through the daemon with the port key, over
 * the relay the provider mounts for gateway reach.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import type { ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { BUSYBOX_REFERENCE } from '../fixtures/busybox-root.ts';
import { expectServedPage, httpdServiceSpec } from '../httpd-service.ts';
import { relayBinaryForTests } from '../relay-binary.ts';
import { type RuntimeNode, SSH_RUNTIMES } from './ssh-runtimes.ts';

/** Loopback addresses and port bases of this file's own (distinct from the other HPC suites'). */
const NODES = {
  apptainer: { address: '127.0.0.57', portBase: 33000 },
  enroot: { address: '127.0.0.58', portBase: 34000 },
};

for (const row of SSH_RUNTIMES) {
  describe(`services and ports on ${row.runtime} over ssh (stand-in)`, () => {
    let node: RuntimeNode;
    let daemon: TestDaemon;

    beforeAll(async () => {
      const { address, portBase } = NODES[row.runtime];
      node = await row.node(address, portBase + (process.pid % 1000));
      daemon = await startTestDaemon(
        {
          providers: [
            { name: row.runtime, options: { hosts: [node.host], relayHelperPath: relayBinaryForTests() } },
          ],
        },
        {
          factories: {
            [row.runtime]: (options: unknown, context: ProviderContext) => row.provider(options, context),
          },
          listen: true,
        },
      );
    }, 120_000);

    afterAll(async () => {
      await daemon?.cleanup();
      await node?.cleanup();
    });

    it('runs the service, gates create on its health check, and serves its declared port', async () => {
      const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
      const page = `served on ${row.runtime}\n`;
      const sandbox = await client.createSandbox(httpdServiceSpec(BUSYBOX_REFERENCE, page, '/tmp/www'));
      expect(sandbox.service?.state).toBe('healthy');
      await expectServedPage(client, daemon.address.url!, sandbox.id, page);
      await client.destroySandbox(sandbox.id);
    }, 120_000);
  });
}
