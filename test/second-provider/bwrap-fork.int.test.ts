/**
 * Fork end to end through the daemon on the second provider (bubblewrap, no Docker, no native
 * snapshot): the daemon takes the archive path of `providers/shared/archive-snapshot.ts`, and the
 * children equal the parent at fork time, keep its removals, its links and modes, and stay apart.
 */
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { BUSYBOX_REFERENCE, makeBusyboxRoot } from '../fixtures/busybox-root.ts';
import { BwrapProvider } from '../fixtures/bwrap-provider.ts';
import { waitFor } from '../wait-for.ts';

const directory = await mkdtemp(join(tmpdir(), 'gym-bwrap-fork-'));
const imageDirectory = join(directory, 'images');
await makeBusyboxRoot(imageDirectory);

describe('fork on bwrap through the daemon (archive snapshots)', () => {
  let daemon: TestDaemon | undefined;
  afterAll(async () => {
    await daemon?.stop({ destroy: true });
    await rm(directory, { recursive: true, force: true });
  });

  it('gives children equal to the parent at fork time, removals kept, independent, the archive reaped', async () => {
    daemon = await startTestDaemon(
      {
        namespace: 'bwrap-fork',
        stateDir: join(directory, 'state'),
        reaperIntervalMs: 200,
        providers: [{ name: 'bwrap', options: { imageDirectory } }],
      },
      {
        factories: { bwrap: (options, context) => new BwrapProvider(options as never, context) },
        listen: true,
      },
    );
    const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
    const parent = await client.createSandbox({ image: BUSYBOX_REFERENCE });
    const shell = async (id: string, command: string) => (await client.exec(id, { command })).stdout.trim();
    await shell(
      parent.id,
      'mkdir -p /work && echo v1 > /work/state && chmod 0640 /work/state && ln -s /work/state /work/link && rm /etc/group',
    );
    const probe =
      'cat /work/link; stat -c %a /work/state; test -e /etc/group && echo group-back || echo group-gone';
    const expected = await shell(parent.id, probe);
    expect(expected).toBe('v1\n640\ngroup-gone');
    const started = Date.now();
    const forked = await client.fork(parent.id, { count: 2, snapshotTtlSeconds: 1 });
    const forkMs = Date.now() - started;
    expect(forked.snapshot).toMatchObject({ method: 'archive', provider: 'bwrap', sandboxId: parent.id });
    console.log(`bwrap fork of 2 children through the daemon: ${forkMs} ms (under load)`);
    const file = join(daemon.stateDir, 'snapshots', `${forked.snapshot.id}.tar`);
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    for (const [forkIndex, child] of forked.sandboxes.entries()) {
      expect((await client.getSandbox(child.id)).lineage).toEqual({
        parent: parent.id,
        snapshot: forked.snapshot.id,
        forkIndex,
      });
      expect(await shell(child.id, probe)).toBe(expected);
    }
    await shell(forked.sandboxes[0]!.id, 'echo c0 > /work/state');
    await shell(parent.id, 'echo p2 > /work/state');
    expect(await shell(forked.sandboxes[1]!.id, 'cat /work/state')).toBe('v1');
    expect(await shell(forked.sandboxes[0]!.id, 'cat /work/state')).toBe('c0');
    await Promise.all(forked.sandboxes.map((child) => client.destroySandbox(child.id)));
    await waitFor(
      'the archive snapshot to be reaped',
      async () => (await client.listSnapshots()).length === 0,
    );
    await expect(stat(file)).rejects.toThrow();
  }, 120_000);
});
