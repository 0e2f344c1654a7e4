/**
 * `--fork-setup`: the repeats of one task (a pass@k or GRPO group) share one setup. The first
 * of them to want a sandbox creates a setup sandbox, runs the row's setup command in it once,
 * forks the group's children from it (the daemon snapshots it) and destroys it; each repeat then
 * takes its child and runs its agent and verifier as usual. A repeat that needs a sandbox later
 * (a retry after an infrastructure fault, a member past the fork's count) is created from the
 * group's snapshot, with no setup again. When every repeat of the task has ended, the children
 * nobody took and the group's snapshots are removed.
 *
 * What is setup and what is per child (docs/eval.md, "--fork-setup"): the setup sandbox runs only
 * the dataset's setup command. No model rollout is opened in it, no gateway key or reach is
 * given to it, no agent runs in it, so its snapshot holds nothing of a rollout's secrets; every
 * child gets its labels and spec env from this request, its own rollout and key after the fork,
 * and the kind's start (processes, which a files-only fork does not carry) in the child.
 */
import { GymError, isGymError } from '../../core/errors.ts';
import type { Sandbox } from '../../core/schemas/api.ts';
import type { SandboxSpecInput } from '../../core/schemas/sandbox.ts';
import { MAX_FORK_COUNT, type SnapshotInfo } from '../../core/schemas/snapshot.ts';
import { clientSandboxHandle } from '../../harnesses/sandbox-handle.ts';
import type { TaskRow } from '../kinds/kind.ts';
import type { EvalOptions } from './eval-types.ts';

/** What a rollout line records of a sandbox that came from a shared setup (`_gym.sandbox`). */
export interface ForkSetupRecord {
  fork_setup: true;
  /** The setup sandbox (gone by now), the snapshot, and the child's place among the fork's children. */
  lineage: { parent: string; snapshot: string; fork_index: number | null };
  /** `fork`: a child of the group's fork; `snapshot`: created from its snapshot later (a retry, or past the fork's count). */
  from: 'fork' | 'snapshot';
  /** How the daemon snapshotted the setup sandbox: `native` (the backend's image) or `archive`. */
  snapshot_method: string;
  /** The group's setup (create and setup command) and its fork (the snapshot and the children), once per group. */
  setup_ms: number;
  fork_ms: number;
  /** Children the fork made. */
  fork_count: number;
}

export interface ForkedSandbox {
  sandbox: Sandbox;
  record: ForkSetupRecord;
}

/** One prepared setup of a group: its snapshot and the children not taken yet, by repeat. */
interface Prepared {
  parent: string;
  snapshot: SnapshotInfo;
  children: Map<number, { sandbox: Sandbox; forkIndex: number }>;
  setupMs: number;
  forkMs: number;
  forkCount: number;
}

/** The repeats of one task. */
interface Group {
  /** Repeats that may still want a sandbox (not ended for good). */
  unsettled: Set<number>;
  /** Repeats running an attempt in a sandbox they took: they want none now. */
  holding: Set<number>;
  prepared: Promise<Prepared> | undefined;
  /** Whether a repeat has waited on `prepared` (a look-ahead setup no one waited on fails silently). */
  isJoined: boolean;
  /** Whether a setup of the group has ever begun (a look-ahead starts only a group no one started). */
  isStarted: boolean;
  /** Every snapshot made for the group (a setup is redone when one failed or went away). */
  snapshots: Set<string>;
  /** The group's pending rows by repeat (any of them names its setup and its sandbox). */
  rows: Map<number, TaskRow>;
}

/** How the agent's sandbox of a row is made: its spec, or a claim on its image's pool. */
export interface SandboxRequest {
  spec: SandboxSpecInput;
  pool?: string;
}

/** What a shared setup needs of the runner's phases (`rollout-phases.ts`). */
export interface SetupPhases {
  /** Runs the row's own setup command in a sandbox. */
  runRowSetup(row: TaskRow, sandbox: ReturnType<typeof clientSandboxHandle>): Promise<void>;
  /** How the row's agent sandbox is made; null when its kind gives it none. */
  sandboxRequest(row: TaskRow): SandboxRequest | null;
}

/**
 * Whether a row's repeats share a setup under `--fork-setup`: only a row with a setup command
 * has one to share (a fork of a sandbox nothing changed would cost a snapshot to save nothing).
 */
export function sharesSetup(row: TaskRow): boolean {
  return typeof row.setup === 'string' && row.setup !== '';
}

const taskOf = (row: TaskRow) => Number(row._ng_task_index);
const repeatOf = (row: TaskRow) => Number(row._ng_rollout_index);

/**
 * The shared setups of a run. Every method uses the run's own client, not a rollout's watched
 * one: the setup is the dataset's, and a loss in it is no agent's doing.
 */
export class ForkSetups {
  readonly #options: EvalOptions;
  readonly #phases: SetupPhases;
  /** In the order the run starts them (Map keeps insertion order), which the look-ahead follows. */
  readonly #groups = new Map<number, Group>();

  /** `pending`: the rollouts this run will start, so a resumed group forks only the repeats it lacks. */
  constructor(options: EvalOptions, pending: ReadonlyArray<TaskRow>, phases: SetupPhases) {
    this.#options = options;
    this.#phases = phases;
    for (const row of pending.filter((row) => sharesSetup(row) && phases.sandboxRequest(row) !== null)) {
      const group = this.#groups.get(taskOf(row)) ?? {
        unsettled: new Set<number>(),
        holding: new Set<number>(),
        prepared: undefined,
        isJoined: false,
        isStarted: false,
        snapshots: new Set<string>(),
        rows: new Map<number, TaskRow>(),
      };
      group.unsettled.add(repeatOf(row));
      group.rows.set(repeatOf(row), row);
      this.#groups.set(taskOf(row), group);
    }
  }

  /**
   * The row's sandbox: its child of the group's fork (preparing the group's setup first if no
   * one has), else one created from the group's snapshot. A failed setup throws what it threw
   * before `--fork-setup` (an infrastructure fault of the rollout); so does a failed fork. Either
   * way the group's next attempt prepares its setup again.
   */
  async acquire(row: TaskRow): Promise<ForkedSandbox> {
    const group = this.#group(row);
    const repeat = repeatOf(row);
    const request = this.#request(row);
    const current = group.prepared ?? this.#start(group, row);
    group.isJoined = true;
    const forget = () => {
      if (group.prepared === current) group.prepared = undefined;
    };
    const prepared = await current.catch((error: unknown) => {
      forget();
      throw error;
    });
    const base = {
      fork_setup: true as const,
      setup_ms: prepared.setupMs,
      fork_ms: prepared.forkMs,
      fork_count: prepared.forkCount,
      snapshot_method: prepared.snapshot.method,
    };
    const lineage = { parent: prepared.parent, snapshot: prepared.snapshot.id };
    const child = prepared.children.get(repeat);
    if (child !== undefined) {
      prepared.children.delete(repeat);
      group.holding.add(repeat);
      return {
        sandbox: child.sandbox,
        record: { ...base, lineage: { ...lineage, fork_index: child.forkIndex }, from: 'fork' },
      };
    }
    try {
      const sandbox = await this.#options.client.createSandbox({
        ...request.spec,
        image: prepared.snapshot.image,
        labels: { role: 'agent' },
      });
      group.holding.add(repeat);
      return { sandbox, record: { ...base, lineage: { ...lineage, fork_index: null }, from: 'snapshot' } };
    } catch (error) {
      // The snapshot was reaped (or never usable): the next attempt sets the group up again.
      if (isGymError(error, 'SNAPSHOT_NOT_FOUND')) {
        forget();
        await this.#discard(prepared);
      }
      throw error;
    }
  }

  /** Whether the row's sandbox comes from its group's shared setup (it has a setup command and a sandbox). */
  shares(row: TaskRow): boolean {
    return this.#groups.has(taskOf(row)) && sharesSetup(row);
  }

  /** The row's attempt gave its sandbox back (the rollout destroys it itself). */
  released(row: TaskRow): void {
    this.#groups.get(taskOf(row))?.holding.delete(repeatOf(row));
  }

  /** The row ended for good: once every repeat of its task has, the group's leftovers go. */
  async settled(row: TaskRow): Promise<void> {
    const group = this.#groups.get(taskOf(row));
    if (group === undefined) return;
    group.unsettled.delete(repeatOf(row));
    group.holding.delete(repeatOf(row));
    if (group.unsettled.size === 0) await this.#end(taskOf(row), group);
  }

  /** Removes what every group left (a run stopped by an error ends here too). */
  async close(): Promise<void> {
    await Promise.all([...this.#groups.entries()].map(([task, group]) => this.#end(task, group)));
  }

  #request(row: TaskRow): SandboxRequest {
    const request = this.#phases.sandboxRequest(row);
    if (request === null) throw new GymError('INTERNAL', `task ${taskOf(row)} has no sandbox to share`);
    return request;
  }

  /**
   * Begins a setup of the group (for `row`, which its fork serves first). Once it is ready, the
   * next group no one has started begins its own (a look-ahead of one group), so that the next
   * task's setup runs while this one's agents do, instead of every worker waiting for it in turn.
   */
  #start(group: Group, row: TaskRow): Promise<Prepared> {
    const prepared = this.#prepare(group, row, this.#request(row));
    group.prepared = prepared;
    group.isStarted = true;
    group.isJoined = false;
    prepared.then(
      () => {
        try {
          this.#lookAhead(group);
        } catch (error) {
          // Only a hint: the next group's repeats set it up when they come.
          this.#options.logger.warn({ error: String(error) }, 'the next task could not be set up ahead');
        }
      },
      () => {
        // A look-ahead setup that failed before any repeat waited on it is forgotten: the
        // repeats set up their own when they come, and it is their failure that is recorded.
        if (!group.isJoined && group.prepared === prepared) group.prepared = undefined;
      },
    );
    return prepared;
  }

  #lookAhead(after: Group): void {
    const groups = [...this.#groups.values()];
    const at = groups.indexOf(after);
    const next = at === -1 ? undefined : groups[at + 1];
    if (next === undefined || next.isStarted || next.unsettled.size === 0) return;
    const [first] = [...next.rows.entries()]
      .filter(([repeat]) => next.unsettled.has(repeat))
      .sort(([a], [b]) => a - b);
    if (first !== undefined) this.#start(next, first[1]);
  }

  #group(row: TaskRow): Group {
    const group = this.#groups.get(taskOf(row));
    if (group === undefined)
      throw new GymError('INTERNAL', `task ${taskOf(row)} is not among this run's fork groups`);
    return group;
  }

  /**
   * One setup for the group: a setup sandbox (from the image's pool when the run has one), the
   * row's setup command, a fork of one child per repeat that wants a sandbox now (the asking one
   * first; at most the run's concurrency, so no more children wait idle than workers can take),
   * and the setup sandbox destroyed whatever happened.
   */
  async #prepare(group: Group, row: TaskRow, request: SandboxRequest): Promise<Prepared> {
    const { client, concurrency } = this.#options;
    const repeat = repeatOf(row);
    const wanting = [
      repeat,
      ...[...group.unsettled]
        .filter((other) => other !== repeat && !group.holding.has(other))
        .sort((a, b) => a - b),
    ].slice(0, Math.max(1, Math.min(concurrency, MAX_FORK_COUNT)));
    const started = Date.now();
    const parent = await client.createSandbox(
      request.pool === undefined
        ? { ...request.spec, labels: { role: 'setup' } }
        : { pool: request.pool, labels: { role: 'setup' } },
    );
    try {
      await this.#phases.runRowSetup(row, clientSandboxHandle(client, parent.id));
      const setupMs = Date.now() - started;
      const forkStarted = Date.now();
      const env = request.spec.env;
      const forked = await client
        .fork(parent.id, {
          count: wanting.length,
          // Given to every child here, never taken from what the setup sandbox had.
          labels: { role: 'agent' },
          ...(env === undefined ? {} : { env }),
        })
        .catch((error: unknown) => {
          // The same code (so it is retried, or stops the run, as it would elsewhere), saying where.
          if (!isGymError(error)) throw error;
          throw new GymError(error.code, `forking the task's setup sandbox: ${error.message}`, {
            ...(error.details === undefined ? {} : { details: error.details }),
            cause: error,
          });
        });
      group.snapshots.add(forked.snapshot.id);
      if (forked.sandboxes.length !== wanting.length) {
        await Promise.all(forked.sandboxes.map((child) => client.destroySandbox(child.id).catch(() => {})));
        throw new GymError(
          'INTERNAL',
          `the fork made ${forked.sandboxes.length} children, not the ${wanting.length} asked for`,
        );
      }
      return {
        parent: parent.id,
        snapshot: forked.snapshot,
        children: new Map(
          wanting.map((wanted, index) => [
            wanted,
            {
              sandbox: forked.sandboxes[index]!,
              forkIndex: forked.sandboxes[index]!.lineage?.forkIndex ?? index,
            },
          ]),
        ),
        setupMs,
        forkMs: Date.now() - forkStarted,
        forkCount: forked.sandboxes.length,
      };
    } finally {
      await client.destroySandbox(parent.id).catch(() => {});
    }
  }

  /** Destroys the children of a setup no one will take. */
  async #discard(prepared: Prepared): Promise<void> {
    const children = [...prepared.children.values()];
    prepared.children.clear();
    await Promise.all(
      children.map((child) => this.#options.client.destroySandbox(child.sandbox.id).catch(() => {})),
    );
  }

  async #end(task: number, group: Group): Promise<void> {
    const current = group.prepared;
    group.prepared = undefined;
    if (current !== undefined) {
      const prepared = await current.catch(() => undefined);
      if (prepared !== undefined) await this.#discard(prepared);
    }
    const snapshots = [...group.snapshots];
    group.snapshots.clear();
    // A snapshot that will not go is the daemon's reaper's to collect, not the run's failure.
    await Promise.all(snapshots.map((id) => this.#options.client.deleteSnapshot(id).catch(() => {})));
    this.#groups.delete(task);
  }
}

/**
 * Refuses `--fork-setup` before any sandbox starts when the daemon has no snapshot routes (a
 * daemon of an earlier version): every rollout would otherwise fail alike, as infrastructure
 * faults retried to the end.
 */
export async function checkForkSupport(options: EvalOptions): Promise<void> {
  try {
    await options.client.listSnapshots();
  } catch (error) {
    if (isGymError(error, 'ROUTE_NOT_FOUND'))
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        'this daemon cannot snapshot or fork sandboxes (it is of an earlier version): run without --fork-setup',
        { cause: error },
      );
    throw error;
  }
}
