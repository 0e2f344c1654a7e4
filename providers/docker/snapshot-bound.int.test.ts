/**
 * Issue 36, item 4: a Docker snapshot's size bound holds against the host's disk whatever the
 * agent does while the snapshot is taken. The bound was read from the engine before the commit
 * paused the container: an agent swapping a small file for a large sparse one in a loop had the
 * engine write the file's full apparent size into its image store (1 commit in 5 here, about half
 * in the runs); the daemon's check of the image came only after that. Real Docker, a
 * busybox sandbox.
 */
import { afterAll, describe, expect, it } from 'vitest';
import type { GymError } from '../../core/errors.ts';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import { dockerTestEnvironment, testImage } from '../../test/docker-available.ts';
import { testContext } from '../../test/fixtures/provider-context.ts';
import { DockerProvider } from './docker-provider.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';

/** The bound, and what the agent swaps in: far past it, and nothing on the disk while sparse. */
const MAX_BYTES = 8 * 1024 * 1024;
const SWAPPED_BYTES = 256 * 1024 * 1024;
/**
 * Measured before the fix, 12 attempts a run: 4 and then 1 of the 12 commits wrote the swapped
 * file (about 1 in 5). 24 attempts all keeping the bound by chance would be about 1 in 200.
 */
const ATTEMPTS = 24;

describe.skipIf(skipReason !== undefined)("a docker snapshot's size bound", () => {
  const context = testContext();
  const provider = new DockerProvider(docker, context);
  const created: string[] = [];
  const run = (id: string, command: string, timeoutMs = 30_000) =>
    provider.exec(id, parseOrThrow(ExecRequestSchema, { command, timeoutMs }, 'exec'));

  afterAll(async () => {
    await Promise.all(created.map((id) => provider.destroy(id).catch(() => {})));
    await provider.close();
  });

  it('holds against an agent that swaps a large sparse file in and out during the snapshot', async () => {
    const info = await provider.create(parseOrThrow(SandboxSpecSchema, { image: busybox }, 'spec'));
    created.push(info.id);
    // The agent: the file is there, then gone, then there again, as fast as it can.
    const swapping = run(
      info.id,
      `while :; do rm -f /tmp/swap; truncate -s ${SWAPPED_BYTES} /tmp/swap; done`,
      600_000,
    ).catch(() => undefined);
    // Started: the file has been seen (a large image of it is what the bound must prevent).
    let seen = '';
    for (let tries = 0; tries < 200 && !seen.includes(String(SWAPPED_BYTES)); tries++) {
      seen = (await run(info.id, 'ls -l /tmp/swap 2>/dev/null; true')).stdout;
    }
    expect(seen).toContain(String(SWAPPED_BYTES));
    const outcomes: Array<number | 'refused'> = [];
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      const managedId = `snp_bound${String(attempt).padStart(11, '0')}`;
      try {
        const made = await provider.snapshot(info.id, { image: '', managedId, maxBytes: MAX_BYTES });
        outcomes.push(made.sizeBytes ?? -1);
        await provider.deleteSnapshot(made.image);
      } catch (error) {
        expect((error as GymError).code, String(error)).toBe('SNAPSHOT_TOO_LARGE');
        outcomes.push('refused');
      }
    }
    console.info(
      `outcomes of ${ATTEMPTS} snapshots (image bytes, or refused before the commit): ${JSON.stringify(outcomes)}`,
    );
    // Every commit the engine made is within the bound: none wrote the swapped file.
    const committed = outcomes.filter((outcome): outcome is number => outcome !== 'refused');
    for (const size of committed) {
      expect(size, JSON.stringify(outcomes)).toBeGreaterThanOrEqual(0);
      expect(size, JSON.stringify(outcomes)).toBeLessThanOrEqual(MAX_BYTES);
    }
    // The sandbox runs on after each of them, the agent's loop too (a paused container runs nothing).
    const state = (await docker.getContainer(provider.containerName(info.id)).inspect()).State;
    expect(state.Paused).toBe(false);
    expect(
      (await run(info.id, 'pgrep -f truncate >/dev/null || pgrep -f "rm -f" >/dev/null; echo on')).stdout,
    ).toBe('on\n');
    await provider.destroy(info.id);
    await swapping;
  }, 300_000);

  it('lets run again, at the next start, a sandbox a killed daemon left paused during a commit', async () => {
    const info = await provider.create(parseOrThrow(SandboxSpecSchema, { image: busybox }, 'spec'));
    created.push(info.id);
    const container = docker.getContainer(provider.containerName(info.id));
    // What a daemon killed between its pause and its unpause leaves.
    await container.pause();
    const next = new DockerProvider(docker, context);
    try {
      await next.resumeInterruptedSnapshots();
      expect((await container.inspect()).State.Paused).toBe(false);
      expect((await run(info.id, 'echo running')).stdout).toBe('running\n');
    } finally {
      await next.close();
    }
  }, 120_000);
});
