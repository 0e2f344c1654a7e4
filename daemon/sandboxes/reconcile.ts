/**
 * Reconcile: brings the store and one provider into agreement, at start and on every orphan
 * scan. A labelled resource of this daemon that the store does not know (or whose lease or
 * deadline passed, or that is not running) is destroyed; a record whose resource is gone is
 * forgotten; everything else is adopted as it is (and its gateway reach restored). Another
 * daemon's resource is destroyed only past its hard deadline or when its owner is provably gone
 * (several daemons share one engine and namespace). A record the listing could not see (its part
 * of the backend did not answer, or the listing failed) is neither forgotten nor destroyed: it is
 * kept as unreachable (the reaper forgets it past its deadline).
 */
import type { Clock } from '../../core/clock.ts';
import type { Logger } from '../../core/logger.ts';
import type { SandboxInfo } from '../../core/schemas/sandbox.ts';
import type { SandboxListing, SandboxProvider } from '../../providers/sandbox-provider.ts';
import type { DaemonMetrics } from '../metrics.ts';
import type { OwnerLiveness } from '../owners.ts';
import type { SandboxRecord, StateStore } from '../state-store.ts';
import { forEachLimited, REAPER_CONCURRENCY } from './concurrency.ts';
import type { GatewayReach } from './gateway-reach.ts';
import type { Leases } from './leases.ts';
import type { SandboxLifecycle } from './lifecycle.ts';
import type { SandboxRuntime } from './runtime.ts';

/** What one reconcile did, for logs and tests. */
export interface ReconcileSummary {
  /** Sandboxes of the provider kept as they are. */
  adopted: number;
  destroyed: number;
  /** Records whose resource the listing showed gone. */
  forgotten: number;
  /** Records of the provider now kept as unreachable (their part of the backend did not answer). */
  unreachable: number;
}

export interface ReconcilerOptions {
  store: StateStore;
  runtime: SandboxRuntime;
  leases: Leases;
  lifecycle: SandboxLifecycle;
  gateway: GatewayReach;
  /** This daemon's id: resources labelled with another are never orphans of ours. */
  daemonId: string;
  /** Whether another daemon is provably gone; without it, others' resources wait for their deadline. */
  owners: OwnerLiveness | undefined;
  metrics: DaemonMetrics | undefined;
  clock: Clock;
  logger: Logger;
}

export class Reconciler {
  readonly #store: StateStore;
  readonly #runtime: SandboxRuntime;
  readonly #leases: Leases;
  readonly #lifecycle: SandboxLifecycle;
  readonly #gateway: GatewayReach;
  readonly #daemonId: string;
  readonly #owners: OwnerLiveness | undefined;
  readonly #metrics: DaemonMetrics | undefined;
  readonly #clock: Clock;
  readonly #logger: Logger;

  constructor(options: ReconcilerOptions) {
    this.#store = options.store;
    this.#runtime = options.runtime;
    this.#leases = options.leases;
    this.#lifecycle = options.lifecycle;
    this.#gateway = options.gateway;
    this.#daemonId = options.daemonId;
    this.#owners = options.owners;
    this.#metrics = options.metrics;
    this.#clock = options.clock;
    this.#logger = options.logger;
  }

  async reconcile(providerName: string): Promise<ReconcileSummary> {
    const provider = this.#lifecycle.provider(providerName);
    const runtime = this.#runtime;
    // Only a record that existed before the listing was asked for can be missing from it: one
    // whose create finished while the listing was on its way is not in it, and is not gone.
    const knownBefore = new Set(this.#store.all().map((record) => record.id));
    const listing = await this.#listing(provider, providerName);
    const now = this.#clock.now();
    const seen = new Set<string>();
    const doomed: Array<{ id: string; reason: string }> = [];
    const isOwnerGone = new Map<string, Promise<boolean>>();
    const adoptedIds: string[] = [];
    let adopted = 0;
    for (const info of listing.sandboxes) {
      seen.add(info.id);
      if (runtime.creating.has(info.id) || runtime.destroying.has(info.id)) continue;
      const record = this.#store.get(info.id);
      // Created while the listing was on its way: the listing may show it half-made ('created',
      // not yet running). Its create decided its fate; the next scan sees it as it is.
      if (record !== undefined && !knownBefore.has(info.id)) continue;
      if (info.state === 'unreachable') {
        // Known to the provider (from its own records) but out of its reach: nothing to decide yet.
        if (record !== undefined)
          runtime.unreachable.set(info.id, `provider ${providerName} cannot reach it`);
        continue;
      }
      runtime.unreachable.delete(info.id);
      if (record === undefined && info.daemonId !== this.#daemonId) {
        const reason = await this.#foreignReason(info, now, isOwnerGone);
        if (reason !== null) doomed.push({ id: info.id, reason });
        continue;
      }
      const leaseMs = record === undefined ? 0 : this.#leases.expiresAtMs(record);
      const reason =
        record === undefined
          ? 'orphan'
          : Date.parse(info.deadlineAt) <= now || leaseMs <= now
            ? 'expired'
            : info.state !== 'ready'
              ? 'dead'
              : null;
      if (reason === null) {
        adopted += 1;
        adoptedIds.push(info.id);
      } else doomed.push({ id: info.id, reason });
    }
    await forEachLimited(doomed, REAPER_CONCURRENCY, async ({ id, reason }) => {
      try {
        if (this.#store.get(id) !== undefined) await this.#lifecycle.destroy(id, reason);
        else {
          await provider.destroy(id);
          this.#metrics?.reaped.inc({ reason });
        }
      } catch (error) {
        this.#logger.warn(
          { sandboxId: id, error: String(error) },
          'could not destroy a sandbox during reconcile',
        );
      }
    });
    const missing: SandboxRecord[] = [];
    let newlyUnreachable = 0;
    for (const record of this.#store.all()) {
      if (
        record.provider !== providerName ||
        seen.has(record.id) ||
        runtime.destroying.has(record.id) ||
        !knownBefore.has(record.id)
      )
        continue;
      const hiddenBecause = listing.hiddenBecause(record);
      if (hiddenBecause === undefined) missing.push(record);
      else {
        if (!runtime.unreachable.has(record.id)) newlyUnreachable += 1;
        runtime.unreachable.set(record.id, hiddenBecause);
      }
    }
    for (const record of missing) await this.#lifecycle.forget(record, 'gone');
    await this.#gateway.restore(provider, adoptedIds);
    const summary: ReconcileSummary = {
      adopted,
      destroyed: doomed.length,
      forgotten: missing.length,
      unreachable: this.#store
        .all()
        .filter((record) => record.provider === providerName && runtime.unreachable.has(record.id)).length,
    };
    if (summary.destroyed + summary.forgotten + newlyUnreachable > 0)
      this.#logger.info({ provider: providerName, ...summary }, 'reconciled');
    return summary;
  }

  /**
   * The provider's listing, and why it could not see a record (undefined: it could, so a record
   * missing from it is gone). A provider that throws instead of naming the part it could not see
   * is taken to have seen nothing.
   */
  async #listing(
    provider: SandboxProvider,
    providerName: string,
  ): Promise<{ sandboxes: SandboxInfo[]; hiddenBecause: (record: SandboxRecord) => string | undefined }> {
    let listing: SandboxListing;
    try {
      listing = await provider.list();
    } catch (error) {
      const reason = `listing failed: ${error instanceof Error ? error.message : String(error)}`;
      this.#logger.warn(
        { provider: providerName, error: reason },
        'listing failed; keeping every sandbox of the provider',
      );
      return { sandboxes: [], hiddenBecause: () => reason };
    }
    const reasons = new Map(listing.unreachable.map((part) => [part.scope, `${part.scope}: ${part.reason}`]));
    // A sandbox of no scope lives on a backend of one part: any part unreachable hides it.
    const everyReason = reasons.size === 0 ? undefined : [...reasons.values()].join('; ');
    return {
      sandboxes: listing.sandboxes,
      hiddenBecause: (record) => (record.scope === undefined ? everyReason : reasons.get(record.scope)),
    };
  }

  /** Why another daemon's resource may be destroyed now, or null: it may be live. */
  async #foreignReason(
    info: SandboxInfo,
    now: number,
    isOwnerGone: Map<string, Promise<boolean>>,
  ): Promise<string | null> {
    if (Date.parse(info.deadlineAt) <= now) return 'foreign-deadline';
    if (this.#owners === undefined || info.daemonId === '') return null;
    if (!isOwnerGone.has(info.daemonId)) {
      isOwnerGone.set(
        info.daemonId,
        this.#owners.isGone(info.daemonId).catch(() => false),
      );
    }
    return (await isOwnerGone.get(info.daemonId)) ? 'owner-gone' : null;
  }
}
