/**
 * Scale and soak through the HTTP API of a daemon in its own process (so its RSS and descriptors
 * are its own), on the Docker engine, with busybox sandboxes:
 *
 * 1. ramp: create `--target` sandboxes, `--concurrency` at a time;
 * 2. load: a session opened on every sandbox (timed); `--session-clients` (32) clients doing only
 *    session execs on random sandboxes (at most 20 s); then the same clients for `--load-seconds`, each
 *    on a random sandbox: session execs, one-shot execs, small file writes and reads back,
 *    keepalives;
 * 3. teardown: delete them all; count what is left (containers of the daemon's namespace);
 * 4. the raw engine (dockerode directly) doing the same creates, one-shot execs and removes, so
 *    the daemon's cost is a ratio (`--raw N` creates, 0 skips it).
 *
 * `--soak MINUTES` instead keeps `--target` sandboxes live under the same load with churn (each
 * client now and then destroys its sandbox and creates a new one), reads the daemon's RSS, open
 * descriptors and JS heap in use (its /metrics) every second, keeps each `--sample-seconds`
 * window's lowest (the floor under garbage collection and requests in flight), and fails (exit 1)
 * when one keeps growing (`soak-verdict.ts`: a least-squares slope, heap and descriptors over the
 * whole run, RSS over its second half, once the allocators have grown into the load).
 *
 * Everything it creates carries its own namespace (daemon) or the `gym-bench=scale-raw` label and
 * a run id (engine); both are removed at the end, also after a failure or Ctrl-C.
 * Progress on stderr, one JSON line on stdout.
 *
 *   npm run bench:scale -- --target 50 --load-seconds 20
 *   npm run bench:scale -- --target 50 --soak 1 --sample-seconds 10
 *
 * `--profile DIR` runs the daemon with a CPU profile (written to DIR when it exits) and takes a
 * heap snapshot of it into DIR before and after the ramp and after the load (scripts/heap-diff.ts compares them).
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { Duplex } from 'node:stream';
import { parseArgs } from 'node:util';
import type Docker from 'dockerode';
import type { GymClient } from '../client/client.ts';
import { isGymError } from '../core/errors.ts';
import { imageReference } from '../images/build.ts';
import { findImageDefinition } from '../images/definitions.ts';
import { createDockerClient } from '../providers/docker/index.ts';
import { procStatField } from '../providers/shared/proc-stat.ts';
import { spawnDaemonProcess } from '../test/daemon-harness.ts';
import { soakVerdict } from './soak-verdict.ts';
import { percentile, round } from './stats.ts';

const { values: args } = parseArgs({
  options: {
    target: { type: 'string', default: '1000' },
    concurrency: { type: 'string', default: '16' },
    clients: { type: 'string', default: '64' },
    'session-clients': { type: 'string', default: '32' },
    'load-seconds': { type: 'string', default: '30' },
    raw: { type: 'string' },
    soak: { type: 'string' },
    'sample-seconds': { type: 'string', default: '60' },
    profile: { type: 'string' },
    'engine-sessions': { type: 'boolean', default: false },
  },
});
const target = Number(args.target);
const concurrency = Number(args.concurrency);
const clients = Number(args.clients);
/** The issue's baseline (920 session execs a second at 500 live) was taken with 32 clients. */
const sessionClients = Number(args['session-clients']);
const loadSeconds = Number(args['load-seconds']);
const rawCount = Number(args.raw ?? target);
const soakMinutes = args.soak === undefined ? undefined : Number(args.soak);
const sampleSeconds = Number(args['sample-seconds']);

const runId = randomBytes(4).toString('hex');
const namespace = `bench-scale-${runId}`;
const RAW_LABEL = 'gym-bench';
const docker = createDockerClient();
const image = await imageReference(findImageDefinition('busybox')!);
const log = (message: string) => process.stderr.write(`bench:scale: ${message}\n`);

// ---- measuring ----

const errors = new Map<string, number>();
/** The first message (and reason, when the error gives one) of each code, to say what failed. */
const errorExamples = new Map<string, string>();
function countError(error: unknown): void {
  const code = isGymError(error) ? error.code : `non-api: ${(error as Error)?.message ?? String(error)}`;
  errors.set(code, (errors.get(code) ?? 0) + 1);
  if (isGymError(error) && !errorExamples.has(code)) {
    const reason = error.details.reason;
    errorExamples.set(
      code,
      `${error.message}${typeof reason === 'string' ? ` (${reason})` : ''}`.slice(0, 300),
    );
  }
}

interface ProcessSample {
  rssMiB: number;
  fds: number;
  /** User and system CPU seconds since the process started. */
  cpuSeconds: number;
}

const CLOCK_TICKS = 100;
async function sampleProcess(pid: number): Promise<ProcessSample> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const rssKiB = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? Number.NaN);
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const ticks = Number(procStatField(stat, 14)) + Number(procStatField(stat, 15));
  return {
    rssMiB: round(rssKiB / 1024, 1),
    fds: (await readdir(`/proc/${pid}/fd`)).length,
    cpuSeconds: round(ticks / CLOCK_TICKS, 2),
  };
}

function latencySummary(samples: number[], seconds: number) {
  return {
    count: samples.length,
    perSecond: round(samples.length / seconds, 1),
    p50Ms: round(percentile(samples, 0.5), 2),
    p99Ms: round(percentile(samples, 0.99), 2),
  };
}

/** Runs `count` tasks, `width` at a time. */
async function bounded(count: number, width: number, task: (index: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(width, count) }, async () => {
      while (next < count) {
        const index = next;
        next += 1;
        await task(index);
      }
    }),
  );
}

// ---- the daemon side ----

type Kind = 'sessionExec' | 'oneShotExec' | 'fileWriteRead' | 'keepalive';
/** Of 100 operations: mostly what agents do (session execs), then one-shot execs, files, keepalives. */
const MIX: Array<[Kind, number]> = [
  ['sessionExec', 60],
  ['oneShotExec', 15],
  ['fileWriteRead', 15],
  ['keepalive', 10],
];

function pickKind(): Kind {
  let draw = Math.random() * 100;
  for (const [kind, weight] of MIX) {
    draw -= weight;
    if (draw < 0) return kind;
  }
  return 'sessionExec';
}

async function runOperation(client: GymClient, id: string, kind: Kind, clientIndex: number): Promise<void> {
  switch (kind) {
    case 'sessionExec':
      await client.exec(id, { argv: ['true'], session: 'bench' });
      return;
    case 'oneShotExec':
      await client.exec(id, { argv: ['true'] });
      return;
    case 'fileWriteRead': {
      const content = randomBytes(256);
      // A file of this client's own: another client may use the same sandbox at the same time.
      const path = `/tmp/bench-${clientIndex}.bin`;
      await client.writeFile(id, path, content);
      const back = await client.readFileBytes(id, path, { maxBytes: 4096 });
      if (!back.equals(content)) throw new Error('a file read back differs from what was written');
      return;
    }
    case 'keepalive':
      await client.keepalive(id);
      return;
  }
}

async function createOne(client: GymClient, live: string[], createMs: number[]): Promise<void> {
  const started = performance.now();
  try {
    const sandbox = await client.createSandbox({ image, ttlSeconds: 3600, labels: { 'gym-bench': 'scale' } });
    createMs.push(performance.now() - started);
    live.push(sandbox.id);
  } catch (error) {
    countError(error);
  }
}

interface LoadResult {
  seconds: number;
  byKind: Record<Kind, number[]>;
  churned: number;
}

/**
 * `clients` loops for `seconds`, each on a random live sandbox. With `churnEvery` set, a client
 * replaces a random sandbox (destroy, then create) once in that many operations.
 */
async function mixedLoad(
  client: GymClient,
  live: string[],
  seconds: number,
  churnEvery: number | null,
  onTick?: () => Promise<void>,
): Promise<LoadResult> {
  const byKind: Record<Kind, number[]> = {
    sessionExec: [],
    oneShotExec: [],
    fileWriteRead: [],
    keepalive: [],
  };
  const createMs: number[] = [];
  let churned = 0;
  const started = performance.now();
  const deadline = started + seconds * 1000;
  /** Operations in flight per sandbox: churn never destroys a sandbox another client is using. */
  const busy = new Map<string, number>();
  let ticking = false;
  const ticker =
    onTick === undefined
      ? undefined
      : setInterval(() => {
          if (ticking) return;
          ticking = true;
          onTick().finally(() => {
            ticking = false;
          });
        }, 1000);
  await Promise.all(
    Array.from({ length: clients }, async (_, clientIndex) => {
      while (performance.now() < deadline && live.length > 0) {
        if (churnEvery !== null && Math.random() < 1 / churnEvery) {
          const index = Math.floor(Math.random() * live.length);
          const id = live[index]!;
          if ((busy.get(id) ?? 0) > 0) continue;
          live.splice(index, 1);
          try {
            await client.destroySandbox(id);
          } catch (error) {
            countError(error);
          }
          await createOne(client, live, createMs);
          churned += 1;
          continue;
        }
        const id = live[Math.floor(Math.random() * live.length)]!;
        const kind = pickKind();
        busy.set(id, (busy.get(id) ?? 0) + 1);
        const opStarted = performance.now();
        try {
          await runOperation(client, id, kind, clientIndex);
          byKind[kind].push(performance.now() - opStarted);
        } catch (error) {
          countError(error);
        } finally {
          if (busy.get(id) === 1) busy.delete(id);
          else busy.set(id, busy.get(id)! - 1);
        }
      }
    }),
  );
  if (ticker !== undefined) clearInterval(ticker);
  return { seconds: (performance.now() - started) / 1000, byKind, churned };
}

function loadSummary(load: LoadResult) {
  const all = Object.values(load.byKind).flat();
  const byKind = Object.fromEntries(
    Object.entries(load.byKind).map(([kind, samples]) => [kind, latencySummary(samples, load.seconds)]),
  ) as Record<Kind, ReturnType<typeof latencySummary>>;
  return {
    seconds: round(load.seconds, 1),
    opsPerSecond: round(all.length / load.seconds, 1),
    ...byKind,
    ...(load.churned > 0 ? { churned: load.churned } : {}),
  };
}

/** `clients` clients doing nothing but `exec` for `seconds`: the same work the raw engine phase does. */
async function execOnly(seconds: number, exec: () => Promise<unknown>, width = clients) {
  const samples: number[] = [];
  const started = performance.now();
  const deadline = started + seconds * 1000;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (performance.now() < deadline) {
        const begin = performance.now();
        try {
          await exec();
          samples.push(performance.now() - begin);
        } catch (error) {
          countError(error);
        }
      }
    }),
  );
  return latencySummary(samples, (performance.now() - started) / 1000);
}

/** One-shot execs need at most this long a phase to settle; the raw engine does the same. */
const execPhaseSeconds = Math.min(loadSeconds, 20);

async function destroyAll(client: GymClient, live: string[]): Promise<number> {
  const started = performance.now();
  const ids = live.splice(0);
  await bounded(ids.length, concurrency, async (index) => {
    try {
      await client.destroySandbox(ids[index]!);
    } catch (error) {
      countError(error);
    }
  });
  return (performance.now() - started) / 1000;
}

async function containersLabelled(label: string): Promise<Docker.ContainerInfo[]> {
  return docker.listContainers({ all: true, filters: { label: [label] } });
}

// ---- the raw engine ----

async function rawEngine(count: number) {
  const label = `${RAW_LABEL}=scale-raw-${runId}`;
  const names: string[] = [];
  const createMs: number[] = [];
  const started = performance.now();
  await bounded(count, concurrency, async (index) => {
    const begin = performance.now();
    try {
      const container = await docker.createContainer({
        name: `gym-bench-raw-${runId}-${index}`,
        Image: image,
        Entrypoint: ['sleep', '2147483647'],
        Cmd: [],
        Labels: { [RAW_LABEL]: `scale-raw-${runId}` },
        HostConfig: {
          NetworkMode: 'none',
          CapDrop: ['ALL'],
          SecurityOpt: ['no-new-privileges'],
          LogConfig: { Type: 'none', Config: {} },
          Memory: 4096 * 1024 * 1024,
          NanoCpus: 2e9,
          PidsLimit: 1024,
        },
      });
      await container.start();
      createMs.push(performance.now() - begin);
      names.push(container.id);
    } catch (error) {
      countError(error);
    }
  });
  const createSeconds = (performance.now() - started) / 1000;
  log(`raw engine: ${names.length} containers in ${round(createSeconds, 1)} s; one-shot execs`);

  // What a caller of dockerode does for one command: create, start attached, read to the end, inspect.
  const oneShotExec =
    names.length === 0
      ? null
      : await execOnly(execPhaseSeconds, async () => {
          const container = docker.getContainer(names[Math.floor(Math.random() * names.length)]!);
          const exec = await container.exec({ Cmd: ['true'], AttachStdout: true, AttachStderr: true });
          const stream = (await exec.start({ hijack: true, stdin: false })) as Duplex;
          await new Promise<void>((resolve) => {
            stream.on('data', () => {});
            stream.once('end', resolve);
            stream.once('close', resolve);
          });
          await exec.inspect();
        });

  const removeStarted = performance.now();
  await bounded(names.length, concurrency, async (index) => {
    try {
      await docker.getContainer(names[index]!).remove({ force: true });
    } catch (error) {
      countError(error);
    }
  });
  const removeSeconds = (performance.now() - removeStarted) / 1000;
  return {
    created: names.length,
    createsPerSecond: round(names.length / createSeconds, 2),
    createP50Ms: round(percentile(createMs, 0.5), 1),
    oneShotExec,
    removeSeconds: round(removeSeconds, 1),
    leftovers: (await containersLabelled(label)).length,
  };
}

// ---- the run ----

const profileDirectory = args.profile === undefined ? undefined : resolve(args.profile);
if (profileDirectory !== undefined) {
  // Read by the daemon process only: this one started long before.
  process.env.NODE_OPTIONS = [
    process.env.NODE_OPTIONS ?? '',
    `--cpu-prof --cpu-prof-dir=${profileDirectory}`,
    `--heapsnapshot-signal=SIGUSR2 --diagnostic-dir=${profileDirectory}`,
  ].join(' ');
}

/** With --profile: a heap snapshot of the daemon, named after the phase. */
async function heapSnapshot(pid: number, phase: string): Promise<void> {
  if (profileDirectory === undefined) return;
  const before = new Set(await readdir(profileDirectory));
  process.kill(pid, 'SIGUSR2');
  for (let waited = 0; waited < 120_000; waited += 500) {
    await new Promise((done) => setTimeout(done, 500));
    const written = (await readdir(profileDirectory)).find(
      (name) => !before.has(name) && name.endsWith('.heapsnapshot'),
    );
    if (written === undefined) continue;
    // The file appears at once and grows; its size settles when the snapshot is done.
    let size = -1;
    for (;;) {
      const now = (await stat(join(profileDirectory, written))).size;
      if (now === size && now > 0) break;
      size = now;
      await new Promise((done) => setTimeout(done, 1000));
    }
    await rename(join(profileDirectory, written), join(profileDirectory, `${phase}.heapsnapshot`));
    log(`heap snapshot ${phase}.heapsnapshot written`);
    return;
  }
  log(`no heap snapshot after ${phase}`);
}

const stateDir = await mkdtemp(join(tmpdir(), 'gym-bench-scale-'));
const configPath = join(stateDir, 'config.yaml');
await writeFile(
  configPath,
  JSON.stringify({
    stateDir,
    namespace,
    listen: { host: '127.0.0.1', port: 0 },
    logLevel: 'warn',
    providers: [
      {
        name: 'docker',
        maxConcurrentCreates: concurrency,
        maxLiveSandboxes: target + clients,
        queueSize: target + clients,
        queueTimeoutMs: 600_000,
        // Sessions through the engine's exec stream, as before the helper's pipes (a comparison).
        ...(args['engine-sessions'] ? { options: { sessionPipes: false } } : {}),
      },
    ],
  }),
);
let child: ChildProcess | undefined;
let client: GymClient | undefined;
const live: string[] = [];

/** Removes whatever of ours is left: the daemon's sandboxes, then any container with our labels. */
async function cleanUp(): Promise<number> {
  if (client !== undefined && live.length > 0) await destroyAll(client, live).catch(() => {});
  child?.kill('SIGTERM');
  if (child !== undefined && child.exitCode === null)
    await new Promise((resolve) => child!.once('exit', resolve));
  const ours = [
    ...(await containersLabelled(`gym.namespace=${namespace}`)),
    ...(await containersLabelled(`${RAW_LABEL}=scale-raw-${runId}`)),
  ];
  await Promise.all(
    ours.map((info) =>
      docker
        .getContainer(info.Id)
        .remove({ force: true })
        .catch(() => {}),
    ),
  );
  await rm(stateDir, { recursive: true, force: true });
  return ours.length;
}

process.once('SIGINT', () => {
  log('interrupted: removing what this run created');
  cleanUp().finally(() => process.exit(130));
});

let exitCode = 0;
try {
  const started = await spawnDaemonProcess(configPath, stateDir);
  child = started.child;
  client = started.client;
  const pid = child.pid!;
  await heapSnapshot(pid, 'idle');
  const idle = await sampleProcess(pid);
  const hostLoad = (await readFile('/proc/loadavg', 'utf8')).split(' ').slice(0, 3).map(Number);

  log(`ramp to ${target} sandboxes, ${concurrency} creates at a time`);
  const createMs: number[] = [];
  const rampStarted = performance.now();
  await bounded(target, concurrency, () => createOne(client!, live, createMs));
  const rampSeconds = (performance.now() - rampStarted) / 1000;
  const afterRamp = await sampleProcess(pid);
  log(
    `${live.length} live after ${round(rampSeconds, 1)} s; RSS ${afterRamp.rssMiB} MiB, ${afterRamp.fds} fds`,
  );
  await heapSnapshot(pid, 'after-ramp');
  const ramp = {
    liveReached: live.length,
    seconds: round(rampSeconds, 1),
    createsPerSecond: round(live.length / rampSeconds, 2),
    createP50Ms: round(percentile(createMs, 0.5), 1),
    createP99Ms: round(percentile(createMs, 0.99), 1),
  };

  if (soakMinutes === undefined) {
    // Each sandbox's session is opened first (what an agent's first command pays), so the load
    // below measures session execs on open sessions, not a mix with openings.
    log('opening a session on every sandbox');
    const sessionOpenMs: number[] = [];
    const openStarted = performance.now();
    const ids = [...live];
    await bounded(ids.length, concurrency, async (index) => {
      const begin = performance.now();
      try {
        await client!.exec(ids[index]!, { argv: ['true'], session: 'bench' });
        sessionOpenMs.push(performance.now() - begin);
      } catch (error) {
        countError(error);
      }
    });
    const sessionOpen = latencySummary(sessionOpenMs, (performance.now() - openStarted) / 1000);
    const afterSessions = await sampleProcess(pid);
    // What an agent's commands cost once the sandboxes are live: session execs and nothing else
    // (in the mixed load the slow one-shot execs hold most clients, and the engine's CPU).
    log(`session execs alone: ${sessionClients} clients for ${execPhaseSeconds} s`);
    const sessionOnly = {
      clients: sessionClients,
      ...(await execOnly(
        execPhaseSeconds,
        () =>
          client!.exec(live[Math.floor(Math.random() * live.length)]!, { argv: ['true'], session: 'bench' }),
        sessionClients,
      )),
    };
    log(`mixed load: ${clients} clients for ${loadSeconds} s`);
    const load = await mixedLoad(client, live, loadSeconds, null);
    const afterLoad = await sampleProcess(pid);
    log(`load done: RSS ${afterLoad.rssMiB} MiB, ${afterLoad.fds} fds; one-shot execs alone`);
    await heapSnapshot(pid, 'after-load');
    const oneShotOnly = await execOnly(execPhaseSeconds, () =>
      client!.exec(live[Math.floor(Math.random() * live.length)]!, { argv: ['true'] }),
    );
    log('teardown');
    const teardownSeconds = await destroyAll(client, live);
    const afterTeardown = await sampleProcess(pid);
    const leftovers = (await containersLabelled(`gym.namespace=${namespace}`)).length;
    const raw = rawCount > 0 ? await rawEngine(rawCount) : null;
    const summary = loadSummary(load);
    console.log(
      JSON.stringify({
        bench: 'scale',
        target,
        concurrency,
        clients,
        hostLoadAverage: hostLoad,
        ...ramp,
        daemon: {
          idle,
          afterRamp,
          afterSessions,
          afterLoad,
          afterTeardown,
          rssPerSandboxKiB: round(
            ((afterRamp.rssMiB - idle.rssMiB) * 1024) / Math.max(1, ramp.liveReached),
            1,
          ),
          // The daemon's own CPU (user + system) per create and per operation of the mixed load.
          cpuMsPerCreate: round(
            ((afterRamp.cpuSeconds - idle.cpuSeconds) * 1000) / Math.max(1, ramp.liveReached),
            2,
          ),
          cpuMsPerOperation: round(
            ((afterLoad.cpuSeconds - afterSessions.cpuSeconds) * 1000) /
              Math.max(1, summary.seconds * summary.opsPerSecond),
            2,
          ),
        },
        sessionOpen,
        sessionOnly,
        load: summary,
        oneShotOnly,
        errors: Object.fromEntries(errors),
        errorExamples: Object.fromEntries(errorExamples),
        teardownSeconds: round(teardownSeconds, 1),
        leftovers,
        raw,
        ...(raw === null
          ? {}
          : {
              createRatio: round(raw.createsPerSecond / ramp.createsPerSecond, 2),
              oneShotExecThroughputRatio:
                raw.oneShotExec === null ? null : round(raw.oneShotExec.perSecond / oneShotOnly.perSecond, 2),
            }),
      }),
    );
    if (leftovers > 0 || (raw !== null && raw.leftovers > 0)) exitCode = 1;
  } else {
    const samples: Array<{ minute: number; heapUsedMiB: number } & ProcessSample> = [];
    /** The daemon's own heap in use (its /metrics), a window's floor: what a JS leak raises. */
    let heapFloor = Number.POSITIVE_INFINITY;
    const readHeap = async () => {
      const text = await client!.metrics().catch(() => '');
      const bytes = Number(/gym_process_memory_bytes\{kind="heap_used"\} (\d+)/.exec(text)?.[1]);
      if (Number.isFinite(bytes)) heapFloor = Math.min(heapFloor, bytes / 1024 / 1024);
    };
    const soakStarted = performance.now();
    let nextSample = soakStarted + sampleSeconds * 1000;
    // Read every second; a window's sample is its lowest RSS and descriptor count. RSS saws up
    // and down with garbage collection and descriptors with requests in flight: a leak is what
    // raises the floor.
    let window: ProcessSample | null = null;
    const tick = async () => {
      const now = await sampleProcess(pid);
      await readHeap();
      window =
        window === null
          ? now
          : {
              rssMiB: Math.min(window.rssMiB, now.rssMiB),
              fds: Math.min(window.fds, now.fds),
              cpuSeconds: now.cpuSeconds,
            };
      if (performance.now() < nextSample) return;
      nextSample += sampleSeconds * 1000;
      const sample = {
        minute: round((performance.now() - soakStarted) / 60_000, 2),
        ...window,
        heapUsedMiB: round(heapFloor, 1),
      };
      window = null;
      heapFloor = Number.POSITIVE_INFINITY;
      samples.push(sample);
      // With --profile, heap snapshots after the warm-up sample and at the end: what grew between.
      if (samples.length === 2) void heapSnapshot(pid, 'soak-early');
      log(
        `soak ${sample.minute} min: RSS floor ${sample.rssMiB} MiB, heap floor ${sample.heapUsedMiB} MiB, ${sample.fds} fds, ${live.length} live`,
      );
    };
    log(`soak: ${soakMinutes} min, ${clients} clients, churn, a sample every ${sampleSeconds} s`);
    // About one sandbox in fifty operations replaced: a steady stream of creates and destroys.
    const load = await mixedLoad(client, live, soakMinutes * 60, 50, tick);
    const judged = soakVerdict(samples);
    const isGrowing = judged.verdict !== 'flat';
    await heapSnapshot(pid, 'soak-late');
    const teardownSeconds = await destroyAll(client, live);
    const leftovers = (await containersLabelled(`gym.namespace=${namespace}`)).length;
    console.log(
      JSON.stringify({
        bench: 'scale-soak',
        target,
        minutes: soakMinutes,
        clients,
        hostLoadAverage: hostLoad,
        ramp,
        load: loadSummary(load),
        samples,
        ...judged,
        errors: Object.fromEntries(errors),
        errorExamples: Object.fromEntries(errorExamples),
        teardownSeconds: round(teardownSeconds, 1),
        leftovers,
      }),
    );
    if (isGrowing || leftovers > 0) exitCode = 1;
  }
} catch (error) {
  log(`failed: ${(error as Error).stack ?? String(error)}`);
  exitCode = 1;
} finally {
  const removed = await cleanUp();
  if (removed > 0) {
    log(`removed ${removed} containers left behind`);
    exitCode = 1;
  }
}
process.exit(exitCode);
