/**
 * The one-node Slurm cluster of the tests (scripts/slurm-up.sh starts it; scripts/setup.sh calls
 * that): node `gym-c1` with NodeAddr 127.0.0.20 in partition `gym`. A test that holds allocations
 * names its jobs after a namespace of its own and cancels every job of that name when it ends.
 */
import { execFileSync, spawnSync } from 'node:child_process';

export const SLURM_NODE = 'gym-c1';
/** The node's NodeAddr: a test runs the node's sshd on this address, so Slurm's address is the SSH host. */
export const SLURM_NODE_ADDRESS = '127.0.0.20';
export const SLURM_PARTITION = 'gym';

/** Fails loudly (never skips) when the cluster does not answer. */
export function requireSlurm(): void {
  const answer = spawnSync('sinfo', ['-h', '-n', SLURM_NODE, '-o', '%T'], { encoding: 'utf8' });
  const state = answer.stdout?.trim() ?? '';
  if (answer.status !== 0 || !/^(idle|mixed|allocated)$/.test(state))
    throw new Error(
      `the test Slurm cluster does not answer (sinfo: ${answer.error?.message ?? (answer.stderr?.trim() || state || 'nothing')}); run scripts/slurm-up.sh (scripts/setup.sh does)`,
    );
}

/** squeue's state of a job (`RUNNING`, `CANCELLED`, …), or null once the controller forgot it. */
export function jobState(jobId: string): string | null {
  const answer = spawnSync('squeue', ['-h', '--states=all', `--jobs=${jobId}`, '-o', '%T'], {
    encoding: 'utf8',
  });
  return answer.status === 0 ? answer.stdout.trim() || null : null;
}

/** Pending and running jobs of a name. */
export function jobsNamed(name: string): string[] {
  return execFileSync('squeue', ['-h', '--me', `--name=${name}`, '--states=PENDING,RUNNING', '-o', '%i'], {
    encoding: 'utf8',
  })
    .split('\n')
    .filter((line) => line.trim() !== '');
}

/** Cancels every job of these names (a test's own, whatever it left). */
export function cancelJobsNamed(...names: string[]): void {
  for (const name of names) spawnSync('scancel', ['--me', `--name=${name}`], { stdio: 'ignore' });
}
