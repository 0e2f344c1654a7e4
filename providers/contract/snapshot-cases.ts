/**
 * Snapshot cases: the provider-neutral archive of `shared/archive-snapshot.ts` (every provider
 * has exec and the archive operations, so every provider runs these), and the backend's own
 * snapshot where the provider declares it. One parent, two children, small files: the suites
 * over SSH are slow.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  type ArchiveSnapshotManifest,
  captureArchiveSnapshot,
  removeArchiveSnapshot,
  replayArchiveSnapshot,
} from '../shared/archive-snapshot.ts';
import { expectGymError, type SandboxFixture } from './fixture.ts';

/** The parent's setup: created, modified and removed paths, links of both kinds, modes. */
const SETUP = `set -e
mkdir -p /srv/snap/dir
printf one > /srv/snap/dir/a.txt
printf '#!/bin/sh\\necho run\\n' > /srv/snap/run.sh
chmod 0751 /srv/snap/run.sh
mkdir -m 0700 /srv/snap/private
printf secret > /srv/snap/private/inner
ln -s /srv/snap/dir/a.txt /srv/snap/absolute-link
ln -s dir/a.txt /srv/snap/relative-link
ln /srv/snap/dir/a.txt /srv/snap/hard
seq 1 4000 > /srv/snap/numbers
echo 'snapuser:x:4242:4242::/:/bin/sh' >> /etc/passwd
rm /etc/group
`;

/** What the cases compare: kinds, modes, link targets, contents, the removed path's absence. */
const PROBE = `
for p in /srv/snap /srv/snap/dir /srv/snap/dir/a.txt /srv/snap/run.sh /srv/snap/private \\
  /srv/snap/private/inner /srv/snap/absolute-link /srv/snap/relative-link /srv/snap/hard /srv/snap/numbers; do
  if [ -L "$p" ]; then echo "$p link $(readlink "$p")"; else echo "$p $(stat -c '%a %h' "$p" 2>&1)"; fi
done
[ "$(stat -c %i /srv/snap/hard)" = "$(stat -c %i /srv/snap/dir/a.txt)" ] && echo hard-link-kept
cat /srv/snap/dir/a.txt /srv/snap/private/inner; echo
/srv/snap/run.sh
cat /srv/snap/relative-link /srv/snap/absolute-link; echo
tail -n 1 /srv/snap/numbers
grep snapuser /etc/passwd
ls /srv/snap
[ -e /etc/group ] && echo group-present || echo group-removed
`;

export function defineSnapshotCases(fixture: SandboxFixture, timeoutMs: number): void {
  let parentId = '';
  let createdAtMs = 0;
  let atCapture = '';
  let directory = '';
  let manifest: ArchiveSnapshotManifest | null = null;
  const probe = async (id: string) => {
    const result = await fixture.exec(id, { command: PROBE });
    expect(result.status).toBe('ok');
    return result.stdout;
  };

  beforeAll(async () => {
    directory = await mkdtemp(join(tmpdir(), 'gym-contract-snapshot-'));
    const parent = await fixture.create();
    parentId = parent.id;
    createdAtMs = Date.parse(parent.createdAt);
    const setup = await fixture.exec(parentId, { command: SETUP });
    expect(setup, setup.stderr).toMatchObject({ status: 'ok', exitCode: 0 });
    atCapture = await probe(parentId);
  }, timeoutMs);
  afterAll(async () => {
    if (manifest !== null) await removeArchiveSnapshot(manifest);
    await rm(directory, { recursive: true, force: true });
    await fixture.cleanup();
  }, timeoutMs);

  it('archive: two children replayed from it equal the parent at capture, and stay apart', async () => {
    const { provider } = fixture;
    // What the probe itself must show, so equality below means something.
    expect(atCapture).toContain('/srv/snap/run.sh 751 1');
    expect(atCapture).toContain('/srv/snap/private 700');
    expect(atCapture).toContain('/srv/snap/absolute-link link /srv/snap/dir/a.txt');
    expect(atCapture).toContain('hard-link-kept');
    expect(atCapture).toContain('group-removed');
    manifest = await captureArchiveSnapshot(provider, parentId, {
      file: join(directory, 'parent.tar'),
      maxBytes: 64 * 1024 * 1024,
      createdAtMs,
    });
    expect(manifest.sizeBytes).toBeGreaterThan(0);
    // The parent goes on after the capture: none of it reaches the children.
    await fixture.exec(parentId, {
      command: 'printf later > /srv/snap/dir/a.txt; touch /srv/snap/parent-after',
    });
    const [first, second] = await Promise.all([fixture.create(), fixture.create()]);
    await Promise.all([
      replayArchiveSnapshot(provider, first!.id, manifest),
      replayArchiveSnapshot(provider, second!.id, manifest),
    ]);
    expect(await probe(first!.id)).toBe(atCapture);
    expect(await probe(second!.id)).toBe(atCapture);
    // A write in one child is seen neither in its sibling nor in the parent.
    const write = await fixture.exec(first!.id, {
      command: 'printf mine > /srv/snap/dir/a.txt; touch /srv/snap/first-only; echo g:x:1: > /etc/group',
    });
    expect(write.exitCode, write.stderr).toBe(0);
    expect(await probe(second!.id)).toBe(atCapture);
    const parentNow = await probe(parentId);
    expect(parentNow).not.toContain('mine');
    expect(parentNow).not.toContain('first-only');
    expect(parentNow).toContain('group-removed');
  });

  it('archive: past maxBytes the capture fails and leaves no file', async () => {
    const file = join(directory, 'too-large.tar');
    await expectGymError(
      captureArchiveSnapshot(fixture.provider, parentId, { file, maxBytes: 4096, createdAtMs }),
      'SNAPSHOT_TOO_LARGE',
    );
    expect(existsSync(file)).toBe(false);
    expect(existsSync(`${file}.paths`)).toBe(false);
  });

  // Not registered when the author declares no snapshot: a skipped case fails a strict CI.
  if (fixture.options.capabilities?.snapshot !== false)
    it('native: a managed snapshot gives an equal child, carries no spec env, and is removed', async (context) => {
      const { provider } = fixture;
      if (!provider.capabilities.snapshot || provider.snapshot === undefined) return context.skip();
      const source = await fixture.create({ env: { CONTRACT_SECRET: 'from-the-parent' } });
      await fixture.exec(source.id, { command: SETUP });
      const expected = await probe(source.id);
      const managedId = `snp_${fixture.runId.padEnd(16, '0').slice(0, 16)}`;
      const { image, sizeBytes } = await provider.snapshot(source.id, {
        image: '',
        managedId,
        labels: { 'snapshot-id': managedId },
      });
      try {
        expect(sizeBytes).toBeGreaterThan(0);
        const child = await fixture.create({ image });
        expect(await probe(child.id)).toBe(expected);
        const env = await fixture.exec(child.id, { command: 'echo "[${CONTRACT_SECRET:-}]"' });
        expect(env.stdout).toBe('[]\n');
        if (provider.deleteSnapshot !== undefined) {
          // Only a snapshot is removed: never the image the sandboxes started from.
          await expectGymError(provider.deleteSnapshot(fixture.options.image), 'FORBIDDEN_BY_CONFIG');
          await fixture.cleanup();
          await provider.deleteSnapshot(image);
          await provider.deleteSnapshot(image);
          await expectGymError(fixture.create({ image }), 'IMAGE_NOT_FOUND');
        }
      } finally {
        await fixture.cleanup();
        await fixture.options.removeImage?.(image).catch(() => {});
      }
    });

  const declared = fixture.options.capabilities;
  if (declared?.snapshot !== false && declared?.liveFork !== true)
    it('live: refused with CAPABILITY_UNSUPPORTED where liveFork is not declared, the source untouched', async () => {
      const { provider } = fixture;
      expect(provider.capabilities.liveFork ?? false).toBe(false);
      const source = await fixture.create();
      await fixture.exec(source.id, { command: 'echo kept > /srv-live-mark' });
      const managedId = `snp_${`${fixture.runId}l`.padEnd(16, '0').slice(0, 16)}`;
      await expectGymError(
        provider.snapshot!(source.id, { image: '', managedId, live: true }),
        'CAPABILITY_UNSUPPORTED',
      );
      expect((await fixture.exec(source.id, { command: 'cat /srv-live-mark' })).stdout).toBe('kept\n');
      await fixture.cleanup();
    });

  // Where declared: memory and processes carried over (a counter whose value lives only in its
  // shell's memory goes on from it, not from 1), the source's own process carrying on.
  if (declared?.liveFork === true)
    it('live: a child restored from a live snapshot runs the source process on from its memory', async () => {
      const { provider } = fixture;
      expect(provider.capabilities.liveFork).toBe(true);
      const count = async (id: string) => {
        const result = await fixture.exec(id, { command: 'cat /live-count' });
        expect(result.status).toBe('ok');
        return Number(result.stdout.trim());
      };
      const source = await fixture.create();
      await fixture.exec(source.id, {
        command:
          "sh -c 'i=0; while :; do i=$((i+1)); echo $i > /live-count.new && mv /live-count.new /live-count; sleep 0.05; done' >/dev/null 2>&1 </dev/null &",
      });
      const reached = async (id: string, atLeast: number) => {
        const until = Date.now() + 20_000;
        while ((await count(id)) < atLeast) {
          if (Date.now() > until) throw new Error(`sandbox ${id} counted no further than ${atLeast}`);
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
      };
      await reached(source.id, 10);
      const managedId = `snp_${`${fixture.runId}v`.padEnd(16, '0').slice(0, 16)}`;
      const made = await provider.snapshot!(source.id, { image: '', managedId, live: true });
      try {
        expect(typeof made.checkpoint).toBe('string');
        const child = await fixture.create({ image: made.image }, { restore: made.checkpoint! });
        const first = await count(child.id);
        expect(first).toBeGreaterThanOrEqual(10);
        await reached(child.id, first + 3);
        await reached(source.id, (await count(source.id)) + 3);
        await fixture.exec(child.id, { command: 'echo child > /live-mine' });
        expect((await fixture.exec(source.id, { command: 'cat /live-mine' })).exitCode).not.toBe(0);
      } finally {
        await fixture.cleanup();
        await provider.deleteSnapshot?.(made.image);
        await fixture.options.removeImage?.(made.image).catch(() => {});
      }
    });
}
