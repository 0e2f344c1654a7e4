/**
 * The apptainer provider over three SSH hosts: placement by free capacity, a host that stops
 * answering (its sandboxes out of reach, new creates elsewhere), and a host whose key is not
 * the one known.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { rootfsTar } from '../../images/build.ts';
import { ApptainerProvider } from '../../providers/apptainer/apptainer-provider.ts';
import { BUSYBOX_REFERENCE } from '../fixtures/busybox-root.ts';
import { testContext } from '../fixtures/provider-context.ts';
import { computeNode } from './node.ts';

type Node = Awaited<ReturnType<typeof computeNode>>;
const nodes: Node[] = [];
let provider: ApptainerProvider;
const spec = () => SandboxSpecSchema.parse({ image: BUSYBOX_REFERENCE, labels: { test: 'hosts' } });

beforeAll(async () => {
  const base = 25000 + (process.pid % 1000);
  for (const [index, address] of ['127.0.0.5', '127.0.0.6', '127.0.0.7'].entries())
    nodes.push(await computeNode(address, base + index));
  provider = new ApptainerProvider(
    {
      hosts: nodes.map((node) => ({ ...node.host, maxSandboxes: 2 })),
      keepaliveIntervalMs: 300,
      keepaliveCountMax: 2,
    },
    testContext(),
  );
}, 120_000);

afterAll(async () => {
  try {
    for (const node of nodes) node.sshd.thaw();
    const { sandboxes } = await provider.list();
    await Promise.all(sandboxes.map((info) => provider.destroy(info.id).catch(() => {})));
    await provider.close();
  } finally {
    // Whatever failed above, no sshd, keeper or mount of this test outlives it.
    for (const node of nodes) await node.cleanup();
  }
});

describe('apptainer over several ssh hosts', () => {
  it('spreads sandboxes by free capacity, and moves on when a host stops answering', async () => {
    const first = [];
    for (let index = 0; index < 3; index += 1) first.push(await provider.create(spec()));
    expect(new Set(first.map((info) => info.scope)).size).toBe(3);

    const down = nodes[0]!;
    const onDown = first.find((info) => info.scope === down.host.name)!;
    await down.sshd.stop();
    const listed = await provider.list({ labels: { test: 'hosts' } });
    expect(listed.unreachable.map((part) => part.scope)).toEqual([down.host.name]);
    expect(listed.sandboxes.map((info) => info.scope).sort()).toEqual(
      [nodes[1]!.host.name, nodes[2]!.host.name].sort(),
    );
    const result = await provider.exec(onDown.id, ExecRequestSchema.parse({ argv: ['true'] }));
    expect(result.status).toBe('sandbox_gone');

    // Two hosts left with one free slot each: the next two creates take them; a third is refused.
    const more = [await provider.create(spec()), await provider.create(spec())];
    expect(more.map((info) => info.scope).sort()).toEqual([nodes[1]!.host.name, nodes[2]!.host.name].sort());
    await expect(provider.create(spec())).rejects.toMatchObject({ code: 'CAPACITY_EXCEEDED' });

    await down.sshd.start();
  }, 240_000);

  it('copies an image to each host once, and to a host that was down at its first create there', async () => {
    const root = join(nodes[0]!.workDirectory, 'images', 'local_busybox_rootfs');
    const prepare = () =>
      provider.prepareImage({
        format: 'rootfs',
        reference: 'gym/hosts-test:0123456789ab',
        rootfs: rootfsTar(root),
        config: {
          env: { FROM_IMAGE: 'yes' },
          workdir: '/tmp',
          labels: { 'gym.image-definition': 'hosts-test' },
        },
      });
    // The host stopped in the case before answers again once its connection's backoff has passed.
    for (let attempt = 0; attempt < 60 && (await provider.list()).unreachable.length > 0; attempt += 1)
      await new Promise((resolve) => setTimeout(resolve, 500));
    const down = nodes[2]!;
    await down.sshd.stop();
    try {
      await prepare();
      expect(provider.imageCopies).toBe(2);
      // Prepared again (a second eval run, say): nothing is copied.
      await prepare();
      expect(provider.imageCopies).toBe(2);
    } finally {
      await down.sshd.start();
    }
    for (let attempt = 0; attempt < 60 && (await provider.list()).unreachable.length > 0; attempt += 1)
      await new Promise((resolve) => setTimeout(resolve, 500));
    const { sandboxes } = await provider.list();
    await Promise.all(sandboxes.map((info) => provider.destroy(info.id)));
    // Three creates on three empty hosts: one lands on the host that was down, which gets the image then.
    const placed = [];
    for (let index = 0; index < 3; index += 1)
      placed.push(await provider.create(SandboxSpecSchema.parse({ image: 'gym/hosts-test:0123456789ab' })));
    expect(placed.filter((info) => info.scope === down.host.name)).toHaveLength(1);
    expect(provider.imageCopies).toBe(3);
    const seen = await provider.exec(
      placed[0]!.id,
      ExecRequestSchema.parse({ command: 'echo $FROM_IMAGE; pwd' }),
    );
    expect(seen.stdout).toBe('yes\n/tmp\n');
    await Promise.all(placed.map((info) => provider.destroy(info.id)));
  }, 240_000);

  it('names a host whose key is not the known one as unreachable, and never uses it', async () => {
    const node = nodes[1]!;
    const wrong = join(node.workDirectory, 'known_hosts.other');
    await writeFile(wrong, `[${node.host.host}]:${node.host.port} ${nodes[2]!.sshd.hostPublicKey}\n`);
    const suspicious = new ApptainerProvider(
      { hosts: [{ ...node.host, knownHostsPath: wrong }] },
      testContext(),
    );
    try {
      const listed = await suspicious.list();
      expect(listed.sandboxes).toEqual([]);
      expect(listed.unreachable[0]?.reason).toMatch(/host key does not match/);
      await expect(suspicious.create(spec())).rejects.toMatchObject({ code: 'PROVIDER_UNAVAILABLE' });
    } finally {
      await suspicious.close();
    }
  });

  it('takes a new host set: a host that leaves takes its sandboxes out of reach, one that joins takes creates', async () => {
    const hosts = nodes.map((node) => ({ ...node.host, maxSandboxes: 2 }));
    const placed = [];
    for (let index = 0; index < 3; index += 1) placed.push(await provider.create(spec()));
    const leaving = placed.find((info) => info.scope === nodes[0]!.host.name)!;
    provider.setHosts(hosts.slice(1));
    const listed = await provider.list({ labels: { test: 'hosts' } });
    expect(listed.unreachable).toEqual([]);
    expect(listed.sandboxes.map((info) => info.id).sort()).toEqual(
      placed
        .filter((info) => info !== leaving)
        .map((info) => info.id)
        .sort(),
    );
    expect((await provider.exec(leaving.id, ExecRequestSchema.parse({ argv: ['true'] }))).status).toBe(
      'sandbox_gone',
    );
    await expect(provider.get(leaving.id)).rejects.toMatchObject({ code: 'SANDBOX_NOT_FOUND' });
    // Both hosts left have one free slot: creates go there, never to the host that left.
    const more = [await provider.create(spec()), await provider.create(spec())];
    expect(more.map((info) => info.scope).sort()).toEqual([nodes[1]!.host.name, nodes[2]!.host.name].sort());
    // Back in the set, the host's sandbox (still running there) is listed and reached again.
    provider.setHosts(hosts);
    expect((await provider.get(leaving.id)).scope).toBe(nodes[0]!.host.name);
    expect((await provider.exec(leaving.id, ExecRequestSchema.parse({ argv: ['true'] }))).status).toBe('ok');
    await Promise.all([...placed, ...more].map((info) => provider.destroy(info.id)));
  }, 120_000);
});
