/** Terminals on Docker (issue 35, item 3): the shared cases (`pty-cases.ts`) through a daemon. */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { dockerTestEnvironment, removeNamespaceContainers, testImage } from '../docker-available.ts';
import { waitFor } from '../wait-for.ts';
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
    await removeNamespaceContainers(docker, namespace);
  });

  ptyCases({
    daemon: () => daemon,
    client: () => client,
    sandbox: async () => (await client.createSandbox({ image: busybox, ttlSeconds: 600 })).id,
    hostHasProcess: hostProcessWith,
  });
});

describe.skipIf(skipReason !== undefined)('a terminal at the daemon stop', () => {
  const namespace = `ptystop-${randomBytes(4).toString('hex')}`;

  afterAll(async () => {
    await removeNamespaceContainers(docker, namespace);
  });

  it('a client waiting for output does not hold the stop: its read answers, the stop ends', async () => {
    const daemon = await startTestDaemon({ namespace, destroyOnShutdown: true }, { listen: true });
    const client = new GymClient({ url: daemon.address.url as string, token: daemon.token });
    const sandboxId = (await client.createSandbox({ image: busybox })).id;
    const { pty } = await client.ptys.create(sandboxId, { command: 'sleep 300' });
    const waiting = client.ptys.read(sandboxId, pty.id, { since: 0, waitMs: 60_000 });
    // The read has reached the daemon and waits there before the stop begins.
    await waitFor('the read to wait in the daemon', () => daemon.manager.ptys.stats().waiting === 1);
    await daemon.cleanup();
    expect((await waiting).data.length).toBe(0);
    expect(await docker.listContainers({ filters: { label: [`gym.namespace=${namespace}`] } })).toEqual([]);
  });
});
