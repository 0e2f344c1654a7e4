/**
 * Terminals on Kubernetes (issue 35, item 3): the shared cases (`pty-cases.ts`) through a daemon
 * whose provider is Kubernetes, against the test-only API emulator (test/k8s-emulator/), which
 * serves pods/exec with a terminal and its resize channel from the Docker engine: a Pod's
 * processes are this host's, so one that outlived its Pod would show in this host's /proc.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';
import { KubernetesEmulator } from '../k8s-emulator/emulator.ts';
import { hostProcessWith, ptyCases } from './pty-cases.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';
const NAMESPACE = 'gym-pty-test';

describe.skipIf(skipReason !== undefined)('terminals on kubernetes (through the emulator)', () => {
  let emulator: KubernetesEmulator;
  let daemon: TestDaemon;
  let client: GymClient;
  let directory = '';

  beforeAll(async () => {
    emulator = await KubernetesEmulator.start(docker);
    directory = await mkdtemp(join(tmpdir(), 'gym-k8s-pty-'));
    const kubeconfigPath = join(directory, 'kubeconfig');
    await writeFile(kubeconfigPath, emulator.kubeconfig(NAMESPACE), { mode: 0o600 });
    daemon = await startTestDaemon(
      {
        namespace: `k8spty-${randomBytes(3).toString('hex')}`,
        providers: [{ name: 'kubernetes', options: { kubeconfigPath } }],
      },
      { listen: true },
    );
    client = new GymClient({ url: daemon.address.url as string, token: daemon.token });
  }, 120_000);

  afterAll(async () => {
    await daemon?.stop({ destroy: true });
    await daemon?.cleanup();
    await emulator?.close();
    if (directory !== '') await rm(directory, { recursive: true, force: true });
  });

  ptyCases({
    daemon: () => daemon,
    client: () => client,
    sandbox: async () =>
      (await client.createSandbox({ image: busybox, provider: 'kubernetes', ttlSeconds: 600 })).id,
    hostHasProcess: hostProcessWith,
  });
});
