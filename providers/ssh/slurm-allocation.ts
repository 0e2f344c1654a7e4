/**
 * Slurm mode of the SSH providers: holds one allocation, learns its nodes, notices when it ends,
 * and gives it back when no sandbox has used it for a while. The provider places sandboxes on the
 * nodes (over SSH to each node) and asks for an allocation again after one ended.
 *
 * - Holding: a holder batch job, `sbatch --parsable --wrap 'while :; do sleep 86400; done'`,
 *   named `gym-<namespace>` (or the configured name). sbatch returns the job id at once, so a
 *   pending allocation can be cancelled and polled like a running one, no channel or process
 *   stays open while it waits, and no InactiveLimit applies to it (`salloc --no-shell` blocks
 *   until the grant and prints the id only as text on stderr).
 * - Nodes: squeue's `%N` of the running job, expanded with their addresses in one
 *   `sinfo -N -n LIST -o '%N|%o'` (NodeAddr), which the provider maps to SSH hosts.
 * - The end: squeue is polled every `pollIntervalMs`. A job that is no longer RUNNING (completing,
 *   cancelled, time limit, node failure, or purged from the controller) has ended; the listeners
 *   hear it once with the reason, and the next `acquire` submits a new job.
 * - Idle release: when `inUse()` says no sandbox is on the allocation and no `acquire` is pinned,
 *   for `idleReleaseMs`, the job is cancelled (`scancel`).
 * - After a restart of the daemon, the first `acquire` adopts a pending or running job of ours
 *   (same name, same user) instead of submitting another: its sandboxes are still there.
 * - The Slurm commands run on this machine (a daemon on a login node), or over SSH on a configured
 *   login host (a daemon anywhere with SSH access); the same argv either way.
 */
import { posix } from 'node:path';
import { GymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import {
  type AllocationNode,
  type EndReason,
  endReason,
  holderJobArgv,
  JOB_FORMAT,
  type JobLine,
  jobPhase,
  type ParsedSlurmOptions,
  parseJobLines,
  parseNodeLines,
  parseSbatchParsable,
  type SlurmCommandResult,
  type SlurmCommands,
  type SlurmOptions,
  SlurmOptionsSchema,
} from './slurm-commands.ts';

export {
  type AllocationNode,
  type EndReason,
  endReason,
  holderJobArgv,
  JOB_FORMAT,
  type JobLine,
  type JobPhase,
  jobPhase,
  LocalSlurmCommands,
  type ParsedSlurmOptions,
  parseJobLines,
  parseNodeLines,
  parseSbatchParsable,
  type SlurmCommandResult,
  type SlurmCommands,
  type SlurmOptions,
  SlurmOptionsSchema,
  SshSlurmCommands,
  slurmCommandsFor,
} from './slurm-commands.ts';

/** An acquire trusts a poll this recent; an older one is done again first. */
const FRESH_MS = 1000;

export interface HeldAllocation {
  jobId: string;
  nodes: AllocationNode[];
  /** When we saw it running (ms since the epoch). */
  grantedAt: number;
}

export interface AllocationEnd {
  jobId: string;
  nodes: AllocationNode[];
  reason: EndReason;
  /** The state squeue last showed (`CANCELLED`, `TIMEOUT`, …), or `gone` once purged. */
  state: string;
}

export interface SlurmAllocationDeps {
  commands: SlurmCommands;
  logger: Logger;
  namespace: string;
  /**
   * How many sandboxes are on the allocation now. Asked only when nothing is pinned, before the
   * idle clock starts or runs out; may list the nodes. A failure counts as in use.
   */
  inUse: (allocation: HeldAllocation) => number | Promise<number>;
  now?: () => number;
}

export class SlurmAllocation {
  readonly options: ParsedSlurmOptions;
  readonly jobName: string;
  readonly #deps: SlurmAllocationDeps;
  readonly #now: () => number;
  readonly #listeners = new Set<(end: AllocationEnd) => void>();
  #current: HeldAllocation | null = null;
  #acquiring: Promise<HeldAllocation> | null = null;
  /** A job id whose state is followed (pending or running). */
  #jobId: string | null = null;
  #adoptionChecked = false;
  #pins = 0;
  #idleSince: number | null = null;
  #timer: NodeJS.Timeout | null = null;
  #polling: Promise<void> | null = null;
  #closed = false;
  /** When a poll last saw the held job running. */
  #seenRunningAt = 0;
  /** Figures for tests and benchmarks. */
  readonly stats = { submitted: 0, adopted: 0, released: 0, ended: 0, lastGrantMs: 0 };

  constructor(options: SlurmOptions | ParsedSlurmOptions, deps: SlurmAllocationDeps) {
    this.options = SlurmOptionsSchema.parse(options);
    this.#deps = deps;
    this.#now = deps.now ?? Date.now;
    this.jobName = this.options.jobName ?? `gym-${deps.namespace}`.slice(0, 64);
  }

  /** Listens for the end of every allocation this object held. */
  onEnd(listener: (end: AllocationEnd) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Whether an `acquire` holds it for a caller now (a create placing a sandbox). */
  get pinned(): boolean {
    return this.#pins > 0;
  }

  /** The allocation held now, if its last poll saw it running. */
  get current(): HeldAllocation | null {
    return this.#current;
  }

  #bin(command: string): string {
    return this.options.binDirectory === undefined ? command : posix.join(this.options.binDirectory, command);
  }

  async #slurm(argv: string[]): Promise<SlurmCommandResult> {
    const [command, ...rest] = argv;
    return this.#deps.commands.run([this.#bin(command!), ...rest], this.options.commandTimeoutMs);
  }

  /**
   * The allocation, held for the caller until it calls the returned `unpin` (so idle release
   * cannot take it between placement and the sandbox's start): the one held now, else an adopted
   * or new one once it runs. Fails with PROVIDER_TIMEOUT when it pends past `startTimeoutMs`.
   */
  async acquire(): Promise<{ allocation: HeldAllocation; unpin: () => void }> {
    if (this.#closed) throw new GymError('PROVIDER_UNAVAILABLE', 'the Slurm allocation is closed');
    this.#pins += 1;
    this.#idleSince = null;
    let unpinned = false;
    const unpin = () => {
      if (unpinned) return;
      unpinned = true;
      this.#pins -= 1;
    };
    try {
      // One that was running a while ago is looked at again: it may have ended since.
      if (this.#current !== null && this.#now() - this.#seenRunningAt > FRESH_MS) await this.poll();
      if (this.#current === null && this.#acquiring === null)
        this.#acquiring = this.#obtain().finally(() => {
          this.#acquiring = null;
        });
      const allocation = this.#current ?? (await this.#acquiring!);
      return { allocation, unpin };
    } catch (error) {
      unpin();
      throw error;
    }
  }

  async #obtain(): Promise<HeldAllocation> {
    const started = this.#now();
    let jobId = this.#adoptionChecked ? null : ((await this.#findOurs())?.jobId ?? null);
    this.#adoptionChecked = true;
    if (jobId !== null) {
      this.stats.adopted += 1;
      this.#deps.logger.info({ jobId, jobName: this.jobName }, 'slurm: adopting our allocation');
    } else {
      const submitted = await this.#slurm(holderJobArgv(this.options, this.jobName));
      if (submitted.code !== 0)
        throw new GymError(
          'PROVIDER_ERROR',
          `sbatch on ${this.#deps.commands.where} failed: ${submitted.stderr.trim() || `exit ${submitted.code}`}`,
        );
      jobId = parseSbatchParsable(submitted.stdout);
      this.stats.submitted += 1;
      this.#deps.logger.info({ jobId, jobName: this.jobName }, 'slurm: allocation submitted');
    }
    this.#jobId = jobId;
    // Until it runs: often at first, then at most every pollIntervalMs.
    let wait = 100;
    for (;;) {
      const job = await this.#job(jobId);
      const phase = job === undefined ? 'ended' : jobPhase(job.state);
      if (phase === 'running' && job !== undefined) return this.#hold(job, started);
      if (phase === 'ended') {
        this.#jobId = null;
        throw new GymError(
          'PROVIDER_ERROR',
          `the Slurm allocation ${jobId} ended before it ran (${job?.state ?? 'gone'}${job?.reason ? `: ${job.reason}` : ''})`,
        );
      }
      if (this.#closed) throw new GymError('PROVIDER_UNAVAILABLE', 'the Slurm allocation is closed');
      if (this.#now() - started > this.options.startTimeoutMs) {
        await this.#cancel(jobId);
        this.#jobId = null;
        throw new GymError(
          'PROVIDER_TIMEOUT',
          `the Slurm allocation ${jobId} still pends after ${this.options.startTimeoutMs} ms (${job?.reason ?? ''}); cancelled`,
          { details: { jobId, reason: job?.reason } },
        );
      }
      await new Promise((resolve) => setTimeout(resolve, wait));
      wait = Math.min(this.options.pollIntervalMs, wait * 2);
    }
  }

  /** Holds a running job from now on: its nodes learned, its state polled. */
  async #hold(job: JobLine, started: number): Promise<HeldAllocation> {
    const allocation: HeldAllocation = {
      jobId: job.jobId,
      nodes: await this.#nodes(job.nodeList),
      grantedAt: this.#now(),
    };
    this.stats.lastGrantMs = allocation.grantedAt - started;
    this.#jobId = job.jobId;
    this.#current = allocation;
    this.#seenRunningAt = this.#now();
    this.#idleSince = null;
    this.#schedule();
    this.#deps.logger.info(
      { jobId: job.jobId, nodes: allocation.nodes.map((node) => node.name), ms: this.stats.lastGrantMs },
      'slurm: allocation running',
    );
    return allocation;
  }

  /**
   * After a restart: holds a running job of ours (same name, same user) left by an earlier
   * daemon, without submitting one; null when there is none. A pending one is left for the next
   * `acquire` to adopt and wait for.
   */
  async adopt(): Promise<HeldAllocation | null> {
    if (this.#current !== null) return this.#current;
    if (this.#adoptionChecked || this.#acquiring !== null || this.#closed) return null;
    const started = this.#now();
    const ours = await this.#findOurs();
    if (this.#current !== null) return this.#current;
    if (ours === null) {
      this.#adoptionChecked = true;
      return null;
    }
    if (ours.state !== 'RUNNING' || this.#acquiring !== null) return null;
    this.#adoptionChecked = true;
    this.stats.adopted += 1;
    this.#deps.logger.info({ jobId: ours.jobId, jobName: this.jobName }, 'slurm: adopting our allocation');
    return this.#hold(ours, started);
  }

  /** A pending or running job of ours (same name, same user) left by an earlier daemon. */
  async #findOurs(): Promise<JobLine | null> {
    const listed = await this.#slurm([
      'squeue',
      '--me',
      '-h',
      `--name=${this.jobName}`,
      '--states=PENDING,CONFIGURING,RUNNING',
      '-o',
      JOB_FORMAT,
    ]);
    if (listed.code !== 0)
      throw new GymError(
        'PROVIDER_UNAVAILABLE',
        `squeue on ${this.#deps.commands.where} failed: ${listed.stderr.trim() || `exit ${listed.code}`}`,
      );
    const jobs = parseJobLines(listed.stdout).sort((left, right) => Number(right.jobId) - Number(left.jobId));
    return jobs.find((job) => job.state === 'RUNNING') ?? jobs[0] ?? null;
  }

  /** Asks the controller something (our jobs); throws PROVIDER_UNAVAILABLE when it does not answer. */
  async ping(): Promise<void> {
    const listed = await this.#slurm(['squeue', '--me', '-h', '-o', '%i']);
    if (listed.code !== 0)
      throw new GymError(
        'PROVIDER_UNAVAILABLE',
        `squeue on ${this.#deps.commands.where} failed: ${listed.stderr.trim() || `exit ${listed.code}`}`,
      );
  }

  /** The job's line in squeue (every state until it is purged); undefined once it is gone. */
  async #job(jobId: string): Promise<JobLine | undefined> {
    const listed = await this.#slurm(['squeue', '-h', '--states=all', `--jobs=${jobId}`, '-o', JOB_FORMAT]);
    // A purged job: "slurm_load_jobs error: Invalid job id specified" and exit 1.
    if (listed.code !== 0 && /invalid job id/i.test(listed.stderr)) return undefined;
    if (listed.code !== 0)
      throw new GymError(
        'PROVIDER_UNAVAILABLE',
        `squeue on ${this.#deps.commands.where} failed: ${listed.stderr.trim() || `exit ${listed.code}`}`,
      );
    return parseJobLines(listed.stdout).find((job) => job.jobId === jobId);
  }

  async #nodes(nodeList: string): Promise<AllocationNode[]> {
    const listed = await this.#slurm(['sinfo', '-h', '-N', `--nodes=${nodeList}`, '-o', '%N|%o']);
    const nodes = listed.code === 0 ? parseNodeLines(listed.stdout) : [];
    if (nodes.length === 0)
      throw new GymError(
        'PROVIDER_ERROR',
        `sinfo could not name the nodes of ${nodeList}: ${listed.stderr.trim() || 'no output'}`,
      );
    return nodes;
  }

  async #cancel(jobId: string): Promise<void> {
    const cancelled = await this.#slurm(['scancel', jobId]).catch((error: Error) => ({
      code: null,
      stdout: '',
      stderr: error.message,
    }));
    if (cancelled.code !== 0)
      this.#deps.logger.warn({ jobId, stderr: cancelled.stderr.trim() }, 'slurm: scancel failed');
  }

  #schedule(): void {
    if (this.#timer !== null || this.#closed) return;
    this.#timer = setInterval(() => void this.poll(), this.options.pollIntervalMs);
    this.#timer.unref();
  }

  #stopTimer(): void {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
  }

  /** One look at the held job (the timer calls it; tests may too): ended? idle for too long? */
  poll(): Promise<void> {
    this.#polling ??= this.#pollOnce()
      .catch((error: Error) => {
        // The controller or the login host did not answer: nothing is concluded from silence.
        this.#deps.logger.warn({ error: error.message }, 'slurm: cannot read the allocation state');
      })
      .finally(() => {
        this.#polling = null;
      });
    return this.#polling;
  }

  async #pollOnce(): Promise<void> {
    const held = this.#current;
    if (held === null) return;
    const job = await this.#job(held.jobId);
    if (this.#current !== held) return;
    if (job === undefined || jobPhase(job.state) !== 'running') {
      this.#ended(held, endReason(job), job?.state ?? 'gone');
      return;
    }
    this.#seenRunningAt = this.#now();
    if (this.#pins > 0) {
      this.#idleSince = null;
      return;
    }
    let used: number;
    try {
      used = await this.#deps.inUse(held);
    } catch {
      used = 1;
    }
    if (this.#current !== held) return;
    if (used > 0 || this.#pins > 0) {
      this.#idleSince = null;
      return;
    }
    this.#idleSince ??= this.#now();
    if (this.#now() - this.#idleSince < this.options.idleReleaseMs) return;
    this.#deps.logger.info({ jobId: held.jobId }, 'slurm: giving the idle allocation back');
    this.stats.released += 1;
    await this.#cancel(held.jobId);
    this.#ended(held, 'released', 'CANCELLED');
  }

  #ended(held: HeldAllocation, reason: EndReason, state: string): void {
    if (this.#current !== held) return;
    this.#current = null;
    this.#jobId = null;
    this.#idleSince = null;
    this.#stopTimer();
    this.stats.ended += 1;
    this.#deps.logger.warn({ jobId: held.jobId, reason, state }, 'slurm: the allocation ended');
    const end: AllocationEnd = { jobId: held.jobId, nodes: held.nodes, reason, state };
    for (const listener of this.#listeners) {
      try {
        listener(end);
      } catch (error) {
        this.#deps.logger.error({ error: (error as Error).message }, 'slurm: an end listener failed');
      }
    }
  }

  /** Gives the allocation back now (`scancel`), pending or running; its listeners hear `released`. */
  async release(): Promise<void> {
    const held = this.#current;
    const jobId = held?.jobId ?? this.#jobId;
    if (jobId === null) return;
    this.stats.released += 1;
    await this.#cancel(jobId);
    if (held !== null) this.#ended(held, 'released', 'CANCELLED');
  }

  /**
   * Stops following the allocation. The job is left running: the daemon's sandboxes on it outlive
   * the daemon like any provider's, and the next daemon adopts it. `release()` first to give it back.
   */
  close(): void {
    this.#closed = true;
    this.#stopTimer();
    this.#deps.commands.close();
  }
}
