/**
 * Slurm mode of the enroot provider on the real one-node cluster: an allocation cancelled under
 * its sandboxes turns them `sandbox_gone` and their containers are removed from the node; the
 * next create holds a new allocation.
 */
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { EnrootProvider } from '../../providers/enroot/enroot-provider.ts';
import { BUSYBOX_REFERENCE } from '../fixtures/busybox-root.ts';
import { testContext } from '../fixtures/provider-context.ts';
import { waitFor } from '../wait-for.ts';
import { enrootNode } from './enroot-node.ts';
import {
  cancelJobsNamed,
  jobState,
  requireSlurm,
  SLURM_NODE,
  SLURM_NODE_ADDRESS,
  SLURM_PARTITION,
} from './slurm.ts';

requireSlurm();
const jobName = `gym-slurm-enroot-${process.pid}`;
let node: Awaited<ReturnType<typeof enrootNode>>;
let stateDirectory: string;
let provider: EnrootProvider;
const exec = (command: string) => ExecRequestSchema.parse({ command });
const spec = () => SandboxSpecSchema.parse({ image: BUSYBOX_REFERENCE, labels: { test: 'enroot-slurm' } });
/** The node's enroot containers, by the stand-in's own listing. */
const containers = () =>
  node
    .enroot('list')
    .stdout.split('\n')
    .filter((line) => line.trim() !== '');

beforeAll(async () => {
  node = await enrootNode(SLURM_NODE_ADDRESS, 32000 + (process.pid % 1000));
  stateDirectory = await mkdtemp(join(tmpdir(), 'gym-enroot-slurm-'));
  const { name: _name, host: _host, ...nodeSettings } = node.host;
  provider = new EnrootProvider(
    {
      slurm: {
        partition: SLURM_PARTITION,
        timeLimit: '10',
        jobName,
        pollIntervalMs: 200,
        node: nodeSettings,
      },
      keepaliveIntervalMs: 1000,
    },
    testContext({ namespace: 'enrootslurm', stateDirectory }),
  );
});
afterAll(async () => {
  try {
    await provider?.close();
  } finally {
    cancelJobsNamed(jobName);
    await node?.cleanup();
    await rm(stateDirectory, { recursive: true, force: true });
  }
});

describe('enroot in a Slurm allocation', () => {
  it('a scancel makes its sandboxes gone and removes their containers; the next create holds a new allocation', async () => {
    const first = await provider.create(spec());
    const held = provider.slurm!.allocation.current!;
    expect(first.scope).toBe(SLURM_NODE);
    expect((await provider.exec(first.id, exec('echo hi'))).stdout).toBe('hi\n');
    expect(containers()).toEqual([`gym-enrootslurm-${first.id}`]);

    spawnSync('scancel', [held.jobId]);
    await waitFor('the end noticed', () => provider.slurm!.allocation.current === null, 10_000, 50);
    expect((await provider.exec(first.id, exec('echo still here'))).status).toBe('sandbox_gone');
    expect((await provider.list({ labels: { test: 'enroot-slurm' } })).sandboxes).toEqual([]);
    await provider.slurm!.settled();
    expect(containers()).toEqual([]);

    const second = await provider.create(spec());
    const next = provider.slurm!.allocation.current!;
    expect(next.jobId).not.toBe(held.jobId);
    expect(jobState(next.jobId)).toBe('RUNNING');
    expect((await provider.exec(second.id, exec('echo again'))).stdout).toBe('again\n');
    await provider.destroy(second.id);
    expect(containers()).toEqual([]);
  });
});
