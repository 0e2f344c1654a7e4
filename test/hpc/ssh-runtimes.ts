/**
 * One row per SSH runtime for the shared HPC tests: how to make a compute node with the
 * runtime's stand-in (a real sshd), the provider, and what the contract expects of it. A new SSH
 * runtime adds a row here.
 */

import { ApptainerProvider } from '../../providers/apptainer/apptainer-provider.ts';
import { EnrootProvider } from '../../providers/enroot/enroot-provider.ts';
import type { ProviderCapabilities, ProviderContext } from '../../providers/sandbox-provider.ts';
import type { HostConfig } from '../../providers/ssh/host-fleet.ts';
import type { SshRuntimeProvider } from '../../providers/ssh-runtime/ssh-runtime-provider.ts';
import { enrootNode } from './enroot-node.ts';
import { computeNode } from './node.ts';

/** A compute node for one runtime: its sshd, its host entry and its clean-up. */
export type RuntimeNode = Awaited<ReturnType<typeof computeNode>> | Awaited<ReturnType<typeof enrootNode>>;

export interface SshRuntimeRow {
  runtime: 'apptainer' | 'enroot';
  /** The stand-in's node on `address` (a loopback address of the row's own) and `port`. */
  node(address: string, port: number): Promise<RuntimeNode>;
  provider(options: unknown, context: ProviderContext): SshRuntimeProvider<HostConfig, unknown>;
  /** What the contract expects beyond the SSH runtimes' shared capabilities. */
  capabilities: Partial<ProviderCapabilities>;
  /** The row's own loopback address and port base for the plain contract (distinct per row). */
  address: string;
  portBase: number;
  /** The port base of its node in the Slurm contract (the Slurm node's address is shared). */
  slurmPortBase: number;
  /** Whether the row runs the sessions-past-one-connection case (the pool is the fleet's, shared). */
  sessionsPastOneConnection: boolean;
  /** The loopback address and port base of its node in the eval suite (`ssh-runtime-eval.ts`). */
  evalAddress: string;
  evalPortBase: number;
}

const asShared = (provider: unknown) => provider as SshRuntimeProvider<HostConfig, unknown>;

export const SSH_RUNTIMES: SshRuntimeRow[] = [
  {
    runtime: 'apptainer',
    node: computeNode,
    provider: (options, context) => asShared(new ApptainerProvider(options, context)),
    capabilities: {},
    address: '127.0.0.3',
    portBase: 23000,
    slurmPortBase: 29000,
    sessionsPastOneConnection: true,
    evalAddress: '127.0.0.8',
    evalPortBase: 26000,
  },
  {
    runtime: 'enroot',
    node: enrootNode,
    provider: (options, context) => asShared(new EnrootProvider(options, context)),
    // Enroot has no cgroups and maps one user into a container: the memory-limit and other-user
    // cases are not registered.
    capabilities: { pidsLimit: false, memoryLimit: false, otherUsers: false },
    address: '127.0.0.12',
    portBase: 29000,
    slurmPortBase: 31000,
    sessionsPastOneConnection: false,
    evalAddress: '127.0.0.11',
    evalPortBase: 28000,
  },
];
