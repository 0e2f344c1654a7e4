/**
 * Slurm mode of the apptainer provider on the real one-node cluster: an allocation that is
 * cancelled under its sandboxes turns them `sandbox_gone` (and stops their instances on the
 * node), the next create holds a new allocation; an allocation without sandboxes is given back;
 * a restarted provider adopts the allocation and finds its sandboxes again.
 */
import { spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { type ApptainerOptions, ApptainerProvider } from '../../providers/apptainer/apptainer-provider.ts';
import { BUSYBOX_REFERENCE } from '../fixtures/busybox-root.ts';
import { testContext } from '../fixtures/provider-context.ts';
import { waitFor } from '../wait-for.ts';
import { computeNode } from './node.ts';
import {
  cancelJobsNamed,
  jobState,
  jobsNamed,
  requireSlurm,
  SLURM_NODE,
  SLURM_NODE_ADDRESS,
  SLURM_PARTITION,
} from './slurm.ts';

requireSlurm();
type Node = Awaited<ReturnType<typeof computeNode>>;
let node: Node;
const jobNames: string[] = [];
const providers: ApptainerProvider[] = [];
const exec = (command: string) => ExecRequestSchema.parse({ command });
const spec = () => SandboxSpecSchema.parse({ image: BUSYBOX_REFERENCE, labels: { test: 'slurm' } });

function provider(
  name: string,
  slurm: Partial<NonNullable<ApptainerOptions['slurm']>> = {},
  namespace = name,
) {
  const jobName = `gym-slurm-${name}-${process.pid}`;
  if (!jobNames.includes(jobName)) jobNames.push(jobName);
  const { name: _name, host: _host, ...nodeSettings } = node.host;
  const made = new ApptainerProvider(
    {
      slurm: {
        partition: SLURM_PARTITION,
        timeLimit: '10',
        jobName,
        pollIntervalMs: 200,
        idleReleaseMs: 60_000,
        node: nodeSettings,
        ...slurm,
      },
      keepaliveIntervalMs: 1000,
    },
    testContext({ namespace }),
  );
  providers.push(made);
  return made;
}

/** Our instances alive on the node, by the stand-in's own listing. */
function instancesOnNode(): string[] {
  const listed = spawnSync(node.host.apptainer, ['instance', 'list', '--json'], {
    env: { ...process.env, ...node.host.env },
    encoding: 'utf8',
  });
  return (JSON.parse(listed.stdout) as { instances: Array<{ instance: string }> }).instances.map(
    (entry) => entry.instance,
  );
}

beforeAll(async () => {
  node = await computeNode(SLURM_NODE_ADDRESS, 30000 + (process.pid % 1000));
});
afterAll(async () => {
  try {
    for (const made of providers) await made.close();
  } finally {
    cancelJobsNamed(...jobNames);
    await node?.cleanup();
  }
});

describe('apptainer in a Slurm allocation', () => {
  it('places sandboxes on the allocation’s node; a scancel makes them gone, and the next create holds a new allocation', async () => {
    const made = provider('cancel');
    const first = await made.create(spec());
    const second = await made.create(spec());
    const held = made.slurm!.allocation.current!;
    expect(held.nodes).toEqual([{ name: SLURM_NODE, address: SLURM_NODE_ADDRESS }]);
    expect(first.scope).toBe(SLURM_NODE);
    expect(jobsNamed(made.slurm!.allocation.jobName)).toEqual([held.jobId]);
    expect((await made.exec(first.id, exec('echo hi'))).stdout).toBe('hi\n');
    expect(instancesOnNode()).toHaveLength(2);
    const health = await made.health();
    expect(health.ok).toBe(true);

    spawnSync('scancel', [held.jobId]);
    await waitFor('the end noticed', () => made.slurm!.allocation.current === null, 10_000, 50);
    for (const info of [first, second]) {
      const result = await made.exec(info.id, exec('echo still here'));
      expect(result.status).toBe('sandbox_gone');
    }
    const listing = await made.list({ labels: { test: 'slurm' } });
    expect(listing.sandboxes).toEqual([]);
    expect(listing.unreachable).toEqual([]);
    // The next create at once: a new allocation, here on the same node, while the old one's
    // instances are being stopped (without pam_slurm_adopt they outlive the job). The new
    // sandbox, made after the end, is spared.
    const third = await made.create(spec());
    const next = made.slurm!.allocation.current!;
    expect(next.jobId).not.toBe(held.jobId);
    expect(jobState(next.jobId)).toBe('RUNNING');
    await made.slurm!.settled();
    expect(instancesOnNode()).toEqual([`gym-cancel-${third.id}`]);
    expect((await made.exec(third.id, exec('echo again'))).stdout).toBe('again\n');
    expect((await made.list({ labels: { test: 'slurm' } })).sandboxes.map((info) => info.id)).toEqual([
      third.id,
    ]);
    expect(made.slurm!.allocation.stats.submitted).toBe(2);
    await made.destroy(third.id);
  });

  it('gives an allocation without sandboxes back after idleReleaseMs, and holds a new one for the next create', async () => {
    const made = provider('idle', { idleReleaseMs: 1000 });
    const info = await made.create(spec());
    const held = made.slurm!.allocation.current!;
    // A sandbox on it: never idle.
    await new Promise((resolve) => setTimeout(resolve, 2000));
    expect(jobState(held.jobId)).toBe('RUNNING');
    await made.destroy(info.id);
    await waitFor('the idle release', () => made.slurm!.allocation.current === null, 10_000, 50);
    await waitFor('the job out of the queue', () => jobState(held.jobId) !== 'RUNNING', 10_000);
    expect(jobsNamed(made.slurm!.allocation.jobName)).toEqual([]);
    const again = await made.create(spec());
    expect(made.slurm!.allocation.current!.jobId).not.toBe(held.jobId);
    await made.destroy(again.id);
  });

  it('a provider that closes with no sandbox on its allocation gives it back', async () => {
    const made = provider('close');
    const info = await made.create(spec());
    const held = made.slurm!.allocation.current!;
    await made.destroy(info.id);
    await made.close();
    await waitFor('the job out of the queue', () => jobState(held.jobId) !== 'RUNNING', 10_000);
    expect(jobsNamed(made.slurm!.allocation.jobName)).toEqual([]);
  });

  it('a restarted provider adopts the allocation and finds its sandboxes there, without asking for another', async () => {
    const before = provider('restart');
    const info = await before.create(spec());
    const held = before.slurm!.allocation.current!;
    await before.close();
    const after = provider('restart');
    const listing = await after.list({ labels: { test: 'slurm' } });
    expect(listing.sandboxes.map((listed) => listed.id)).toEqual([info.id]);
    expect(after.slurm!.allocation.current?.jobId).toBe(held.jobId);
    expect((await after.exec(info.id, exec('echo adopted'))).stdout).toBe('adopted\n');
    expect(after.slurm!.allocation.stats).toMatchObject({ adopted: 1, submitted: 0 });
    await after.destroy(info.id);
  });
});
