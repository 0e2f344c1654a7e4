/**
 * The provider contract against the apptainer provider over real SSH: a real OpenSSH server on
 * its own loopback address stands for a compute node, and the apptainer stand-in
 * (test/stand-ins/apptainer.ts) for Apptainer, which cannot be installed here.
 */
import { afterAll } from 'vitest';
import { silentLogger } from '../../core/logger.ts';
import { ApptainerProvider } from '../../providers/apptainer/apptainer-provider.ts';
import { describeSandboxProviderContract } from '../../providers/contract/index.ts';
import { BUSYBOX_REFERENCE } from '../fixtures/busybox-root.ts';
import { testContext } from '../fixtures/provider-context.ts';
import { computeNode } from './node.ts';

const node = await computeNode('127.0.0.3', 23000 + (process.pid % 1000));
afterAll(() => node.cleanup());

describeSandboxProviderContract({
  name: 'apptainer over ssh (stand-in)',
  image: BUSYBOX_REFERENCE,
  capabilities: {
    sessions: true,
    snapshot: false,
    gatewayReach: true,
    timeoutKill: 'tagged',
    imageFormats: ['rootfs', 'derived'],
  },
  testTimeoutMs: 120_000,
  createProvider: () =>
    new ApptainerProvider(
      { hosts: [node.host], keepaliveIntervalMs: 1000 },
      testContext({ logger: silentLogger }),
    ),
});
