import { describe, expect, it } from 'vitest';
import {
  endReason,
  holderJobArgv,
  jobPhase,
  parseJobLines,
  parseNodeLines,
  parseSbatchParsable,
  SlurmOptionsSchema,
} from './slurm-allocation.ts';

describe('Slurm output parsing', () => {
  it('reads the job id sbatch --parsable prints, with or without a cluster', () => {
    expect(parseSbatchParsable('1234\n')).toBe('1234');
    expect(parseSbatchParsable('77;cluster-a\n')).toBe('77');
    // A site's submit filter may print a notice first; the id is the last line.
    expect(parseSbatchParsable('note: using default account\n88\n')).toBe('88');
    expect(() => parseSbatchParsable('sbatch: error: Batch job submission failed\n')).toThrow(/no job id/);
    expect(() => parseSbatchParsable('')).toThrow(/no job id/);
  });

  it('reads squeue lines of id, state, node list and reason', () => {
    expect(parseJobLines('12|RUNNING|node[01-03]|None\n13|PENDING||Priority\n\n')).toEqual([
      { jobId: '12', state: 'RUNNING', nodeList: 'node[01-03]', reason: 'None' },
      { jobId: '13', state: 'PENDING', nodeList: '', reason: 'Priority' },
    ]);
    expect(parseJobLines('slurm_load_jobs error: Invalid job id specified\n')).toEqual([]);
  });

  it('puts each job state in its phase', () => {
    expect(jobPhase('PENDING')).toBe('pending');
    expect(jobPhase('CONFIGURING')).toBe('pending');
    expect(jobPhase('RUNNING')).toBe('running');
    for (const state of [
      'COMPLETING',
      'CANCELLED',
      'TIMEOUT',
      'NODE_FAIL',
      'FAILED',
      'SUSPENDED',
      'PREEMPTED',
    ])
      expect(jobPhase(state)).toBe('ended');
  });

  it('names why a job ended, from its final state or, while completing, its reason', () => {
    const job = (state: string, reason = 'None') => ({ jobId: '1', state, nodeList: 'n1', reason });
    expect(endReason(undefined)).toBe('vanished');
    expect(endReason(job('CANCELLED'))).toBe('cancelled');
    expect(endReason(job('TIMEOUT'))).toBe('time-limit');
    expect(endReason(job('NODE_FAIL'))).toBe('node-failure');
    expect(endReason(job('PREEMPTED'))).toBe('preempted');
    expect(endReason(job('OUT_OF_MEMORY'))).toBe('failed');
    // What squeue showed here while a job was killed at its time limit.
    expect(endReason(job('COMPLETING', 'TimeLimit'))).toBe('time-limit');
    expect(endReason(job('COMPLETING', 'NodeDown'))).toBe('node-failure');
    expect(endReason(job('COMPLETING'))).toBe('cancelled');
  });

  it('expands sinfo node lines to names and NodeAddr, once per node', () => {
    expect(parseNodeLines('c2|10.0.0.2\nc1|10.0.0.1\nc1|10.0.0.1\nc3|\n')).toEqual([
      { name: 'c1', address: '10.0.0.1' },
      { name: 'c2', address: '10.0.0.2' },
      { name: 'c3', address: 'c3' },
    ]);
  });
});

describe('the holder job', () => {
  it('asks for what the options say, and holds it with a shell loop', () => {
    const options = SlurmOptionsSchema.parse({
      partition: 'batch',
      account: 'proj1',
      timeLimit: '2:00:00',
      nodes: 3,
      cpusPerNode: 8,
      memoryPerNodeMiB: 4096,
      extraArgs: ['--constraint=ib'],
    });
    expect(holderJobArgv(options, 'gym-ns', '/opt/slurm/bin/sbatch')).toEqual([
      '/opt/slurm/bin/sbatch',
      '--parsable',
      '--job-name=gym-ns',
      '--output=/dev/null',
      '--error=/dev/null',
      '--time=2:00:00',
      '--nodes=3',
      '--ntasks-per-node=1',
      '--cpus-per-task=8',
      '--mem=4096M',
      '--partition=batch',
      '--account=proj1',
      '--constraint=ib',
      '--wrap=while :; do sleep 86400; done',
    ]);
  });

  it('refuses options that are not Slurm words, times or long options', () => {
    expect(() => SlurmOptionsSchema.parse({ timeLimit: 'an hour' })).toThrow();
    expect(() => SlurmOptionsSchema.parse({ partition: 'a b' })).toThrow();
    expect(() => SlurmOptionsSchema.parse({ partition: '--wrap=x' })).toThrow();
    expect(() => SlurmOptionsSchema.parse({ extraArgs: ['-w node1'] })).toThrow();
    expect(() => SlurmOptionsSchema.parse({ binDirectory: 'bin' })).toThrow();
    for (const time of ['60', '30:00', '2:00:00', '1-0', '1-12:30'])
      expect(SlurmOptionsSchema.parse({ timeLimit: time }).timeLimit).toBe(time);
  });
});
