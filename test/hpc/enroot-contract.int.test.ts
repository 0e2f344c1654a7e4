/**
 * The provider contract against the enroot provider over real SSH: a real OpenSSH server on its
 * own loopback address stands for a compute node, and the enroot stand-in
 * (test/stand-ins/enroot.ts) for Enroot, which cannot be installed here. Enroot has no cgroups
 * and maps one user into a container: the memory-limit and other-user cases are not registered.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import { silentLogger } from '../../core/logger.ts';
import { describeSandboxProviderContract } from '../../providers/contract/index.ts';
import { EnrootProvider } from '../../providers/enroot/enroot-provider.ts';
import { BUSYBOX_REFERENCE } from '../fixtures/busybox-root.ts';
import { testContext } from '../fixtures/provider-context.ts';
import { enrootNode } from './enroot-node.ts';

const node = await enrootNode('127.0.0.12', 29000 + (process.pid % 1000));
const stateDirectory = await mkdtemp(join(tmpdir(), 'gym-enroot-contract-'));
afterAll(async () => {
  await node.cleanup();
  await rm(stateDirectory, { recursive: true, force: true });
});

describeSandboxProviderContract({
  name: 'enroot over ssh (stand-in)',
  image: BUSYBOX_REFERENCE,
  capabilities: {
    sessions: true,
    snapshot: false,
    gatewayReach: true,
    timeoutKill: 'tagged',
    pidsLimit: false,
    memoryLimit: false,
    otherUsers: false,
    imageFormats: ['rootfs', 'derived'],
  },
  testTimeoutMs: 120_000,
  createProvider: () =>
    new EnrootProvider(
      { hosts: [node.host], keepaliveIntervalMs: 1000 },
      testContext({ logger: silentLogger, stateDirectory }),
    ),
});
