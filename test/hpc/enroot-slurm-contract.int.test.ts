/**
 * The provider contract against the enroot provider in Slurm mode: its hosts are the nodes of an
 * allocation it holds on the real one-node Slurm cluster (scripts/slurm-up.sh), whose node's
 * NodeAddr is the address of a real OpenSSH server with the enroot stand-in. Every job the
 * suite's providers held is cancelled at the end.
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
import { cancelJobsNamed, requireSlurm, SLURM_NODE_ADDRESS, SLURM_PARTITION } from './slurm.ts';

requireSlurm();
const jobName = `gym-contract-enroot-${process.pid}`;
const node = await enrootNode(SLURM_NODE_ADDRESS, 31000 + (process.pid % 1000));
const stateDirectory = await mkdtemp(join(tmpdir(), 'gym-enroot-slurm-contract-'));
afterAll(async () => {
  cancelJobsNamed(jobName);
  await node.cleanup();
  await rm(stateDirectory, { recursive: true, force: true });
});
const { name: _name, host: _host, ...nodeSettings } = node.host;

describeSandboxProviderContract({
  name: 'enroot over ssh in a Slurm allocation (stand-in)',
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
      {
        slurm: {
          partition: SLURM_PARTITION,
          timeLimit: '30',
          jobName,
          pollIntervalMs: 1000,
          idleReleaseMs: 120_000,
          node: nodeSettings,
        },
        keepaliveIntervalMs: 1000,
      },
      testContext({ logger: silentLogger, stateDirectory }),
    ),
  // Slurm's commands run over SSH on a login host nobody listens on.
  createUnreachableProvider: () =>
    new EnrootProvider(
      {
        slurm: {
          login: {
            host: '127.0.0.1',
            port: 9,
            username: 'root',
            privateKeyPath: node.sshd.clientKeyPath,
            knownHostsPath: node.sshd.knownHostsPath,
          },
          jobName: `${jobName}-unreachable`,
          node: nodeSettings,
        },
      },
      testContext({ logger: silentLogger, stateDirectory }),
    ),
});
