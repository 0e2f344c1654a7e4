/**
 * What pools need of the daemon's sandboxes: the one edge from pools to the manager, whose
 * lifecycle and operations they call. The lifecycle tells pools of removals through `onRemoved`
 * (an event, not a back-reference), so the two are built in one direction and a pool can be
 * tested against any implementation of this.
 */
import type { Sandbox } from '../../core/schemas/api.ts';
import type { SandboxSpec } from '../../core/schemas/sandbox.ts';
import type { SandboxRecord } from '../state-store.ts';

/** The lifecycle's part that pools use (`sandboxes/lifecycle.ts`). */
export interface PoolLifecycle {
  /** A cold sandbox for a request (waits for admission), marked as the pool's. */
  create(
    input: unknown,
    options: { pool?: string | null; execEnv?: Record<string, string> },
  ): Promise<Sandbox>;
  /** An idle member if there is room right now; null when there is none. */
  createIdle(spec: SandboxSpec, pool: string, idleTtlSeconds: number): Promise<SandboxRecord | null>;
  /** Hands an idle member out; null when it is no longer idle. */
  claim(
    id: string,
    overrides: { ttlSeconds: number; labels: Record<string, string>; env: Record<string, string> },
  ): Promise<Sandbox | null>;
  destroy(id: string, reason?: string): Promise<void>;
  /** Records of pool members, for a pool to (re)adopt. */
  poolRecords(pool?: string): SandboxRecord[];
  /** @throws GymError when the spec's provider is missing or cannot make it. */
  checkSpec(spec: SandboxSpec): void;
  /** Called after any sandbox record is removed, with why. */
  onRemoved(listener: (record: SandboxRecord, reason: string) => void): void;
}

/** The operations' part that pools use (`sandboxes/operations.ts`). */
export interface PoolOperations {
  /** Whether a member still answers (a trivial command). */
  isHealthy(id: string): Promise<boolean>;
}

export interface PoolSandboxes {
  lifecycle: PoolLifecycle;
  operations: PoolOperations;
}
