/**
 * Fork against cold creates, in one run, for a setup of about 5 s (a few MiB of files written,
 * then a sleep for the rest): 8 cold creates that each run the setup, against one sandbox set up
 * once, snapshotted, and 8 children started from the snapshot. Prints progress on stderr and one
 * JSON line on stdout: the per-child cost and the snapshot cost apart, the total each way, and
 * their ratio (the goal: fork at least 3x faster). Every child's files are checked against the
 * setup's (untimed).
 *
 * Two routes: `provider` (the Docker provider in-process, its native snapshot, a commit to an
 * image) and `daemon` (an in-process daemon over HTTP: `POST /v1/sandboxes/{id}/fork`, the route
 * the runner's `--fork-setup` uses, with the snapshot apart from the children through
 * `POST .../snapshot` and creates from `snapshot:<id>`).
 *
 * Live fork (memory and processes, `liveFork`) beside it, where the engine has gVisor's runsc and
 * runs with --experimental: the Docker provider in-process under runsc, the same setup plus a
 * background process, then a files-only fork and a live fork of it (8 children each), every live
 * child checked to run the process on from its memory. Otherwise `liveFork` is null with the
 * reason.
 *
 *   npm run bench:fork   (BENCH_FORK_ROUTE=auto|daemon|provider, BENCH_FORK_CHILDREN=8,
 *                         BENCH_FORK_SETUP_MS=5000, BENCH_FORK_SETUP_MIB=16, BENCH_FORK_CONCURRENCY=1,
 *                         BENCH_FORK_SETUP_KIND=sleep|cpu)
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { GymClient } from '../client/client.ts';
import { systemClock } from '../core/clock.ts';
import { isGymError } from '../core/errors.ts';
import { createId } from '../core/ids.ts';
import type { Logger } from '../core/logger.ts';
import { silentLogger } from '../core/logger.ts';
import { ExecRequestSchema } from '../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../core/schemas/sandbox.ts';
import { snapshotRef } from '../core/schemas/snapshot.ts';
import { loadConfig } from '../daemon/config.ts';
import { startDaemon } from '../daemon/daemon.ts';
import { imageReference } from '../images/build.ts';
import { findImageDefinition } from '../images/definitions.ts';
import { DockerProvider } from '../providers/docker/docker-provider.ts';
import { createDockerClient } from '../providers/docker/index.ts';
import { checkEngineRuntime } from '../providers/docker/runtime-tier.ts';
import { percentile, round } from './stats.ts';

const childCount = Number(process.env.BENCH_FORK_CHILDREN ?? 8);
const setupMs = Number(process.env.BENCH_FORK_SETUP_MS ?? 5000);
const setupMiB = Number(process.env.BENCH_FORK_SETUP_MIB ?? 16);
/**
 * What the rest of the setup is: `sleep` (waiting, as for a download) or `cpu` (a fixed amount of
 * work, calibrated to the rest of `setupMs` when run alone, as for a build): run at once, sleeps
 * overlap and work does not.
 */
const setupKind = process.env.BENCH_FORK_SETUP_KIND ?? 'sleep';
/** Creates at once on either side (1: one after another, the figure). */
const concurrency = Number(process.env.BENCH_FORK_CONCURRENCY ?? 1);
/** `auto`: the daemon when its snapshot routes answer, else the provider. */
const askedRoute = process.env.BENCH_FORK_ROUTE ?? 'auto';
const log = (message: string) => process.stderr.write(`bench:fork: ${message}\n`);

/** What either route does: sandboxes, a command in one, a snapshot, removal. */
interface Route {
  create(image: string): Promise<string>;
  run(id: string, command: string): Promise<{ exitCode: number | null; stdout: string }>;
  /** Snapshots `id`; returns the image children start from. */
  snapshot(id: string): Promise<string>;
  /** One request for all children, where the route has one (the daemon's fork): the children and the snapshot's image. */
  fork?(id: string, count: number): Promise<{ children: string[]; image: string }>;
  destroy(id: string): Promise<void>;
  removeSnapshot(image: string): Promise<void>;
  close(): Promise<void>;
}

async function providerRoute(): Promise<Route> {
  const docker = createDockerClient();
  const provider = new DockerProvider(docker, {
    namespace: 'bench-fork',
    daemonId: createId('daemon'),
    logger: silentLogger,
    clock: systemClock,
    maxLifetimeSeconds: 3600,
    stateDirectory: tmpdir(),
  });
  return {
    create: async (image) => (await provider.create(SandboxSpecSchema.parse({ image, ttlSeconds: 900 }))).id,
    run: async (id, command) => {
      const result = await provider.exec(id, ExecRequestSchema.parse({ command, timeoutMs: 120_000 }));
      return { exitCode: result.exitCode, stdout: result.stdout };
    },
    snapshot: async (id) =>
      (await provider.snapshot(id, { image: `gym-snapshot/bench-fork:${id.toLowerCase()}` })).image,
    destroy: (id) => provider.destroy(id),
    removeSnapshot: async (image) => {
      await docker
        .getImage(image)
        .remove({ force: true })
        .catch(() => {});
    },
    close: () => provider.close(),
  };
}

/** The daemon's route; null (the daemon stopped again) when it has no snapshot routes and `auto` was asked. */
async function daemonRoute(): Promise<Route | null> {
  const stateDir = await mkdtemp(join(tmpdir(), 'gym-bench-fork-'));
  const config = await loadConfig({
    env: {},
    overrides: [
      { stateDir, namespace: 'bench-fork', listen: { host: '127.0.0.1', port: 0 }, logLevel: 'warn' },
    ],
  });
  const logger = pino({ level: 'warn' }, pino.destination(2)) as unknown as Logger & ReturnType<typeof pino>;
  const daemon = await startDaemon({ config, logger });
  const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
  const close = async () => {
    await daemon.stop({ destroy: true });
    await rm(stateDir, { recursive: true, force: true });
  };
  if (askedRoute === 'auto') {
    const hasRoutes = await client.listSnapshots().then(
      () => true,
      (error: unknown) => !isGymError(error, 'ROUTE_NOT_FOUND'),
    );
    if (!hasRoutes) {
      await close();
      return null;
    }
  }
  return {
    create: async (image) => (await client.createSandbox({ image, ttlSeconds: 900 })).id,
    run: async (id, command) => {
      const result = await client.exec(id, { command, timeoutMs: 120_000 });
      return { exitCode: result.exitCode, stdout: result.stdout };
    },
    snapshot: async (id) => snapshotRef((await client.createSnapshot(id)).id),
    fork: async (id, count) => {
      const forked = await client.fork(id, { count });
      return { children: forked.sandboxes.map((sandbox) => sandbox.id), image: forked.snapshot.image };
    },
    destroy: (id) => client.destroySandbox(id),
    removeSnapshot: (image) => client.deleteSnapshot(image.replace(/^snapshot:/, '')),
    close,
  };
}

const WRITE_FILES = `mkdir -p /work/tree && head -c ${setupMiB * 1024 * 1024} /dev/urandom > /work/blob && for n in $(seq 1 200); do echo "file $n" > /work/tree/f$n; done && md5sum /work/blob > /work/blob.md5`;
/** MiB of zeros hashed per millisecond of work, measured once alone (`cpu` setups). */
let hashedMiBPerMs = 0;
const work = (milliseconds: number) =>
  `head -c ${Math.max(1, Math.round(milliseconds * hashedMiBPerMs)) * 1024 * 1024} /dev/zero | md5sum >/dev/null`;

/** Measures how much hashing a millisecond buys in a sandbox with nothing else running in it. */
async function calibrate(target: Route, id: string): Promise<void> {
  hashedMiBPerMs = 1 / 10;
  const started = performance.now();
  await target.run(id, work(2000));
  hashedMiBPerMs = (2000 * hashedMiBPerMs) / (performance.now() - started);
}

/** The setup: a few MiB of files and a small tree, then a sleep or work to make up `setupMs`. */
async function setUp(target: Route, id: string, fixedRestMs?: number): Promise<number> {
  const started = performance.now();
  const written = await target.run(id, WRITE_FILES);
  if (written.exitCode !== 0) throw new Error('the setup failed to write its files');
  const rest = fixedRestMs ?? setupMs - (performance.now() - started);
  if (rest > 0) await target.run(id, setupKind === 'cpu' ? work(rest) : `sleep ${(rest / 1000).toFixed(3)}`);
  return rest;
}

/** The setup's files are all there and whole. */
async function check(target: Route, id: string): Promise<void> {
  const seen = await target.run(id, 'md5sum -c /work/blob.md5 >/dev/null && ls /work/tree | wc -l');
  if (seen.exitCode !== 0 || seen.stdout.trim() !== '200')
    throw new Error(`sandbox ${id} lacks the setup's files (${seen.stdout.trim()})`);
}

/** Runs `work` for 0..count-1, `concurrency` at once; returns each one's milliseconds. */
async function timedEach(count: number, work: (index: number) => Promise<void>): Promise<number[]> {
  const times: number[] = [];
  let next = 0;
  const worker = async () => {
    while (next < count) {
      const index = next++;
      const started = performance.now();
      await work(index);
      times[index] = performance.now() - started;
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, count)) }, worker));
  return times;
}

/** A process whose count lives in its memory; the file shows it. */
const COUNTER =
  "sh -c 'i=0; while :; do i=$((i+1)); echo $i > /work/count.new && mv /work/count.new /work/count; sleep 0.1; done' >/dev/null 2>&1 </dev/null &";

/** Why live fork cannot be measured here, or null. */
async function liveUnavailable(): Promise<string | null> {
  const docker = createDockerClient();
  const problems = await checkEngineRuntime(docker, 'runsc').catch((error: Error) => [error.message]);
  if (problems.length > 0) return `not measured: runsc is not usable (${problems.join('; ')})`;
  const info = (await docker.info()) as { ExperimentalBuild?: boolean };
  return info.ExperimentalBuild === true
    ? null
    : 'not measured: the Docker engine runs without --experimental';
}

/** Files-only and live fork of one set-up parent under runsc, `childCount` children each. */
async function measureLive(restMs: number) {
  const stateDirectory = await mkdtemp(join(tmpdir(), 'gym-bench-live-'));
  const provider = new DockerProvider(
    createDockerClient(),
    {
      namespace: 'bench-fork-live',
      daemonId: createId('daemon'),
      logger: silentLogger,
      clock: systemClock,
      maxLifetimeSeconds: 3600,
      stateDirectory,
    },
    { runtime: 'runsc' },
  );
  const spec = (from: string) => SandboxSpecSchema.parse({ image: from, ttlSeconds: 900 });
  const live: Route = {
    create: async (from) => (await provider.create(spec(from))).id,
    run: async (id, command) => {
      const result = await provider.exec(id, ExecRequestSchema.parse({ command, timeoutMs: 120_000 }));
      return { exitCode: result.exitCode, stdout: result.stdout };
    },
    snapshot: async () => '',
    destroy: (id) => provider.destroy(id),
    removeSnapshot: (from) => provider.deleteSnapshot(from),
    close: () => provider.close(),
  };
  const count = async (id: string) => Number((await live.run(id, 'cat /work/count')).stdout.trim());
  const mine: string[] = [];
  const images: string[] = [];
  try {
    const started = performance.now();
    const parent = await live.create(image);
    mine.push(parent);
    await setUp(live, parent, restMs);
    await live.run(parent, COUNTER);
    const setUpMs = performance.now() - started;
    while ((await count(parent)) < 5) await new Promise((resolve) => setTimeout(resolve, 100));

    log(`under runsc: a files-only snapshot and ${childCount} children`);
    let mark = performance.now();
    const files = await provider.snapshot(parent, {
      image: '',
      managedId: createId('snp').replace(/^snp-/, 'snp_'),
    });
    images.push(files.image);
    const filesSnapshotMs = performance.now() - mark;
    const filesEach = await timedEach(childCount, async () => {
      mine.push(await live.create(files.image));
    });
    for (const id of mine.slice(1)) await check(live, id);
    await Promise.all(mine.splice(1).map((id) => live.destroy(id)));

    log(`under runsc: a live snapshot and ${childCount} restored children`);
    mark = performance.now();
    const held = await provider.snapshot(parent, {
      image: '',
      managedId: createId('snp').replace(/^snp-/, 'snp_'),
      live: true,
    });
    images.push(held.image);
    const liveSnapshotMs = performance.now() - mark;
    const liveEach = await timedEach(childCount, async () => {
      mine.push((await provider.create(spec(held.image), { restore: held.checkpoint! })).id);
    });
    for (const id of mine.slice(1)) {
      await check(live, id);
      const first = await count(id);
      const until = Date.now() + 20_000;
      while ((await count(id)) <= first) {
        if (Date.now() > until) throw new Error(`live child ${id} does not run the parent's process`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    return {
      runtime: 'runsc',
      parentCreateAndSetupMs: round(setUpMs, 1),
      filesOnly: {
        snapshotMs: round(filesSnapshotMs, 1),
        perChildMeanMs: round(mean(filesEach), 1),
        perChildP50Ms: round(percentile(filesEach, 0.5), 1),
      },
      live: {
        snapshotMs: round(liveSnapshotMs, 1),
        snapshotBytes: held.sizeBytes ?? null,
        perChildMeanMs: round(mean(liveEach), 1),
        perChildP50Ms: round(percentile(liveEach, 0.5), 1),
      },
      /** What a live child costs over a files-only one, measured in the same run. */
      livePerChildRatio: round(mean(liveEach) / mean(filesEach), 2),
    };
  } finally {
    await Promise.all(mine.map((id) => live.destroy(id).catch(() => {})));
    for (const from of images) await live.removeSnapshot(from).catch(() => {});
    await live.close();
    await rm(stateDirectory, { recursive: true, force: true });
  }
}

const mean = (values: number[]) => values.reduce((sum, value) => sum + value, 0) / values.length;
const image = await imageReference(findImageDefinition('busybox')!);
const fromDaemon = askedRoute === 'provider' ? null : await daemonRoute();
const route = fromDaemon === null ? 'provider' : 'daemon';
const target = fromDaemon ?? (await providerRoute());
const made: string[] = [];
const snapshots: string[] = [];
try {
  // The setup's rest, fixed by one setup run alone, so every setup of the run does the same work.
  const probe = await target.create(image);
  made.push(probe);
  if (setupKind === 'cpu') await calibrate(target, probe);
  const restMs = await setUp(target, probe);
  await Promise.all(made.splice(0).map((id) => target.destroy(id)));
  log(`route ${route}: ${childCount} cold creates, each running a ${setupMs} ms ${setupKind} setup`);
  const coldStarted = performance.now();
  const coldEach = await timedEach(childCount, async () => {
    const id = await target.create(image);
    made.push(id);
    await setUp(target, id, restMs);
  });
  const coldTotalMs = performance.now() - coldStarted;
  for (const id of made) await check(target, id);
  await Promise.all(made.splice(0).map((id) => target.destroy(id)));

  log(`one setup, a snapshot, ${childCount} children`);
  const forkStarted = performance.now();
  const parent = await target.create(image);
  made.push(parent);
  await setUp(target, parent, restMs);
  const setUpMs = performance.now() - forkStarted;
  const snapshotStarted = performance.now();
  const snapshotImage = await target.snapshot(parent);
  snapshots.push(snapshotImage);
  const snapshotMs = performance.now() - snapshotStarted;
  const childEach = await timedEach(childCount, async () => {
    made.push(await target.create(snapshotImage));
  });
  const forkTotalMs = performance.now() - forkStarted;
  const children = made.slice(1);
  for (const id of children) await check(target, id);
  await Promise.all(made.splice(0).map((id) => target.destroy(id)));

  // The daemon's one-request fork (snapshot and children together), as `--fork-setup` calls it.
  let forkRequest: { setupMs: number; requestMs: number; totalMs: number } | null = null;
  if (target.fork !== undefined) {
    log(`one setup, then one fork request of ${childCount}`);
    const started = performance.now();
    const source = await target.create(image);
    made.push(source);
    await setUp(target, source, restMs);
    const requested = performance.now();
    const forked = await target.fork(source, childCount);
    made.push(...forked.children);
    snapshots.push(forked.image);
    const done = performance.now();
    for (const id of forked.children) await check(target, id);
    forkRequest = {
      setupMs: round(requested - started, 1),
      requestMs: round(done - requested, 1),
      totalMs: round(done - started, 1),
    };
    await Promise.all(made.splice(0).map((id) => target.destroy(id)));
  }

  const liveReason = await liveUnavailable();
  const liveFork = liveReason === null ? await measureLive(restMs) : null;

  console.log(
    JSON.stringify({
      bench: 'fork',
      route,
      children: childCount,
      concurrency,
      setupMiB,
      setupKind,
      setupTargetMs: setupMs,
      cold: {
        perChildMeanMs: round(mean(coldEach), 1),
        perChildP50Ms: round(percentile(coldEach, 0.5), 1),
        totalMs: round(coldTotalMs, 1),
      },
      fork: {
        parentCreateAndSetupMs: round(setUpMs, 1),
        snapshotMs: round(snapshotMs, 1),
        perChildMeanMs: round(mean(childEach), 1),
        perChildP50Ms: round(percentile(childEach, 0.5), 1),
        totalMs: round(forkTotalMs, 1),
      },
      forkRequest,
      speedup: round(coldTotalMs / forkTotalMs, 2),
      liveFork,
      ...(liveReason === null ? {} : { liveForkReason: liveReason }),
    }),
  );
} finally {
  log('removing every sandbox and snapshot');
  await Promise.all(made.map((id) => target.destroy(id).catch(() => {})));
  await Promise.all(snapshots.map((snapshot) => target.removeSnapshot(snapshot).catch(() => {})));
  await target.close();
}
