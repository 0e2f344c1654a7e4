/**
 * The provider contract against an SSH runtime (a row of test/hpc/ssh-runtimes.ts) in
 * Slurm mode: its hosts are the nodes of an allocation it holds on the real one-node Slurm
 * cluster (scripts/slurm-up.sh), whose node's NodeAddr is the address of a real OpenSSH server
 * with the runtime's stand-in (one sshd per row, on its own port). Every job the suite's
 * providers held is cancelled at the end.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import { silentLogger } from '../../core/logger.ts';
import { describeSandboxProviderContract } from '../../providers/contract/index.ts';
import { BUSYBOX_REFERENCE } from '../fixtures/busybox-root.ts';
import { testContext } from '../fixtures/provider-context.ts';
import { cancelJobsNamed, requireSlurm, SLURM_NODE_ADDRESS, SLURM_PARTITION } from './slurm.ts';
import { SSH_RUNTIMES, type SshRuntimeRow } from './ssh-runtimes.ts';

/**
 * Registers the suite for one runtime's row. Each row has a test file of its own
 * (`<runtime>-slurm-contract.int.test.ts`), so the rows run in parallel as separate files did.
 */
export async function describeSshRuntimeSlurmContract(runtime: SshRuntimeRow['runtime']): Promise<void> {
  requireSlurm();
  const rows = await Promise.all(
    SSH_RUNTIMES.filter((row) => row.runtime === runtime).map(async (row) => ({
      row,
      jobName: `gym-contract-${row.runtime}-${process.pid}`,
      node: await row.node(SLURM_NODE_ADDRESS, row.slurmPortBase + (process.pid % 1000)),
      stateDirectory: await mkdtemp(join(tmpdir(), `gym-${row.runtime}-slurm-contract-`)),
    })),
  );
  afterAll(async () => {
    for (const { jobName, node, stateDirectory } of rows) {
      cancelJobsNamed(jobName);
      await node.cleanup();
      await rm(stateDirectory, { recursive: true, force: true });
    }
  });

  for (const { row, jobName, node, stateDirectory } of rows) {
    const { name: _name, host: _host, ...nodeSettings } = node.host;
    describeSandboxProviderContract({
      name: `${row.runtime} over ssh in a Slurm allocation (stand-in)`,
      image: BUSYBOX_REFERENCE,
      capabilities: {
        sessions: true,
        snapshot: false,
        gatewayReach: true,
        timeoutKill: 'tagged',
        ...row.capabilities,
        imageFormats: ['rootfs', 'derived'],
      },
      testTimeoutMs: 120_000,
      createProvider: () =>
        row.provider(
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
        row.provider(
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
  }
}
