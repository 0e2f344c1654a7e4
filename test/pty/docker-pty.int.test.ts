/** Terminals on Docker (issue 35, item 3): the shared cases (`pty-cases.ts`) through a daemon. */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';
import { hostProcessWith, ptyCases } from './pty-cases.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';

describe.skipIf(skipReason !== undefined)('terminals on docker', () => {
  let daemon: TestDaemon;
  let client: GymClient;
  const namespace = `pty-${randomBytes(4).toString('hex')}`;

  beforeAll(async () => {
    daemon = await startTestDaemon({ namespace }, { listen: true });
    client = new GymClient({ url: daemon.address.url as string, token: daemon.token });
  });

  afterAll(async () => {
    await daemon?.cleanup();
    const containers = await docker.listContainers({
      all: true,
      filters: { label: [`gym.namespace=${namespace}`] },
    });
    for (const container of containers) await docker.getContainer(container.Id).remove({ force: true });
  });

  ptyCases({
    daemon: () => daemon,
    client: () => client,
    sandbox: async () => (await client.createSandbox({ image: busybox, ttlSeconds: 600 })).id,
    hostHasProcess: hostProcessWith,
  });
});
