/**
 * What one SWE rollout costs the machine in CPU-seconds, for bench:eval. Two parts:
 *
 * - CpuMeter: the CPU of the processes a run involves, and only those (the machine is shared, so
 *   /proc/stat alone counts other people's work): this process and the children it waited for,
 *   dockerd and containerd, the containerd shim of each container the run created (runc runs as
 *   the shim's child), and each such container's cgroup (cpuacct: everything run inside it). The
 *   shims and cgroups go away with their container, so they are sampled every 50 ms while they
 *   live (the last sample before removal is what counts: up to 50 ms of a shim's teardown is
 *   missed, in both the pipeline and the floor). The machine-wide /proc/stat figure is kept
 *   next to it. The meter's own CPU lands in `self` of both phases, so it reads synchronously
 *   (fs/promises' open, fstat, read and close per file cost several times more, and GC).
 * - runFloor: the least work a SWE rollout needs, with dockerode directly: create and start the
 *   task container, apply the gold patch, diff against the base commit, create and start a
 *   grading container, apply the diff and the test patch, run the tests, remove both.
 */
import { readdirSync, readFileSync } from 'node:fs';
import type { Duplex } from 'node:stream';
import type DockerModem from 'docker-modem';
import type Docker from 'dockerode';

const TICKS_PER_SECOND = 100;

/** A small file of /proc or /sys, or null when it is gone. */
export function readOrNull(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}
const SAMPLE_MS = 50;

/** utime+stime+cutime+cstime of a process, in seconds; null when it is gone. */
export async function processSeconds(pid: number | 'self'): Promise<number | null> {
  const stat = readOrNull(`/proc/${pid}/stat`);
  if (stat === null) return null;
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // Fields 14-17 of proc(5), counted from the state field (3).
  const ticks = [11, 12, 13, 14].reduce((sum, index) => sum + Number(fields[index]), 0);
  return ticks / TICKS_PER_SECOND;
}

export async function pidsNamed(names: string[]): Promise<number[]> {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const comm = readOrNull(`/proc/${entry}/comm`) ?? '';
    if (names.includes(comm.trim())) pids.push(Number(entry));
  }
  return pids;
}

/** The non-idle CPU-seconds of the whole machine since boot (/proc/stat). */
async function machineSeconds(): Promise<number> {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
  const [user, nice, system, , , irq, softirq, steal] = line.trim().split(/\s+/).slice(1).map(Number);
  return (
    ((user ?? 0) + (nice ?? 0) + (system ?? 0) + (irq ?? 0) + (softirq ?? 0) + (steal ?? 0)) /
    TICKS_PER_SECOND
  );
}

interface Tracked {
  /** The cgroup went away (the container was removed): no more samples of it. */
  done: boolean;
  /** Null until found, and again once the shim has exited. */
  shimPid: number | null;
  shimSeconds: number;
  cgroupSeconds: number;
}

export interface CpuReading {
  /** This process (the daemon and runner, or the floor) and the children it waited for. */
  self: number;
  dockerd: number;
  containerd: number;
  shims: number;
  containers: number;
  /** The sum of the above: the run's own CPU. */
  total: number;
  /** Non-idle CPU of the whole machine (includes other sessions' load on a shared machine). */
  machine: number;
  containersSeen: number;
}

/** Measures the CPU of one phase: containers whose name or namespace label `owns` are counted. */
export class CpuMeter {
  readonly #docker: Docker;
  readonly #owns: (name: string, labels: Record<string, string>) => boolean;
  readonly #tracked = new Map<string, Tracked>();
  #events: NodeJS.ReadableStream | undefined;
  #timer: NodeJS.Timeout | undefined;
  #sampling: Promise<void> = Promise.resolve();
  #start: { self: number; dockerd: number; containerd: number; machine: number } | undefined;
  #enginePids: { dockerd: number[]; containerd: number[] } = { dockerd: [], containerd: [] };

  constructor(docker: Docker, owns: (name: string, labels: Record<string, string>) => boolean) {
    this.#docker = docker;
    this.#owns = owns;
  }

  async #sum(pids: number[]): Promise<number> {
    let sum = 0;
    for (const pid of pids) sum += (await processSeconds(pid)) ?? 0;
    return sum;
  }

  async start(): Promise<void> {
    this.#enginePids = {
      dockerd: await pidsNamed(['dockerd']),
      containerd: await pidsNamed(['containerd']),
    };
    const events = (await this.#docker.getEvents({
      filters: { type: ['container'], event: ['start'] },
    })) as NodeJS.ReadableStream;
    this.#events = events;
    let buffered = '';
    events.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('utf8');
      let newline = buffered.indexOf('\n');
      while (newline >= 0) {
        const line = buffered.slice(0, newline);
        buffered = buffered.slice(newline + 1);
        newline = buffered.indexOf('\n');
        if (line.trim() === '') continue;
        const event = JSON.parse(line) as {
          id?: string;
          Actor?: { ID: string; Attributes?: Record<string, string> };
        };
        const id = event.Actor?.ID ?? event.id;
        const attributes = event.Actor?.Attributes ?? {};
        if (id === undefined || !this.#owns(attributes.name ?? '', attributes)) continue;
        if (!this.#tracked.has(id)) {
          this.#tracked.set(id, { done: false, shimPid: null, shimSeconds: 0, cgroupSeconds: 0 });
          void this.#findShim(id);
        }
      }
    });
    events.on('error', () => {});
    this.#start = {
      self: (await processSeconds('self')) ?? 0,
      dockerd: await this.#sum(this.#enginePids.dockerd),
      containerd: await this.#sum(this.#enginePids.containerd),
      machine: await machineSeconds(),
    };
    this.#timer = setInterval(() => {
      this.#sampling = this.#sampling.then(() => this.#sample());
    }, SAMPLE_MS);
  }

  /** The shim of a container: the containerd-shim process whose command line names it. */
  async #findShim(id: string): Promise<void> {
    for (const pid of await pidsNamed(['containerd-shim', 'containerd-shim-runc-v2'])) {
      const cmdline = readOrNull(`/proc/${pid}/cmdline`) ?? '';
      if (cmdline.split('\0').includes(id)) {
        const tracked = this.#tracked.get(id);
        if (tracked !== undefined) tracked.shimPid = pid;
        return;
      }
    }
  }

  async #sample(): Promise<void> {
    for (const [id, tracked] of this.#tracked) {
      if (!tracked.done) {
        const usage = readOrNull(`/sys/fs/cgroup/cpuacct/docker/${id}/cpuacct.usage`);
        if (usage !== null) tracked.cgroupSeconds = Math.max(tracked.cgroupSeconds, Number(usage) / 1e9);
        else tracked.done = true;
      }
      if (tracked.shimPid !== null) {
        const seconds = await processSeconds(tracked.shimPid);
        if (seconds !== null) tracked.shimSeconds = Math.max(tracked.shimSeconds, seconds);
        else tracked.shimPid = null;
      }
    }
  }

  async stop(): Promise<CpuReading> {
    clearInterval(this.#timer);
    await this.#sampling;
    await this.#sample();
    (this.#events as unknown as Duplex | undefined)?.destroy();
    const start = this.#start!;
    const self = ((await processSeconds('self')) ?? 0) - start.self;
    const dockerd = (await this.#sum(this.#enginePids.dockerd)) - start.dockerd;
    const containerd = (await this.#sum(this.#enginePids.containerd)) - start.containerd;
    let shims = 0;
    let containers = 0;
    for (const tracked of this.#tracked.values()) {
      shims += tracked.shimSeconds;
      containers += tracked.cgroupSeconds;
    }
    return {
      self,
      dockerd,
      containerd,
      shims,
      containers,
      total: self + dockerd + containerd + shims + containers,
      machine: (await machineSeconds()) - start.machine,
      containersSeen: this.#tracked.size,
    };
  }
}

export interface FloorTask {
  instance_id: string;
  image: string;
  workdir: string;
  base_commit: string;
  patch: string;
  test_patch: string;
  test_command: string;
}

/** Runs one command in a container to its end: stdout and the exit code. */
async function execIn(docker: Docker, container: Docker.Container, command: string, workdir: string) {
  const exec = await container.exec({
    Cmd: ['sh', '-c', command],
    WorkingDir: workdir,
    AttachStdout: true,
    AttachStderr: true,
  });
  const stream = (await exec.start({ hijack: true, stdin: false })) as Duplex;
  const stdout: Buffer[] = [];
  const stderr: Buffer[] = [];
  await new Promise<void>((resolve, reject) => {
    docker.modem.demuxStream(
      stream,
      { write: (chunk: Buffer) => stdout.push(chunk) } as unknown as NodeJS.WritableStream,
      { write: (chunk: Buffer) => stderr.push(chunk) } as unknown as NodeJS.WritableStream,
    );
    stream.on('end', resolve);
    stream.on('error', reject);
  });
  const { ExitCode } = await exec.inspect();
  if (ExitCode !== 0)
    throw new Error(
      `floor: "${command.slice(0, 80)}" exited ${ExitCode}: ${Buffer.concat(stderr).toString()}`,
    );
  return Buffer.concat(stdout).toString('utf8');
}

const applyCommand = (patch: string) =>
  `echo ${Buffer.from(patch).toString('base64')} | base64 -d > /tmp/floor.patch && git apply /tmp/floor.patch`;

async function startContainer(docker: Docker, name: string, task: FloorTask): Promise<Docker.Container> {
  const container = await docker.createContainer({
    name,
    Image: task.image,
    Entrypoint: ['sleep'],
    Cmd: ['infinity'],
    WorkingDir: task.workdir,
    HostConfig: { NanoCpus: 1e9, Memory: 1024 * 1024 * 1024, PidsLimit: 512, NetworkMode: 'none' },
  });
  await container.start();
  return container;
}

/** One rollout's unavoidable work; the test log must show the FAIL_TO_PASS tests passing. */
export async function runFloor(
  docker: Docker,
  prefix: string,
  task: FloorTask,
  index: number,
): Promise<string> {
  const containers: Docker.Container[] = [];
  try {
    const agent = await startContainer(docker, `${prefix}-agent-${index}`, task);
    containers.push(agent);
    await execIn(docker, agent, applyCommand(task.patch), task.workdir);
    const diff = await execIn(
      docker,
      agent,
      `git add -A && git diff --cached --binary ${task.base_commit}`,
      task.workdir,
    );
    const grader = await startContainer(docker, `${prefix}-grade-${index}`, task);
    containers.push(grader);
    await execIn(docker, grader, applyCommand(diff), task.workdir);
    await execIn(docker, grader, applyCommand(task.test_patch), task.workdir);
    return await execIn(docker, grader, task.test_command, task.workdir);
  } finally {
    await Promise.all(containers.map((container) => container.remove({ force: true }).catch(() => {})));
  }
}

/** One engine API call as counted: its method and its path with ids taken out. */
function callKind(method: string, path: string): string {
  const bare = path
    .replace(/^\/v[\d.]+\//, '/')
    .replace(/\?.*$/, '')
    .replace(/^\/(containers|exec|images)\/(?!create$|json$)[^/]+/, '/$1/{id}');
  return `${method} ${bare}`;
}

/**
 * Counts the engine API calls this process makes through dockerode, by kind: every dockerode
 * client (the daemon's provider's and the floor's) dials through docker-modem's one prototype, so
 * wrapping its `dial` sees them all. Counting costs a map update per call.
 */
export class EngineCallCounter {
  readonly #counts = new Map<string, number>();
  #restore: (() => void) | undefined;

  constructor(modemPrototype: DockerModem) {
    const original = modemPrototype.dial;
    const counts = this.#counts;
    modemPrototype.dial = function (this: DockerModem, options, callback) {
      const kind = callKind(options.method ?? '?', options.path ?? '?');
      counts.set(kind, (counts.get(kind) ?? 0) + 1);
      return original.call(this, options, callback);
    };
    this.#restore = () => {
      modemPrototype.dial = original;
    };
  }

  /** The counts since the last take, by kind, and zeroes them. */
  take(): Record<string, number> {
    const taken = Object.fromEntries([...this.#counts].sort(([a], [b]) => a.localeCompare(b)));
    this.#counts.clear();
    return taken;
  }

  close(): void {
    this.#restore?.();
  }
}
