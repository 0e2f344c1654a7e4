/**
 * Slurm mode for a provider over a host fleet (apptainer, enroot): the fleet's hosts are the
 * nodes of the allocation it holds (providers/ssh/slurm-allocation.ts), reached over SSH.
 *
 * - A create calls `ensure()`: the allocation held now, or a new one (adopted after a restart),
 *   pinned until the sandbox is on a node; the fleet's hosts become its nodes.
 * - Each node becomes a host from the `node` template (username, key, known_hosts, work
 *   directory, runtime path…), named after the Slurm node, at its NodeAddr, unless `nodeOverrides` says
 *   otherwise for that node (another SSH address, port or work directory).
 * - When the allocation ends (scancel, time limit, node failure, idle release) the fleet is
 *   emptied at once, so the sandboxes on it drop out of listings and their commands end
 *   `sandbox_gone`; then the provider's `reap` stops what is left of them on the nodes it can
 *   still reach (without pam_slurm_adopt, processes started over SSH outlive the job). The next
 *   create gets a new allocation.
 * - Idle: the allocation counts as used while the fleet lists a sandbox, or a node does not
 *   answer (nothing is given back on a guess).
 */
import { z } from 'zod';
import { GymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import type { ProviderHealth, SandboxListing } from '../sandbox-provider.ts';
import {
  type AllocationEnd,
  type HeldAllocation,
  SlurmAllocation,
  type SlurmCommands,
  SlurmOptionsSchema,
  slurmCommandsFor,
} from './slurm-allocation.ts';

/** A provider's `slurm` option: the allocation's settings, and how its nodes are reached. */
export const SlurmModeSchema = SlurmOptionsSchema.extend({
  /**
   * Every node's host settings but `name` and `host` (which come from Slurm): username,
   * privateKeyPath or agent, knownHostsPath, workDirectory, maxSandboxes, the runtime's path…
   * Checked against the provider's host schema.
   */
  node: z.record(z.string(), z.unknown()),
  /** Per Slurm node name: settings that differ for it, e.g. `host` when NodeAddr is not its SSH address. */
  nodeOverrides: z.record(z.string(), z.record(z.string(), z.unknown())).default({}),
}).strict();
export type SlurmModeOptions = z.input<typeof SlurmModeSchema>;

export interface SlurmHostsDeps {
  logger: Logger;
  namespace: string;
  /** Checks one host's settings with the provider's schema (throws when they do not fit). */
  checkHost: (host: Record<string, unknown>) => void;
  /** Replaces the fleet's hosts. */
  setHosts: (hosts: Array<Record<string, unknown>>) => void;
  /** The fleet's listing, for the idle check. */
  list: () => Promise<SandboxListing>;
  /**
   * Stops what is left of the provider's sandboxes on hosts that left with an ended allocation.
   * Called at once when the end is noticed; it must spare sandboxes created after that moment
   * (the next allocation may get the same nodes).
   */
  reap: (hosts: Array<Record<string, unknown>>) => Promise<void>;
  /** Where the Slurm commands run; from the options when absent. */
  commands?: SlurmCommands;
}

export class SlurmHosts {
  readonly allocation: SlurmAllocation;
  readonly #options: z.output<typeof SlurmModeSchema>;
  readonly #deps: SlurmHostsDeps;
  /** The allocation the fleet's hosts are the nodes of. */
  #hostsOf: string | null = null;
  #hosts: Array<Record<string, unknown>> = [];
  #resumed: Promise<void> | null = null;
  #unanswered: string | null = null;
  /** Reaps under way, so a test (or close) can wait for them. */
  readonly #reaping = new Set<Promise<void>>();

  constructor(options: unknown, deps: SlurmHostsDeps) {
    this.#options = SlurmModeSchema.parse(options);
    this.#deps = deps;
    const probe = { ...this.#options.node, name: 'slurm-node', host: 'slurm-node' };
    for (const key of ['name', 'host'])
      if (key in this.#options.node)
        throw new GymError(
          'VALIDATION_FAILED',
          `slurm.node.${key} comes from Slurm; set it per node in slurm.nodeOverrides`,
        );
    deps.checkHost(probe);
    for (const [name, overrides] of Object.entries(this.#options.nodeOverrides))
      deps.checkHost({ ...probe, ...overrides, name });
    const { node: _node, nodeOverrides: _overrides, ...allocationOptions } = this.#options;
    this.allocation = new SlurmAllocation(allocationOptions, {
      commands: deps.commands ?? slurmCommandsFor(allocationOptions, deps.logger),
      logger: deps.logger,
      namespace: deps.namespace,
      inUse: () => this.#inUse(),
    });
    this.allocation.onEnd((end) => this.#ended(end));
  }

  /** The host settings of each node of an allocation. */
  hostsFor(allocation: HeldAllocation): Array<Record<string, unknown>> {
    return allocation.nodes.map((node) => ({
      ...this.#options.node,
      host: node.address,
      ...this.#options.nodeOverrides[node.name],
      name: node.name,
    }));
  }

  #use(allocation: HeldAllocation): void {
    if (this.#hostsOf === allocation.jobId) return;
    this.#hosts = this.hostsFor(allocation);
    this.#deps.setHosts(this.#hosts);
    this.#hostsOf = allocation.jobId;
  }

  /**
   * Holds an allocation (a new one when none runs) and makes its nodes the fleet's hosts. Call
   * the returned function once the sandbox is on a node (or failed): until then the allocation is
   * not idle.
   */
  async ensure(): Promise<() => void> {
    await this.resume();
    for (let attempt = 0; ; attempt += 1) {
      const { allocation, unpin } = await this.allocation.acquire();
      // It may have ended between the grant and now: its nodes are not ours any more.
      if (this.allocation.current === allocation || attempt >= 2) {
        if (this.allocation.current !== allocation) {
          unpin();
          throw new GymError(
            'PROVIDER_UNAVAILABLE',
            `the Slurm allocation ${allocation.jobId} ended at once`,
          );
        }
        this.#use(allocation);
        return unpin;
      }
      unpin();
    }
  }

  /** Runs `work` with an allocation held (`ensure`), letting go of it once `work` ends. */
  async pinned<T>(work: () => Promise<T>): Promise<T> {
    const unpin = await this.ensure();
    try {
      return await work();
    } finally {
      unpin();
    }
  }

  /**
   * After a restart: adopts a running allocation of ours, if there is one, without asking for a
   * new one, so listings and commands find the sandboxes already on its nodes. Once per provider.
   */
  resume(): Promise<void> {
    this.#resumed ??= this.allocation.adopt().then(
      (allocation) => {
        this.#unanswered = null;
        if (allocation !== null) this.#use(allocation);
      },
      (error: Error) => {
        // Slurm does not answer now: the next call tries again.
        this.#resumed = null;
        this.#unanswered = error.message;
        this.#deps.logger.warn({ error: error.message }, 'slurm: cannot look for our allocation');
      },
    );
    return this.#resumed;
  }

  /** Why Slurm did not answer the last look for our allocation; null when it did. */
  unanswered(): string | null {
    return this.#unanswered;
  }

  /**
   * `listing` with the Slurm scope unreachable while Slurm did not answer the look for our
   * allocation: it does not say which allocation is ours, so its nodes' sandboxes are out of sight.
   */
  withUnanswered(listing: SandboxListing): SandboxListing {
    const reason = this.#unanswered;
    if (reason === null) return listing;
    return { ...listing, unreachable: [...listing.unreachable, { scope: 'slurm', reason }] };
  }

  /** The provider's health: Slurm's, with the hosts' (`fleet`, null with none) folded in. */
  async healthWith(fleet: () => Promise<ProviderHealth> | null): Promise<ProviderHealth> {
    const slurm = await this.health();
    const hosts = slurm.ok ? await fleet() : null;
    return hosts === null ? slurm : { ...hosts, details: { ...hosts.details, slurm: slurm.details } };
  }

  /** Whether the controller answers, with the allocation held. */
  async health(): Promise<ProviderHealth> {
    try {
      await this.allocation.ping();
      const current = this.allocation.current;
      return {
        ok: true,
        message:
          current === null
            ? 'Slurm answers; no allocation held (the next create asks for one)'
            : `Slurm allocation ${current.jobId} on ${current.nodes.map((node) => node.name).join(',')}`,
        details: this.describe(),
      };
    } catch (error) {
      return { ok: false, message: (error as Error).message, details: this.describe() };
    }
  }

  async #inUse(): Promise<number> {
    const listing = await this.#deps.list();
    return listing.sandboxes.length + listing.unreachable.length;
  }

  #ended(end: AllocationEnd): void {
    if (this.#hostsOf !== end.jobId) return;
    const left = this.#hosts;
    this.#hostsOf = null;
    this.#hosts = [];
    this.#deps.setHosts([]);
    const reaping = this.#deps
      .reap(left)
      .catch((error: Error) =>
        this.#deps.logger.warn(
          { jobId: end.jobId, error: error.message },
          'slurm: reaping an ended allocation failed',
        ),
      )
      .finally(() => this.#reaping.delete(reaping));
    this.#reaping.add(reaping);
  }

  /** Waits for the reaps of ended allocations under way. */
  async settled(): Promise<void> {
    await Promise.all([...this.#reaping]);
  }

  /** A line for the provider's health: the allocation and its nodes, or none held. */
  describe(): Record<string, unknown> {
    const current = this.allocation.current;
    return current === null
      ? { allocation: null, jobName: this.allocation.jobName }
      : {
          allocation: current.jobId,
          jobName: this.allocation.jobName,
          nodes: current.nodes.map((node) => node.name),
        };
  }

  /**
   * Stops following the allocation. With sandboxes on it the job is left for the next daemon to
   * adopt (they outlive the daemon, as on every provider); without any, it is given back now
   * rather than held by nobody until its time limit.
   */
  async close(): Promise<void> {
    const held = this.allocation.current;
    if (held !== null && this.#hostsOf === held.jobId && !this.allocation.pinned) {
      const used = await this.#inUse().catch(() => 1);
      if (used === 0 && !this.allocation.pinned) await this.allocation.release();
    }
    this.allocation.close();
    await this.settled();
  }
}
