/**
 * What the daemon knows of its sandboxes beyond their records in the state store: which are
 * being created or destroyed right now, and which the last listing of their provider could not
 * see. Lifecycle, reaper and reconcile share it; nothing here is persisted.
 */
import type { SandboxRecord } from '../state-store.ts';

export type LiveState = 'destroying' | 'unreachable' | 'ready';

export class SandboxRuntime {
  /** Ids being created (provider name), so scans do not take them for orphans. */
  readonly creating = new Map<string, string>();
  readonly destroying = new Map<string, Promise<void>>();
  /**
   * Sandboxes the last listing of their provider could not see (their part of the backend did
   * not answer), with why: kept, shown `unreachable`, until a listing sees them again or finds
   * them gone, or their deadline passes.
   */
  readonly unreachable = new Map<string, string>();

  stateOf(record: Pick<SandboxRecord, 'id'>): LiveState {
    return this.destroying.has(record.id)
      ? 'destroying'
      : this.unreachable.has(record.id)
        ? 'unreachable'
        : 'ready';
  }
}
