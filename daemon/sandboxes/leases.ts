/**
 * Leases: a sandbox lives while its lease runs (renewed by keepalive and by any use), never past
 * its hard deadline. The in-memory lease is ahead of the persisted one by at most the persist
 * slack: a lease renewed by use is written to disk only when it moved by a share of its length
 * (at most a minute), so a crash costs at most that much of a lease, and a busy sandbox does not
 * fsync on every command.
 */
import type { Clock } from '../../core/clock.ts';
import type { SandboxRecord, StateStore } from '../state-store.ts';

const LEASE_PERSIST_SHARE = 0.1;
const LEASE_PERSIST_MAX_MS = 60_000;

export class Leases {
  readonly #store: StateStore;
  readonly #clock: Clock;
  readonly #leaseMs = new Map<string, number>();

  constructor(store: StateStore, clock: Clock) {
    this.#store = store;
    this.#clock = clock;
  }

  /** When the lease ends: the in-memory one, else the persisted one. */
  expiresAtMs(record: SandboxRecord): number {
    return this.#leaseMs.get(record.id) ?? Date.parse(record.leaseExpiresAt);
  }

  /** Whether the lease or the deadline has passed at `now`. */
  isExpired(record: SandboxRecord, now: number): boolean {
    return this.expiresAtMs(record) <= now || Date.parse(record.deadlineAt) <= now;
  }

  /** A lease renewed by `ttlSeconds` from now (default: the sandbox's own TTL), never past its deadline. */
  renewed(record: SandboxRecord, ttlSeconds = record.spec.ttlSeconds): number {
    return Math.min(this.#clock.now() + ttlSeconds * 1000, Date.parse(record.deadlineAt));
  }

  /** Holds a lease in memory (the caller persists it when it must). */
  set(id: string, leaseMs: number): void {
    this.#leaseMs.set(id, leaseMs);
  }

  forget(id: string): void {
    this.#leaseMs.delete(id);
  }

  /** Renews the lease and persists it at once. */
  async renew(record: SandboxRecord, ttlSeconds?: number): Promise<void> {
    const leaseMs = this.renewed(record, ttlSeconds);
    this.#leaseMs.set(record.id, leaseMs);
    await this.#store.renewLease(record.id, new Date(leaseMs).toISOString());
  }

  /** Any use renews the lease; it reaches the disk only when it moved by the persist slack. */
  async touch(record: SandboxRecord): Promise<void> {
    const leaseMs = this.renewed(record);
    this.#leaseMs.set(record.id, leaseMs);
    const slackMs = Math.min(record.spec.ttlSeconds * 1000 * LEASE_PERSIST_SHARE, LEASE_PERSIST_MAX_MS);
    const current = this.#store.get(record.id);
    if (current !== undefined && leaseMs - Date.parse(current.leaseExpiresAt) >= slackMs) {
      await this.#store.renewLease(current.id, new Date(leaseMs).toISOString());
    }
  }
}
