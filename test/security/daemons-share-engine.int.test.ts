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
import { systemClock } from '../../core/clock.ts';
import { silentLogger } from '../../core/logger.ts';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { ImageService } from '../../daemon/images.ts';
import { type OwnerRecord, procHostProcesses } from '../../daemon/owners.ts';
import { loadEnvironment, readRows } from '../../environments/environment.ts';
import { runEval } from '../../environments/runner/eval.ts';
import { readJsonl } from '../../environments/runner/files.ts';
import { gymFields } from '../../environments/runner/rollout-line.ts';
import { createOracleHarness } from '../../harnesses/oracle/oracle.ts';
import { BUILD_DEADLINE_LABEL } from '../../providers/docker/docker-images.ts';
import { DockerProvider } from '../../providers/docker/index.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { dockerTestEnvironment, localImages, testImage } from '../docker-available.ts';
import { testContext } from '../fixtures/provider-context.ts';

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
    const ofFirst = await first.manager.lifecycle.create({ image: busybox });
    const ofSecond = await second.manager.lifecycle.create({ image: busybox });
    for (let round = 0; round < 2; round += 1) {
      await first.manager.reconciler.reconcile('docker');
      await second.manager.reconciler.reconcile('docker');
    }
    expect(await containerIds(namespace)).toEqual([ofFirst.id, ofSecond.id].sort());
    expect(
      await first.manager.operations.exec(ofFirst.id, ExecRequestSchema.parse({ argv: ['true'] })),
    ).toMatchObject({ status: 'ok' });
    expect(
      await second.manager.operations.exec(ofSecond.id, ExecRequestSchema.parse({ argv: ['true'] })),
    ).toMatchObject({ status: 'ok' });
  }, 60_000);

  it('starts beside a peer that is creating sandboxes and touches none of them, whatever the start order, though their image was built long ago', async () => {
    // Seen: two `gym eval run` on swe-mini, the second started 4 s after the first: the first lost
    // verifier sandboxes as the second daemon started. A build commits its container's labels into
    // the image, so every sandbox of a task image carried the build's labels with a deadline long
    // past, and a starting daemon's sweep of leftover build containers removed them.
    // Built now, with the real clock: a build whose container's deadline had passed at its making
    // was any daemon's to sweep mid-build (CI saw another test file's daemon start kill its step,
    // 137). The image then gets the deadline an hour-old build left in it, through a commit.
    const builder = new ImageService({
      providers: new Map([['docker', new DockerProvider(docker, testContext())]]),
      defaultProvider: () => 'docker',
      logger: silentLogger,
    });
    const tag = randomBytes(4).toString('hex');
    const builtNow = `gym/share-engine-built-now:${tag}`;
    const image = `gym/share-engine-built-long-ago:${tag}`;
    await builder.prepare({
      kind: 'derived',
      reference: builtNow,
      base: busybox,
      workdir: '/work',
      files: { 'marker.txt': 'built an hour ago\n' },
      command: 'true',
      env: {},
    });
    const hourAgo = String(systemClock.now() - 3600_000);
    const built = await docker.getImage(builtNow).inspect();
    expect(built.Config.Labels?.[BUILD_DEADLINE_LABEL]).toMatch(/^\d+$/);
    const stamp = await docker.createContainer({
      Image: builtNow,
      Labels: { ...built.Config.Labels, [BUILD_DEADLINE_LABEL]: hourAgo },
    });
    await stamp.commit({ repo: image.split(':')[0], tag });
    await stamp.remove({ force: true });
    await docker.getImage(builtNow).remove({ force: true });
    expect((await docker.getImage(image).inspect()).Config.Labels?.[BUILD_DEADLINE_LABEL]).toBe(hourAgo);
    const namespace = `order-${randomBytes(3).toString('hex')}`;
    try {
      // Each daemon in turn is the one creating while the other starts (a restart on its state
      // directory is a start too).
      const first = await startTestDaemon({ namespace, orphanScanIntervalMs: 300 });
      daemons.push(first);
      const secondStateDir = await mkdtemp(join(tmpdir(), 'gym-share-second-'));
      directories.push(secondStateDir);
      const creating = (daemon: TestDaemon) =>
        Promise.all(Array.from({ length: 4 }, () => daemon.manager.lifecycle.create({ image })));
      const [ofFirst, second] = await Promise.all([
        creating(first),
        new Promise((resolve) => setTimeout(resolve, 200)).then(() =>
          startTestDaemon({ namespace, stateDir: secondStateDir, orphanScanIntervalMs: 300 }),
        ),
      ]);
      daemons.push(second);
      const [ofSecond, restartedFirst] = await Promise.all([
        creating(second),
        (async () => {
          await first.stop({ destroy: false });
          return startTestDaemon({ namespace, stateDir: first.stateDir, orphanScanIntervalMs: 300 });
        })(),
      ]);
      daemons.push(restartedFirst);
      // A few orphan scans of both.
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const everyId = [...ofFirst, ...ofSecond].map((sandbox) => sandbox.id).sort();
      expect(await containerIds(namespace)).toEqual(everyId);
      for (const sandbox of ofFirst)
        expect(
          await restartedFirst.manager.operations.exec(
            sandbox.id,
            ExecRequestSchema.parse({ argv: ['cat', '/work/marker.txt'] }),
          ),
        ).toMatchObject({
          status: 'ok',
          stdout: 'built an hour ago\n',
        });
      for (const sandbox of ofSecond)
        expect(
          await second.manager.operations.exec(sandbox.id, ExecRequestSchema.parse({ argv: ['true'] })),
        ).toMatchObject({ status: 'ok' });
    } finally {
      await docker
        .getImage(image)
        .remove({ force: true })
        .catch(() => {});
    }
  }, 120_000);

  it("reclaims a crashed daemon's sandboxes only once its record shows a dead pid past the grace", async () => {
    const namespace = `crash-${randomBytes(3).toString('hex')}`;
    const directory = await ownersDirectory();
    const graceMs = 60_000;
    const crashed = await startTestDaemon({ namespace, owners: { directory, graceMs } });
    const survivor = await startTestDaemon({ namespace, owners: { directory, graceMs } });
    daemons.push(survivor);
    const orphan = await crashed.manager.lifecycle.create({ image: busybox });
    // A graceful stop keeps the sandbox and removes the record: what a kill -9 leaves is forged below.
    await crashed.stop({ destroy: false });
    expect(await containerIds(namespace)).toEqual([orphan.id]);

    // No record: the owner cannot be proven gone, so its sandbox waits for its hard deadline.
    await survivor.manager.reconciler.reconcile('docker');
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
    await survivor.manager.reconciler.reconcile('docker');
    expect(await containerIds(namespace)).toEqual([orphan.id]);
    // Dead, but its last heartbeat is within the grace (it may be restarting): kept.
    await forge({ heartbeatAtMs: Date.now() - 1000 });
    await survivor.manager.reconciler.reconcile('docker');
    expect(await containerIds(namespace)).toEqual([orphan.id]);
    // This pid reused by another process (another start time): the owner is gone; reclaimed.
    await forge({ pid: process.pid, processStartTime: 'not-this-one' });
    const summary = await survivor.manager.reconciler.reconcile('docker');
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
