/**
 * Item 5 of issue 9: daemons that share one engine and one namespace (two `gym eval run` at
 * once, each with its own state directory) must never destroy each other's live sandboxes, while
 * a crashed daemon's sandboxes are still reclaimed once its owner record proves it gone.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { buildSweMiniImages } from '../../cli/task-images.ts';
import { GymClient } from '../../client/client.ts';
import { silentLogger } from '../../core/logger.ts';
import { type OwnerRecord, procHostProcesses } from '../../daemon/owners.ts';
import { loadEnvironment, readRows } from '../../environments/environment.ts';
import { runEval } from '../../environments/runner/eval.ts';
import { readJsonl } from '../../environments/runner/files.ts';
import { gymFields } from '../../environments/runner/rollout-line.ts';
import { createOracleHarness } from '../../harnesses/oracle/oracle.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { dockerTestEnvironment, localImages, testImage } from '../docker-available.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';

async function containerIds(namespace: string): Promise<string[]> {
  const containers = await docker.listContainers({
    all: true,
    filters: { label: [`gym.namespace=${namespace}`] },
  });
  return containers.map((container) => container.Labels['gym.sandbox-id'] ?? '').sort();
}

/** A pid that certainly ran on this host and has exited. */
function deadPid(): number {
  const child = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))']);
  return Number(child.stdout.toString());
}

describe.skipIf(skipReason !== undefined)('daemons sharing one engine', () => {
  const daemons: TestDaemon[] = [];
  const directories: string[] = [];
  afterAll(async () => {
    for (const daemon of daemons) await daemon.stop({ destroy: true }).catch(() => {});
    for (const directory of directories) await rm(directory, { recursive: true, force: true });
  });

  async function ownersDirectory(): Promise<string> {
    const directory = await mkdtemp(join(tmpdir(), 'gym-owners-test-'));
    directories.push(directory);
    return directory;
  }

  it("keeps the other daemon's live sandboxes through every reconcile", async () => {
    const namespace = `share-${randomBytes(3).toString('hex')}`;
    const first = await startTestDaemon({ namespace });
    const second = await startTestDaemon({ namespace });
    daemons.push(first, second);
    const ofFirst = await first.manager.create({ image: busybox });
    const ofSecond = await second.manager.create({ image: busybox });
    for (let round = 0; round < 2; round += 1) {
      await first.manager.reconcile('docker');
      await second.manager.reconcile('docker');
    }
    expect(await containerIds(namespace)).toEqual([ofFirst.id, ofSecond.id].sort());
    expect(await first.manager.exec(ofFirst.id, { argv: ['true'] })).toMatchObject({ status: 'ok' });
    expect(await second.manager.exec(ofSecond.id, { argv: ['true'] })).toMatchObject({ status: 'ok' });
  }, 60_000);

  it("reclaims a crashed daemon's sandboxes only once its record shows a dead pid past the grace", async () => {
    const namespace = `crash-${randomBytes(3).toString('hex')}`;
    const directory = await ownersDirectory();
    const graceMs = 60_000;
    const crashed = await startTestDaemon({ namespace, owners: { directory, graceMs } });
    const survivor = await startTestDaemon({ namespace, owners: { directory, graceMs } });
    daemons.push(survivor);
    const orphan = await crashed.manager.create({ image: busybox });
    // A graceful stop keeps the sandbox and removes the record: what a kill -9 leaves is forged below.
    await crashed.stop({ destroy: false });
    expect(await containerIds(namespace)).toEqual([orphan.id]);

    // No record: the owner cannot be proven gone, so its sandbox waits for its hard deadline.
    await survivor.manager.reconcile('docker');
    expect(await containerIds(namespace)).toEqual([orphan.id]);

    const [bootId, pidNamespace] = await Promise.all([
      procHostProcesses.bootId(),
      procHostProcesses.pidNamespace(),
    ]);
    const forge = async (fields: Partial<OwnerRecord>) => {
      const record: OwnerRecord = {
        daemonId: crashed.daemonId,
        pid: deadPid(),
        processStartTime: '1',
        bootId: bootId ?? '',
        pidNamespace: pidNamespace ?? '',
        hostname: 'test',
        heartbeatAtMs: Date.now() - 2 * graceMs,
        ...fields,
      };
      await mkdir(directory, { recursive: true });
      await writeFile(join(directory, `${crashed.daemonId}.json`), JSON.stringify(record));
    };
    // Alive (this very process, same start time), heartbeat long past: kept.
    await forge({
      pid: process.pid,
      processStartTime: (await procHostProcesses.startTime(process.pid)) ?? '',
    });
    await survivor.manager.reconcile('docker');
    expect(await containerIds(namespace)).toEqual([orphan.id]);
    // Dead, but its last heartbeat is within the grace (it may be restarting): kept.
    await forge({ heartbeatAtMs: Date.now() - 1000 });
    await survivor.manager.reconcile('docker');
    expect(await containerIds(namespace)).toEqual([orphan.id]);
    // This pid reused by another process (another start time): the owner is gone; reclaimed.
    await forge({ pid: process.pid, processStartTime: 'not-this-one' });
    const summary = await survivor.manager.reconcile('docker');
    expect(summary.destroyed).toBe(1);
    expect(await containerIds(namespace)).toEqual([]);
  }, 60_000);

  it('runs two evaluations at once on one namespace with only fault-free rewards and no infra errors', async () => {
    await buildSweMiniImages(localImages(docker));
    const namespace = `evals-${randomBytes(3).toString('hex')}`;
    const environment = await loadEnvironment('swe-mini');
    const rows = (await readRows(environment.dataPath)).slice(0, 4);
    const outputDirectory = await mkdtemp(join(tmpdir(), 'gym-two-evals-'));
    directories.push(outputDirectory);
    const results = await Promise.all(
      ['first', 'second'].map(async (name) => {
        // Orphan scans every 300 ms: a daemon that took the other's sandboxes for orphans would hit them.
        const daemon = await startTestDaemon({ namespace, orphanScanIntervalMs: 300 }, { listen: true });
        daemons.push(daemon);
        const output = join(outputDirectory, `${name}.jsonl`);
        await runEval({
          client: new GymClient({ url: daemon.address.url!, token: daemon.token }),
          environment,
          rows,
          harness: createOracleHarness(),
          harnessName: 'oracle',
          modelName: 'none',
          numRepeats: 1,
          concurrency: 2,
          output,
          resume: false,
          maxInfraAttempts: 3,
          logger: silentLogger,
        });
        return {
          rollouts: await readJsonl(output),
          failures: await readJsonl(join(outputDirectory, `${name}_failures.jsonl`)),
        };
      }),
    );
    for (const { rollouts, failures } of results) {
      expect(rollouts.map((row) => [gymFields(row).outcome, row.reward])).toEqual(
        rows.map(() => ['reward', 1]),
      );
      expect(failures).toEqual([]);
    }
  }, 180_000);
});
