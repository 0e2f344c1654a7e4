/**
 * What the Slurm mode of the SSH providers runs and reads (`slurm-allocation.ts` holds the
 * allocation itself): its options, where the Slurm commands run (this machine, or a login host
 * over SSH, with the same argv either way), the holder job's argv, and parsers of what squeue,
 * sinfo and sbatch print (pure, unit-tested).
 */
import { execFile } from 'node:child_process';
import { z } from 'zod';
import { GymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import { shellJoin } from '../shared/shell.ts';
import { DEFAULT_TARGET, SshConnection } from './connection.ts';

/** Slurm's time format: `minutes`, `minutes:seconds`, `hours:minutes:seconds`, `days-hours[:minutes[:seconds]]`. */
const SLURM_TIME = /^(\d+-\d{1,2}(:\d{1,2}){0,2}|\d+(:\d{1,2}){0,2})$/;
const SLURM_WORD = /^[A-Za-z0-9][A-Za-z0-9_.,:+=@%-]*$/;

export const SlurmOptionsSchema = z
  .object({
    /**
     * Run the Slurm commands over SSH on this login host. Absent: on this machine (the daemon runs
     * on a login node).
     */
    login: z
      .object({
        host: z.string().min(1),
        port: z.number().int().min(1).max(65_535).default(22),
        username: z.string().min(1),
        privateKeyPath: z.string().optional(),
        agent: z.string().optional(),
        knownHostsPath: z.string().min(1),
      })
      .strict()
      .optional(),
    /** A folder holding sbatch, squeue, sinfo and scancel, when they are not on the PATH. */
    binDirectory: z.string().regex(/^\//, 'must be an absolute path').optional(),
    partition: z.string().regex(SLURM_WORD).optional(),
    account: z.string().regex(SLURM_WORD).optional(),
    qos: z.string().regex(SLURM_WORD).optional(),
    /** The allocation's time limit, in Slurm's format (`--time`). */
    timeLimit: z.string().regex(SLURM_TIME, 'a Slurm time such as 60, 2:00:00 or 1-0').default('1:00:00'),
    nodes: z.number().int().positive().max(4096).default(1),
    /** CPUs held on each node (`--ntasks-per-node=1 --cpus-per-task=N`). */
    cpusPerNode: z.number().int().positive().default(1),
    /** Memory held on each node (`--mem`); the site's default when absent. */
    memoryPerNodeMiB: z.number().int().positive().optional(),
    /** More sbatch options for the site (`--constraint=…`, `--gres=…`, `--reservation=…`). */
    extraArgs: z.array(z.string().regex(/^--[a-z][a-z-]*(=.*)?$/, 'a long sbatch option')).default([]),
    /** The holder job's name; `gym-<namespace>` when absent. A restarted daemon adopts a job of this name. */
    jobName: z.string().regex(SLURM_WORD).max(64).optional(),
    /** How often the job's state is read while it is held. */
    pollIntervalMs: z.number().int().positive().default(10_000),
    /** The allocation is given back after this long without sandboxes. */
    idleReleaseMs: z.number().int().nonnegative().default(300_000),
    /** How long a create waits for a pending allocation before it fails (and the job is cancelled). */
    startTimeoutMs: z.number().int().positive().default(600_000),
    /** Each Slurm command's time limit. */
    commandTimeoutMs: z.number().int().positive().default(30_000),
  })
  .strict();
export type SlurmOptions = z.input<typeof SlurmOptionsSchema>;
export type ParsedSlurmOptions = z.output<typeof SlurmOptionsSchema>;

export interface SlurmCommandResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Where the Slurm commands run. */
export interface SlurmCommands {
  readonly where: string;
  run(argv: string[], timeoutMs: number): Promise<SlurmCommandResult>;
  close(): void;
}

/** The Slurm commands on this machine, without a shell. */
export class LocalSlurmCommands implements SlurmCommands {
  readonly where = 'this machine';

  run(argv: string[], timeoutMs: number): Promise<SlurmCommandResult> {
    const [file, ...args] = argv;
    return new Promise((resolve) => {
      execFile(
        file!,
        args,
        { timeout: timeoutMs, maxBuffer: 4 * 1024 * 1024, encoding: 'utf8' },
        (error, stdout, stderr) => {
          const code = error === null ? 0 : typeof error.code === 'number' ? error.code : null;
          const why = error !== null && code === null ? `${error.message}\n` : '';
          resolve({ code, stdout, stderr: `${why}${stderr}` });
        },
      );
    });
  }

  close(): void {}
}

/** The Slurm commands on a login host over SSH; a host that does not answer is PROVIDER_UNAVAILABLE. */
export class SshSlurmCommands implements SlurmCommands {
  readonly #connection: SshConnection;

  constructor(login: NonNullable<ParsedSlurmOptions['login']>, logger: Logger) {
    this.#connection = new SshConnection(
      {
        ...DEFAULT_TARGET,
        host: login.host,
        port: login.port,
        username: login.username,
        knownHostsPath: login.knownHostsPath,
        ...(login.privateKeyPath === undefined ? {} : { privateKeyPath: login.privateKeyPath }),
        ...(login.agent === undefined ? {} : { agent: login.agent }),
      },
      logger,
    );
  }

  get where(): string {
    return this.#connection.name;
  }

  async run(argv: string[], timeoutMs: number): Promise<SlurmCommandResult> {
    let stdout = '';
    let stderr = '';
    const abort = AbortSignal.timeout(timeoutMs);
    const exit = await this.#connection.exec(shellJoin(argv), {
      signal: abort,
      onStdout: (chunk) => {
        stdout += chunk.toString();
      },
      onStderr: (chunk) => {
        stderr = (stderr + chunk.toString()).slice(-8000);
      },
    });
    return { code: exit.code, stdout, stderr };
  }

  close(): void {
    this.#connection.close();
  }
}

// ---- What the commands print (pure, unit-tested) ----

/** `sbatch --parsable` prints `jobid` or `jobid;cluster`. */
export function parseSbatchParsable(stdout: string): string {
  const first = stdout.trim().split('\n').pop()?.trim() ?? '';
  const id = first.split(';')[0] ?? '';
  if (!/^\d+$/.test(id))
    throw new GymError('PROVIDER_ERROR', `sbatch printed no job id: ${JSON.stringify(stdout)}`);
  return id;
}

export interface JobLine {
  jobId: string;
  state: string;
  /** The compressed host list (`node[01-03]`); empty while pending. */
  nodeList: string;
  /** squeue's `%r`: why it pends or ended (`Priority`, `TimeLimit`, `NodeDown`, `None`). */
  reason: string;
}

/** The squeue format these lines come from. */
export const JOB_FORMAT = '%i|%T|%N|%r';

/** Lines of `squeue -h -o '%i|%T|%N|%r'`. */
export function parseJobLines(stdout: string): JobLine[] {
  const jobs: JobLine[] = [];
  for (const line of stdout.split('\n')) {
    if (line.trim() === '') continue;
    const [jobId = '', state = '', nodeList = '', reason = ''] = line.trim().split('|');
    if (!/^\d+$/.test(jobId)) continue;
    jobs.push({ jobId, state, nodeList, reason });
  }
  return jobs;
}

export type JobPhase = 'pending' | 'running' | 'ended';

/** Where a job state puts the allocation. COMPLETING counts as ended: its steps are being killed. */
export function jobPhase(state: string): JobPhase {
  if (['PENDING', 'CONFIGURING', 'REQUEUED', 'REQUEUE_HOLD', 'REQUEUE_FED', 'RESIZING'].includes(state))
    return 'pending';
  if (state === 'RUNNING') return 'running';
  // SUSPENDED and STOPPED leave the job alive, but its nodes stop serving it: as good as gone.
  return 'ended';
}

export type EndReason =
  | 'released'
  | 'cancelled'
  | 'time-limit'
  | 'node-failure'
  | 'preempted'
  | 'completed'
  | 'failed'
  | 'suspended'
  | 'vanished';

/** Why a job that is no longer running ended, from its state and squeue's reason. */
export function endReason(job: JobLine | undefined): EndReason {
  if (job === undefined) return 'vanished';
  switch (job.state) {
    case 'CANCELLED':
      return 'cancelled';
    case 'TIMEOUT':
    case 'DEADLINE':
      return 'time-limit';
    case 'NODE_FAIL':
    case 'BOOT_FAIL':
      return 'node-failure';
    case 'PREEMPTED':
      return 'preempted';
    case 'COMPLETED':
      return 'completed';
    case 'SUSPENDED':
    case 'STOPPED':
      return 'suspended';
    case 'COMPLETING':
      if (/TimeLimit|Deadline/i.test(job.reason)) return 'time-limit';
      if (/Node(Down|Fail)|BootFail/i.test(job.reason)) return 'node-failure';
      if (/Preempt/i.test(job.reason)) return 'preempted';
      return 'cancelled';
    default:
      return 'failed';
  }
}

export interface AllocationNode {
  /** Slurm's node name. */
  name: string;
  /** Slurm's NodeAddr for it (the name itself where the site sets none). */
  address: string;
}

/** Lines of `sinfo -h -N -n LIST -o '%N|%o'`: a node once per partition, so repeats are dropped. */
export function parseNodeLines(stdout: string): AllocationNode[] {
  const nodes = new Map<string, AllocationNode>();
  for (const line of stdout.split('\n')) {
    const [name = '', address = ''] = line.trim().split('|');
    if (name === '' || nodes.has(name)) continue;
    nodes.set(name, { name, address: address === '' || address === '(null)' ? name : address });
  }
  return [...nodes.values()].sort((left, right) => left.name.localeCompare(right.name));
}

/** The sbatch argv of the holder job. */
export function holderJobArgv(options: ParsedSlurmOptions, jobName: string, sbatch = 'sbatch'): string[] {
  return [
    sbatch,
    '--parsable',
    `--job-name=${jobName}`,
    '--output=/dev/null',
    '--error=/dev/null',
    `--time=${options.timeLimit}`,
    `--nodes=${options.nodes}`,
    '--ntasks-per-node=1',
    `--cpus-per-task=${options.cpusPerNode}`,
    ...(options.memoryPerNodeMiB === undefined ? [] : [`--mem=${options.memoryPerNodeMiB}M`]),
    ...(options.partition === undefined ? [] : [`--partition=${options.partition}`]),
    ...(options.account === undefined ? [] : [`--account=${options.account}`]),
    ...(options.qos === undefined ? [] : [`--qos=${options.qos}`]),
    ...options.extraArgs,
    // Holds the allocation and nothing else; the job's end (time limit, scancel) ends it.
    '--wrap=while :; do sleep 86400; done',
  ];
}

// ---- The allocation ----

/** The commands for the options: over SSH to the login host when one is configured. */
export function slurmCommandsFor(options: ParsedSlurmOptions, logger: Logger): SlurmCommands {
  return options.login === undefined ? new LocalSlurmCommands() : new SshSlurmCommands(options.login, logger);
}
