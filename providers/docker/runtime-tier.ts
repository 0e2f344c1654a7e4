/**
 * The OCI runtime a Docker provider runs its sandboxes under, and what it changes in our
 * guarantees (docs/isolation-tiers.md has the table, with the measured costs).
 *
 * `runc` (the engine's default) shares the host kernel: the daemon confines and kills a command's
 * processes from the host through cgroup v2, and relays the gateway into the sandbox's network
 * namespace. gVisor's `runsc` puts a user-space kernel (the sentry) between the sandbox and the
 * host, which changes these things:
 *
 * - The host sees the sentry, not the guest's processes: the host pid of a `docker exec` is a
 *   proxy (killing it leaves the guest's processes running), and the sandbox has no cgroup v2
 *   directory of its own. A timeout is therefore killed inside the guest: each command runs
 *   traced by the exec helper (`--traced`, every process it starts traced from birth and killed
 *   by the guest kernel when the tracer dies), the timeout kills the tracer, and the whole
 *   sandbox is killed from outside when that does not take effect: `timeoutKill: 'traced'`. Stopping every process but the keeper
 *   is done by the keeper itself, inside the guest (`stopGuestProcesses`).
 * - The host's pids and memory cgroups hold the sentry's own threads and memory (an idle sandbox
 *   uses 37-40 pids and about 11 MiB more): the limits the engine is given are the spec's plus
 *   that overhead, so a spec's `pidsLimit: 30` still starts and a guest gets what it asked for.
 * - An exec over the memory limit kills the whole sandbox (the host's OOM killer takes the
 *   sentry), where runc kills only the exec: the provider reports that as the sandbox lost to its
 *   own memory use (`sandboxLost`, reason below), never `sandbox_gone`.
 *
 * - A process inside can kill the sandbox's PID 1 (the keeper) with SIGKILL, which this gVisor
 *   delivers from PID 1's own pid namespace where Linux ignores it: the sandbox ends, reported as
 *   lost by what ran in it (`keeperKillable`), never `sandbox_gone`.
 *
 * And the gateway relay listens on the loopback of the sandbox's host network namespace, which a
 * guest on gVisor's own network stack (`--network=none`) does not share: `gatewayReach: false`.
 */
import type Docker from 'dockerode';
import type { ExecRequest, ExecResult } from '../../core/schemas/exec.ts';
import type { ExecOptions } from '../sandbox-provider.ts';
import { DockerStreamDemuxer } from './demux.ts';

/** Runtime arguments gVisor needs on our hosts (see `gvisorRuntimeProblems`). */
export const GVISOR_REQUIRED_ARGS = ['--platform=ptrace', '--network=none', '--file-access=shared'] as const;

/**
 * Pids the host cgroup of a gVisor sandbox needs beyond what its guest runs: the sentry's and the
 * gofer's own threads (37-40 idle, measured), with room for the threads each exec adds.
 */
export const GVISOR_PIDS_OVERHEAD = 64;

/** Memory the host cgroup of a gVisor sandbox needs beyond its guest's: the sentry's own (about 11 MiB measured), doubled. */
export const GVISOR_MEMORY_OVERHEAD_MIB = 24;

/**
 * The `reason` of a command whose gVisor sandbox ended by SIGKILL with no kill from the engine: the
 * host's OOM killer took its kernel, or a process inside killed the sandbox's PID 1 (gVisor, unlike
 * Linux, delivers a SIGKILL to PID 1 from its own pid namespace: `keeperKillable`). The engine's
 * record is the same for both.
 */
export const GVISOR_OOM_REASON =
  "the sandbox's gVisor kernel ended by SIGKILL with no kill from the engine: the sandbox used all of its memory and the host's OOM killer ended it (under gVisor a command over the memory limit takes the whole sandbox, not only itself), or a process inside killed the sandbox's PID 1 (which gVisor lets it do); so the sandbox died";

/** The `reason` of a command whose gVisor sandbox ended otherwise with no stop from the engine. */
export const GVISOR_LIMIT_REASON =
  "the sandbox's gVisor kernel ended with no stop from the engine: its processes outran the sandbox's pids or memory limit, which under gVisor takes the whole sandbox";

/** What one runtime changes in the Docker provider's behaviour. */
export interface RuntimeTier {
  /** The runtime's name as the engine knows it; `runc` for the engine's default. */
  runtime: string;
  /** The sandbox runs on a kernel of its own (gVisor): the host sees none of its processes. */
  hasGuestKernel: boolean;
  /** Added to a spec's `pidsLimit` in the engine's limit. */
  pidsOverhead: number;
  /** Added to a spec's `memoryMiB` in the engine's limit. */
  memoryOverheadMiB: number;
  /** Why the host cannot confine or stop the sandbox's processes itself; undefined when it can. */
  hostControlGap: string | undefined;
}

/** Whether a runtime's name (or the path the engine runs it from) is gVisor's `runsc`. */
export function isGvisorRuntime(runtime: string | undefined): boolean {
  return runtime !== undefined && /(^|\/)runsc([-.].*)?$/.test(runtime);
}

/** The tier of the provider's `runtime` option (undefined: the engine's default, runc). */
export function runtimeTier(runtime: string | undefined): RuntimeTier {
  if (!isGvisorRuntime(runtime))
    return {
      runtime: runtime ?? 'runc',
      hasGuestKernel: false,
      pidsOverhead: 0,
      memoryOverheadMiB: 0,
      hostControlGap: undefined,
    };
  return {
    runtime: runtime!,
    hasGuestKernel: true,
    pidsOverhead: GVISOR_PIDS_OVERHEAD,
    memoryOverheadMiB: GVISOR_MEMORY_OVERHEAD_MIB,
    hostControlGap: `the sandboxes run under gVisor (runtime ${runtime}): the host sees its kernel, not the guest's processes`,
  };
}

/** The engine's view of a configured runtime, from `docker info`'s `Runtimes`. */
interface EngineRuntime {
  path?: string;
  runtimeArgs?: string[];
}

/**
 * What is wrong with how the engine registered `runtime` (an empty list: nothing): it is not
 * registered, or, for gVisor, lacks an argument without which it does not work here (`ptrace` is
 * the only platform that ran, `kvm` hung and wedged `docker rm -f`; the default network mode
 * refuses to start in the host's network namespace; and with the default `exclusive` file access
 * the guest never sees a file the engine's archive upload wrote: `writeFile` would be lost).
 */
export function runtimeProblems(
  runtime: string,
  runtimes: Record<string, EngineRuntime> | undefined,
): string[] {
  const registered = runtimes?.[runtime];
  if (registered === undefined)
    return [
      `the engine has no runtime "${runtime}" (it has ${Object.keys(runtimes ?? {}).join(', ') || 'none'}); register it in /etc/docker/daemon.json ("runtimes") and send dockerd SIGHUP (scripts/setup.sh does)`,
    ];
  if (!isGvisorRuntime(runtime) && !isGvisorRuntime(registered.path)) return [];
  const args = registered.runtimeArgs ?? [];
  const problems = GVISOR_REQUIRED_ARGS.filter((required) => !args.includes(required)).map(
    (missing) => `runtime "${runtime}" lacks the argument ${missing}`,
  );
  if (args.some((arg) => /^--platform=(kvm|systrap)$/.test(arg)))
    problems.push(`runtime "${runtime}" names a platform other than ptrace (kvm hung here)`);
  return problems;
}

/** The runtime problems the engine behind `docker` shows for `runtime` (see `runtimeProblems`). */
export async function checkEngineRuntime(docker: Docker, runtime: string): Promise<string[]> {
  const info = (await docker.info()) as { Runtimes?: Record<string, EngineRuntime> };
  return runtimeProblems(runtime, info.Runtimes);
}

/**
 * Whether the engine itself killed or stopped the container between `since` and now (a `kill`
 * event: `docker kill`, `stop`, `rm -f`, a daemon's destroy). A gVisor sandbox that ended by
 * SIGKILL with no such event was killed by the host's kernel: its memory cgroup's OOM killer,
 * which the engine does not flag as an OOM kill for this runtime.
 */
export async function engineKilled(docker: Docker, containerId: string, since: Date): Promise<boolean> {
  const stream = (await docker.getEvents({
    since: Math.floor(since.getTime() / 1000) - 1,
    until: Math.ceil(Date.now() / 1000) + 1,
    filters: { container: [containerId], event: ['kill', 'stop'] },
  })) as NodeJS.ReadableStream;
  let text = '';
  for await (const chunk of stream) text += chunk.toString();
  return text.trim() !== '';
}

/** How long stopping a guest's processes may take before it counts as failed. */
const GUEST_STOP_WAIT_MS = 10_000;

/** One exec of the helper's process listing inside the sandbox: its lines, or null when the exec was killed. */
async function listGuestProcesses(
  container: Docker.Container,
  helperPath: string,
  listing: '--others' | '--host-fd-holders' = '--others',
): Promise<string[] | null> {
  const exec = await container.exec({
    Cmd: [helperPath, listing],
    AttachStdout: true,
    AttachStderr: true,
    User: '0',
  });
  const stream = (await exec.start({ hijack: true, stdin: false })) as NodeJS.ReadableStream;
  let text = '';
  const demuxer = new DockerStreamDemuxer((name, payload) => {
    if (name === 'stdout') text += payload.toString('utf8');
  });
  await new Promise<void>((resolve, reject) => {
    stream.on('data', (chunk: Buffer) => demuxer.push(chunk));
    stream.on('end', resolve);
    stream.on('close', resolve);
    stream.on('error', reject);
  });
  const inspected = await exec.inspect();
  if (inspected.ExitCode !== 0) return null;
  const lines = text.split('\n').filter((line) => line !== '');
  return lines;
}

/**
 * Stops every process of a gVisor sandbox but its keeper, from inside the guest: the keeper (the
 * exec helper as PID 1) kills all the others when the engine sends it SIGUSR1, which nothing in
 * the sandbox can send it or resist. Returns how many processes ran before; throws when some still
 * run after {@link GUEST_STOP_WAIT_MS}. The listing is the helper's own (`--others`), not the
 * sandbox's `ps`.
 */
export async function stopGuestProcesses(container: Docker.Container, helperPath: string): Promise<number> {
  const before = await listGuestProcesses(container, helperPath);
  await container.kill({ signal: 'SIGUSR1' });
  const deadline = performance.now() + GUEST_STOP_WAIT_MS;
  for (;;) {
    // An exec that starts while the keeper is still killing is killed with the rest: asked again.
    const left = await listGuestProcesses(container, helperPath).catch(() => null);
    if (left !== null && left.length === 0) return before?.length ?? 0;
    if (performance.now() > deadline)
      throw new Error(`${left?.length ?? 'some'} processes still ran in the sandbox after stopping them`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The command lines running in a gVisor sandbox besides its keeper, as the exec helper lists them. */
export async function guestCommandLines(container: Docker.Container, helperPath: string): Promise<string[]> {
  const lines = await listGuestProcesses(container, helperPath);
  if (lines === null) throw new Error('the process listing in the sandbox did not finish');
  return lines.map((line) => line.slice(line.indexOf(' ') + 1));
}

/**
 * Whether the engine still starts a command in the container: the exec helper (the host's
 * read-only binary, which nothing in the sandbox can replace or fake) lists its processes.
 */
export function helperAnswers(container: Docker.Container, helperPath: string): Promise<boolean> {
  return listGuestProcesses(container, helperPath).then(
    (lines) => lines !== null,
    () => false,
  );
}

/**
 * `pid comm` of the guest's processes (but the keeper) that hold a host file descriptor, as the
 * helper lists them (`--host-fd-holders`); null when the listing did not finish (an older helper).
 */
export function guestHostFdHolders(
  container: Docker.Container,
  helperPath: string,
): Promise<string[] | null> {
  return listGuestProcesses(container, helperPath, '--host-fd-holders');
}

/**
 * Runs one exec of a gVisor sandbox while watching the sandbox itself: when the sandbox ends first
 * (destroyed, or taken by the host's OOM killer), the exec is cancelled and the answer is `ended`,
 * for the caller to say why. Under gVisor an exec's stream does not end with its sandbox (the
 * runtime's exec waits on a kernel that is gone), so without this a command whose sandbox died
 * would run on until its own timeout and be reported as one.
 */
export async function watchSandboxEnd(
  container: Docker.Container,
  options: ExecOptions,
  run: (options: ExecOptions) => Promise<ExecResult>,
): Promise<ExecResult | 'ended'> {
  const cancel = new AbortController();
  const stopWatching = new AbortController();
  const forward = () => cancel.abort();
  if (options.signal?.aborted) cancel.abort();
  else options.signal?.addEventListener('abort', forward, { once: true });
  const ended = container.wait({ condition: 'not-running', abortSignal: stopWatching.signal }).then(
    () => 'ended' as const,
    // A container already removed has ended too; a watch we stopped says nothing.
    (error: { statusCode?: number }) => (error.statusCode === 404 ? ('ended' as const) : null),
  );
  const running = run({ ...options, signal: cancel.signal });
  try {
    const sandboxEnd = (async (): Promise<ExecResult | 'ended'> => (await ended) ?? running)();
    const first = await Promise.race([running, sandboxEnd]);
    if (first !== 'ended') return first;
    cancel.abort();
    running.catch(() => {});
    return 'ended';
  } finally {
    stopWatching.abort();
    options.signal?.removeEventListener('abort', forward);
  }
}

/**
 * Under gVisor a one-shot command starts through the exec helper's `--traced` (gym-exec.c): its
 * timeout kills all it started; it drops the capabilities the runtime gives a non-root user's
 * first process, and refuses a working directory that is a file (the runtime would use `/`).
 */
export function tracedLaunch(request: ExecRequest, helperPath: string): ExecRequest {
  const { command: _command, ...rest } = request;
  return {
    ...rest,
    argv: [helperPath, '--traced', request.cwd ?? '', ...(request.argv ?? ['sh', '-c', request.command!])],
  };
}
