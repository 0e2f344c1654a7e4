/**
 * The Slurm allocation against the real one-node cluster (scripts/slurm-up.sh): held, seen in
 * squeue, its node and NodeAddr learned; a scancel and a time limit noticed; idle release;
 * adoption by a new daemon; a pending allocation given up; the commands run over SSH on a login
 * host (a real sshd).
 */

import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymError } from '../../core/errors.ts';
import { silentLogger } from '../../core/logger.ts';
import { startSshd, type TestSshd } from '../../test/fixtures/sshd.ts';
import {
  cancelJobsNamed,
  jobState,
  jobsNamed,
  requireSlurm,
  SLURM_NODE,
  SLURM_NODE_ADDRESS,
  SLURM_PARTITION,
} from '../../test/hpc/slurm.ts';
import { waitFor } from '../../test/wait-for.ts';
import {
  type AllocationEnd,
  LocalSlurmCommands,
  SlurmAllocation,
  type SlurmAllocationDeps,
  type SlurmOptions,
  SshSlurmCommands,
} from './slurm-allocation.ts';

requireSlurm();
const prefix = `t${randomBytes(3).toString('hex')}`;
const names: string[] = [];
const allocations: SlurmAllocation[] = [];
let login: TestSshd;

function allocation(
  name: string,
  options: Partial<SlurmOptions> = {},
  deps: Partial<SlurmAllocationDeps> = {},
) {
  const namespace = `${prefix}-${name}`;
  names.push(`gym-${namespace}`);
  const held = new SlurmAllocation(
    { partition: SLURM_PARTITION, timeLimit: '10', pollIntervalMs: 200, idleReleaseMs: 600_000, ...options },
    { commands: new LocalSlurmCommands(), logger: silentLogger, namespace, inUse: () => 1, ...deps },
  );
  allocations.push(held);
  return held;
}

function recordEnds(held: SlurmAllocation): AllocationEnd[] {
  const ends: AllocationEnd[] = [];
  held.onEnd((end) => ends.push(end));
  return ends;
}

beforeAll(async () => {
  login = await startSshd({ host: '127.0.0.21', port: 28000 + (process.pid % 1000) });
});
afterAll(async () => {
  for (const held of allocations) held.close();
  cancelJobsNamed(...names);
  await login?.cleanup();
});

// Each case holds jobs of its own name: they run side by side, so the time-limit case's wait
// (slurmctld checks limits every 30 s) overlaps the others.
describe.concurrent('a Slurm allocation on the one-node cluster', () => {
  it('is held by one job, visible in squeue, with its node and NodeAddr, shared by every acquire', async () => {
    const held = allocation('hold');
    const first = await held.acquire();
    expect(first.allocation.nodes).toEqual([{ name: SLURM_NODE, address: SLURM_NODE_ADDRESS }]);
    expect(jobState(first.allocation.jobId)).toBe('RUNNING');
    expect(jobsNamed(held.jobName)).toEqual([first.allocation.jobId]);
    const second = await held.acquire();
    expect(second.allocation.jobId).toBe(first.allocation.jobId);
    expect(held.stats.submitted).toBe(1);
    first.unpin();
    second.unpin();
  });

  it('notices a scancel, says so once, and the next acquire holds a new job', async () => {
    const held = allocation('cancel');
    const ends = recordEnds(held);
    const { allocation: first, unpin } = await held.acquire();
    unpin();
    spawnSync('scancel', [first.jobId]);
    await waitFor('the end noticed', () => ends.length > 0, 10_000, 50);
    expect(ends).toEqual([
      expect.objectContaining({ jobId: first.jobId, reason: 'cancelled', nodes: first.nodes }),
    ]);
    expect(held.current).toBeNull();
    const { allocation: next } = await held.acquire();
    expect(next.jobId).not.toBe(first.jobId);
    expect(jobState(next.jobId)).toBe('RUNNING');
    expect(ends).toHaveLength(1);
  });

  it('a create right after a scancel is not given the ended allocation', async () => {
    const held = allocation('stale', { pollIntervalMs: 60_000 });
    const { allocation: first } = await held.acquire();
    spawnSync('scancel', [first.jobId]);
    // The timer would not look for a minute; the acquire looks itself once its last look is old.
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const { allocation: next } = await held.acquire();
    expect(next.jobId).not.toBe(first.jobId);
  });

  it('is given back after idleReleaseMs without sandboxes, and never while one is on it or an acquire is pinned', async () => {
    let used = 1;
    const held = allocation('idle', { idleReleaseMs: 600 }, { inUse: () => used });
    const ends = recordEnds(held);
    const { allocation: first, unpin } = await held.acquire();
    used = 0;
    // Pinned (a create placing a sandbox): not idle however long.
    await new Promise((resolve) => setTimeout(resolve, 1200));
    expect(jobState(first.jobId)).toBe('RUNNING');
    unpin();
    used = 1;
    await new Promise((resolve) => setTimeout(resolve, 1200));
    expect(jobState(first.jobId)).toBe('RUNNING');
    used = 0;
    const releasedAt = Date.now();
    await waitFor('the idle release', () => ends.length > 0, 10_000, 50);
    expect(Date.now() - releasedAt).toBeGreaterThanOrEqual(600);
    expect(ends[0]).toMatchObject({ jobId: first.jobId, reason: 'released' });
    await waitFor('the job gone from the queue', () => jobState(first.jobId) !== 'RUNNING', 10_000);
    expect(held.stats.released).toBe(1);
  });

  it('is adopted by a new daemon of the same namespace instead of submitting another job', async () => {
    const before = allocation('adopt');
    const { allocation: first } = await before.acquire();
    before.close();
    const after = new SlurmAllocation(
      { partition: SLURM_PARTITION, timeLimit: '10', pollIntervalMs: 200 },
      {
        commands: new LocalSlurmCommands(),
        logger: silentLogger,
        namespace: `${prefix}-adopt`,
        inUse: () => 1,
      },
    );
    allocations.push(after);
    // A restarted provider looks for it before anything asks for an allocation.
    const adopted = await after.adopt();
    expect(adopted?.jobId).toBe(first.jobId);
    expect(adopted?.nodes).toEqual(first.nodes);
    const { allocation: acquired } = await after.acquire();
    expect(acquired.jobId).toBe(first.jobId);
    expect(after.stats).toMatchObject({ adopted: 1, submitted: 0 });
    expect(jobsNamed(after.jobName)).toEqual([first.jobId]);
    // Nothing of ours runs under another name: nothing to adopt, and nothing submitted.
    const none = allocation('adopt-none');
    expect(await none.adopt()).toBeNull();
    expect(none.stats.submitted).toBe(0);
  });

  it('gives up an allocation that pends past startTimeoutMs, and cancels it', async () => {
    // --begin keeps it pending (reason BeginTime) for an hour.
    const held = allocation('pending', { startTimeoutMs: 1500, extraArgs: ['--begin=now+3600'] });
    const error = await held.acquire().then(
      () => null,
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(GymError);
    expect((error as GymError).code).toBe('PROVIDER_TIMEOUT');
    const jobId = String((error as GymError).details?.jobId);
    expect((error as GymError).details?.reason).toBe('BeginTime');
    await waitFor('the pending job cancelled', () => jobState(jobId) !== 'PENDING' || undefined, 10_000);
    expect(jobsNamed(held.jobName)).toEqual([]);
  });

  it('notices its time limit running out', async () => {
    const held = allocation('limit');
    const ends = recordEnds(held);
    const { allocation: first, unpin } = await held.acquire();
    unpin();
    // Its end moved to now: slurmctld's next limit check (within 30 s) ends it with TIMEOUT.
    spawnSync('scontrol', ['update', `JobId=${first.jobId}`, 'EndTime=now']);
    await waitFor('the time limit noticed', () => ends.length > 0, 45_000, 100);
    expect(ends[0]).toMatchObject({ jobId: first.jobId, reason: 'time-limit' });
    expect(held.current).toBeNull();
  }, 60_000);

  it('runs the Slurm commands over SSH on a login host', async () => {
    const held = allocation(
      'login',
      {},
      {
        commands: new SshSlurmCommands(
          {
            host: login.host,
            port: login.port,
            username: 'root',
            privateKeyPath: login.clientKeyPath,
            knownHostsPath: login.knownHostsPath,
          },
          silentLogger,
        ),
      },
    );
    const ends = recordEnds(held);
    const { allocation: first } = await held.acquire();
    expect(first.nodes).toEqual([{ name: SLURM_NODE, address: SLURM_NODE_ADDRESS }]);
    expect(jobState(first.jobId)).toBe('RUNNING');
    await held.release();
    expect(ends).toEqual([expect.objectContaining({ jobId: first.jobId, reason: 'released' })]);
    await waitFor('the job gone from the queue', () => jobState(first.jobId) !== 'RUNNING', 10_000);
  });
});
