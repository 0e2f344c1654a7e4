/**
 * `--fork-setup` end to end on real Docker, through the daemon's fork route: terminal tasks whose
 * setup command writes the files their tests read (and a few MiB more, and takes a couple of
 * seconds, as an install would), three repeats each, the oracle on two tasks and a do-nothing
 * solution on the other two, so rewards differ across tasks. The rewards must be those of the
 * same run without it, every line must name its group's snapshot, and nothing may be left behind.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { silentLogger } from '../../core/logger.ts';
import { HarnessRegistry } from '../../harnesses/registry.ts';
import { startTestDaemon } from '../../test/daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../../test/docker-available.ts';
import { loadEnvironment, readRows } from '../environment.ts';
import { runEval } from './eval.ts';
import { readJsonl } from './files.ts';
import { gymFields } from './rollout-line.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const REPEATS = 3;
const SOLVED = new Set(['count-errors', 'json-extract']);
const TASKS = ['count-errors', 'csv-total', 'json-extract', 'dedupe-lines'];

/** Wall time of each task's rollouts, first start to last end (ms), from their lines. */
function groupWallMs(rollouts: Array<Record<string, unknown>>): Record<string, number> {
  const spans = new Map<string, { start: number; end: number }>();
  for (const row of rollouts) {
    const start = Number((row.response as { created_at: number }).created_at) * 1000;
    const end = start + Number((gymFields(row).timings as { totalMs: number }).totalMs);
    const span = spans.get(String(row.id)) ?? { start, end };
    spans.set(String(row.id), { start: Math.min(span.start, start), end: Math.max(span.end, end) });
  }
  return Object.fromEntries([...spans].map(([task, span]) => [task, Math.round(span.end - span.start)]));
}

describe.skipIf(skipReason !== undefined)('gym eval --fork-setup against real Docker', () => {
  let outputDir = '';
  beforeAll(async () => {
    outputDir = await mkdtemp(join(tmpdir(), 'gym-fork-eval-'));
    await testImage(docker, 'debian-base');
  }, 300_000);
  afterAll(async () => {
    await rm(outputDir, { recursive: true, force: true });
  });

  it('gives the rewards of the same run without it, each group forked from one setup, leaving nothing', async () => {
    const namespace = `forkeval-${randomBytes(3).toString('hex')}`;
    const daemon = await startTestDaemon({ namespace }, { listen: true });
    try {
      const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
      const environment = await loadEnvironment('terminal');
      const rows = (await readRows(environment.dataPath))
        .filter((row) => TASKS.includes(String(row.id)))
        .map(
          (row): Record<string, unknown> => ({
            ...row,
            // What the tests read, plus 4 MiB and two seconds of "install" the children skip.
            setup: `${row.setup} && head -c 4194304 /dev/urandom > /var/tmp/setup-blob && sleep 2`,
            ...(SOLVED.has(String(row.id)) ? {} : { solution: 'true' }),
          }),
        );
      const run = async (name: string, forkSetup: boolean) => {
        const output = join(outputDir, `${name}.jsonl`);
        const summary = await runEval({
          client,
          environment,
          rows,
          harness: await new HarnessRegistry().create('oracle'),
          harnessName: 'oracle',
          modelName: 'none',
          numRepeats: REPEATS,
          concurrency: REPEATS,
          output,
          resume: false,
          maxInfraAttempts: 2,
          forkSetup,
          logger: silentLogger,
        });
        return { summary, rollouts: await readJsonl(output) };
      };
      const without = await run('without', false);
      const withFork = await run('with', true);
      const rewards = (rollouts: Array<Record<string, unknown>>) =>
        rollouts.map((row) => [row.id, row._ng_rollout_index, row.reward]);
      expect(rewards(without.rollouts)).toEqual(
        rows.flatMap((row) =>
          Array.from({ length: REPEATS }, (_, repeat) => [
            row.id,
            repeat,
            SOLVED.has(String(row.id)) ? 1 : 0,
          ]),
        ),
      );
      expect(rewards(withFork.rollouts)).toEqual(rewards(without.rollouts));
      // One snapshot per task, its children in fork order, each line saying so.
      const snapshotsOf = new Map<string, Set<string>>();
      for (const row of withFork.rollouts) {
        const sandbox = gymFields(row).sandbox as {
          fork_setup: boolean;
          from: string;
          lineage: { snapshot: string; fork_index: number | null; parent: string };
        };
        expect(sandbox).toMatchObject({ fork_setup: true, from: 'fork' });
        snapshotsOf.set(
          String(row.id),
          (snapshotsOf.get(String(row.id)) ?? new Set()).add(sandbox.lineage.snapshot),
        );
      }
      expect([...snapshotsOf.values()].map((ids) => ids.size)).toEqual(TASKS.map(() => 1));
      expect(new Set([...snapshotsOf.values()].flatMap((ids) => [...ids])).size).toBe(TASKS.length);
      expect(await client.listSnapshots()).toEqual([]);
      expect((await client.listSandboxes()).length).toBe(0);
      // For the note: the wall time of each group, and of the whole run, each way.
      const group = (id: string) =>
        gymFields(withFork.rollouts.find((row) => row.id === id)!).sandbox as Record<string, unknown>;
      console.log(
        JSON.stringify({
          setupAndForkMsPerGroup: Object.fromEntries(
            TASKS.map((id) => [id, [group(id).setup_ms, group(id).fork_ms, group(id).snapshot_method]]),
          ),
          forkSetupWallMsPerGroup: groupWallMs(withFork.rollouts),
          withoutWallMsPerGroup: groupWallMs(without.rollouts),
          forkSetupRunMs: withFork.summary.durationMs,
          withoutRunMs: without.summary.durationMs,
        }),
      );
    } finally {
      await daemon.stop({ destroy: true });
    }
    const left = await docker.listContainers({
      all: true,
      filters: { label: [`gym.namespace=${namespace}`] },
    });
    expect(left).toEqual([]);
    // Nor a snapshot's image (Docker's managed snapshots are gym-snapshot/<namespace>:<id>).
    const images = await docker.listImages({ filters: { reference: [`gym-snapshot/${namespace}:*`] } });
    expect(images.map((image) => image.RepoTags)).toEqual([]);
  }, 400_000);
});
