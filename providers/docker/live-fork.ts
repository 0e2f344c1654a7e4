/**
 * Live snapshots on Docker under gVisor (`liveFork`, docs/snapshots.md): the guest kernel's
 * checkpoint holds the sandbox's memory and processes; the commit of the stopped container holds
 * its files. Children are created from the commit and started from a copy of the checkpoint.
 *
 * What the engine and runsc do, measured on this machine (Docker 20.10, Debian's runsc, ptrace):
 * - `docker checkpoint` needs the engine started with `--experimental`; `--leave-running` fails
 *   under runsc and ends the container, so the checkpoint stops the parent, which then starts
 *   again from its own checkpoint (its processes carry on where they were).
 * - A start names a checkpoint only in the container's own `checkpoints/` folder under the
 *   engine's root directory (`--checkpoint-dir` is refused), so the daemon copies it there: it
 *   must run on the engine's host.
 * - A process holding a host file descriptor (the output stream of an exec that has ended, as
 *   `cmd &` without a redirect leaves) checkpoints, but its restore fails: the parent could not
 *   come back. Such processes are looked for first, and the snapshot is refused before the
 *   parent is touched.
 *
 * - runsc 20221219 (Debian's) leaves its state of a container that had itself been started from
 *   a checkpoint behind when that container is checkpointed again: marked paused, its sandbox
 *   process gone. The next start of the container is then refused ("id already in use"), so a
 *   parent could be forked live only once. After each checkpoint such a stale state (its
 *   sandbox's and gofer's processes both gone) is removed (`clearStaleRuntimeState`); with a
 *   runsc that cleans up after itself there is none to remove.
 *
 * While a parent is stopped for its checkpoint (well under a second) its operations wait at the
 * gate (`whenOpen`), and the listing shows it ready, so no reconcile takes the stop for a death.
 * A live snapshot is refused while a command runs in the sandbox: its stream would break.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { cp, mkdir, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type Docker from 'dockerode';
import { GymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import type { SnapshotResult } from '../sandbox-provider.ts';
import { wrapDockerError } from './docker-errors.ts';

/** Where runsc keeps its state of the engine's containers (dockerd's exec root, the shim's runtime root, the engine's namespace). */
export const RUNSC_STATE_ROOT = '/run/docker/runtime-runc/moby';

/** Where dockerd, started without TMPDIR (as systemd and scripts/setup.sh start it), makes its temporary folders. */
export const ENGINE_TEMP_DIRECTORY = '/tmp';

/** A checkpoint download folder of the engine older than this is done with (a start takes about a second). */
export const ENGINE_LEFTOVER_AGE_MS = 60_000;

/**
 * Removes the engine's checkpoint download folders (`ctrd-checkpoint*`) in `directory` last
 * changed more than `olderThanMs` ago: Docker 20.10 makes one on every start from a checkpoint
 * and never removes it. A younger one may belong to a start still running (of this provider or
 * another on the host) and is left. Returns how many it removed.
 */
export async function sweepEngineLeftovers(
  directory: string,
  olderThanMs = ENGINE_LEFTOVER_AGE_MS,
  nowMs = Date.now(),
): Promise<number> {
  let removed = 0;
  for (const entry of await readdir(directory).catch(() => [] as string[])) {
    if (!entry.startsWith('ctrd-checkpoint')) continue;
    const path = join(directory, entry);
    const changed = await stat(path).then(
      (found) => (found.isDirectory() ? found.mtimeMs : null),
      () => null,
    );
    if (changed === null || nowMs - changed <= olderThanMs) continue;
    await rm(path, { recursive: true, force: true }).catch(() => {});
    removed += 1;
  }
  return removed;
}

function isAlive(pid: unknown): boolean {
  if (typeof pid !== 'number' || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Removes runsc's state of container `containerId` when it is stale: the container was just
 * checkpointed (so nothing of it runs) and neither the sandbox's nor the gofer's process is
 * alive. Returns whether it removed one.
 */
export async function clearStaleRuntimeState(stateRoot: string, containerId: string): Promise<boolean> {
  if (!/^[0-9a-f]{64}$/.test(containerId)) return false;
  const base = join(stateRoot, `${containerId}_sandbox:${containerId}`);
  let state: { sandbox?: { pid?: unknown }; goferPid?: unknown };
  try {
    state = JSON.parse(await readFile(`${base}.state`, 'utf8')) as typeof state;
  } catch {
    return false;
  }
  if (isAlive(state.sandbox?.pid) || isAlive(state.goferPid)) return false;
  await rm(`${base}.state`, { force: true });
  await rm(`${base}.lock`, { force: true });
  return true;
}

/** The names this provider gives checkpoints (its managed snapshot ids): nothing else is looked up or removed. */
const CHECKPOINT_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;

/** The engine's root directory, from its `info`. */
function rootDirectory(info: { DockerRootDir?: string }): string {
  return info.DockerRootDir ?? '/var/lib/docker';
}

/** Whether `path` is there (a directory, with `directory`). */
function exists(path: string, directory = false): Promise<boolean> {
  return stat(path).then(
    (found) => !directory || found.isDirectory(),
    () => false,
  );
}

/** How long the scan is retried while it finds holders (a session shell that was just closed exits). */
const SCAN_SETTLE_MS = 2_000;

export interface LiveSnapshotSteps {
  /**
   * `pid comm` of the processes holding a host file descriptor, as the exec helper lists them
   * (`guestHostFdHolders`); null when the listing did not finish.
   */
  scan(): Promise<string[] | null>;
  /** Commits the stopped container (the snapshot's files). */
  commit(): Promise<SnapshotResult>;
  /** The most bytes the snapshot may hold (the commit, the checkpoint and `/tmp`); past it `SNAPSHOT_TOO_LARGE`. */
  maxBytes?: number | undefined;
  /** The image the commit makes (a crash leaves it for `resumeInterrupted` to remove). */
  image: string;
  /** Removes the commit again when a later step fails. */
  removeImage(image: string): Promise<void>;
  /** The container runs again (from its checkpoint or not): what starts anew with it. */
  restarted(): void;
}

/** What a live snapshot in progress writes first, so a daemon that dies meanwhile can make good. */
interface InterruptedSnapshot {
  sandboxId: string;
  /** The engine's id of the parent's container. */
  container: string;
  /** The image its commit makes. */
  image: string;
}

const INTERRUPTED_SUFFIX = '.interrupted.json';

function interruptedMarker(store: string, name: string): string {
  return join(store, `${name}${INTERRUPTED_SUFFIX}`);
}

/** Where a live snapshot's copy of the guest's `/tmp` is kept, beside its checkpoint. */
function tmpArchive(store: string, name: string): string {
  return join(store, `${name}.tmp.tar`);
}

/**
 * Keeps the stopped container's `/tmp` (a volume under gVisor, so neither committed nor in the
 * checkpoint; a restored process with a file open there would fail its restore) as a tar at
 * `file`, 0600. Bounded while it is written: past `maxBytes` less `alreadyBytes` it stops, removes
 * the file and throws `SNAPSHOT_TOO_LARGE`, so an agent's big /tmp never lands on the daemon's
 * disk whole. Returns its size.
 */
async function keepTmp(
  id: string,
  container: Docker.Container,
  file: string,
  maxBytes: number | undefined,
  alreadyBytes: number,
): Promise<number> {
  const allowed = maxBytes === undefined ? Number.POSITIVE_INFINITY : maxBytes - alreadyBytes;
  let written = 0;
  const bound = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      written += chunk.length;
      if (written > allowed)
        done(
          new GymError(
            'SNAPSHOT_TOO_LARGE',
            `sandbox ${id}'s live snapshot with its /tmp is past the snapshot limit of ${maxBytes} bytes`,
            { details: { sandboxId: id, maxBytes } },
          ),
        );
      else done(null, chunk);
    },
  });
  try {
    const archive = (await container.getArchive({ path: '/tmp' })) as NodeJS.ReadableStream;
    await pipeline(archive, bound, createWriteStream(file, { mode: 0o600 }));
  } catch (error) {
    await rm(file, { force: true }).catch(() => {});
    throw error instanceof GymError
      ? error
      : wrapDockerError(error, { operation: 'snapshot /tmp', sandboxId: id });
  }
  return written;
}

/** The engine's checkpoint calls, which dockerode makes but does not type. */
interface CheckpointCalls {
  createCheckpoint(options: { CheckpointID: string; Exit: boolean }): Promise<unknown>;
  deleteCheckpoint(name: string): Promise<unknown>;
  start(options: { _query: { checkpoint: string }; _body: Record<string, never> }): Promise<unknown>;
}

function checkpoints(container: Docker.Container): CheckpointCalls {
  return container as unknown as CheckpointCalls;
}

async function directoryBytes(path: string): Promise<number> {
  let total = 0;
  for (const entry of await readdir(path, { withFileTypes: true })) {
    const child = join(path, entry.name);
    if (entry.isDirectory()) total += await directoryBytes(child);
    else if (entry.isFile()) total += (await stat(child)).size;
  }
  return total;
}

export class LiveForks {
  readonly #docker: Docker;
  /** The checkpoints kept for live snapshots, a folder each named by its checkpoint. */
  readonly #store: string;
  readonly #logger: Logger;
  /** Sandboxes stopped for their checkpoint: operations wait for the promise. */
  readonly #closed = new Map<string, Promise<void>>();
  /** Commands running per sandbox. */
  readonly #running = new Map<string, number>();
  /**
   * The last start from a checkpoint: such starts go one at a time. The engine uploads the
   * checkpoint to containerd on each start, and two uploads of the same content at once fail the
   * second ("content ... already exists"); one after the other both work.
   */
  #lastStart: Promise<void> = Promise.resolve();
  #rootDirectory: Promise<string> | undefined;

  /** runsc's state directory of the engine's containers (`RUNSC_STATE_ROOT` unless a test says). */
  readonly #stateRoot: string;
  /** The engine's temporary directory (`ENGINE_TEMP_DIRECTORY` unless a test says). */
  readonly #engineTemp: string;

  constructor(
    docker: Docker,
    store: string,
    logger: Logger,
    paths: { stateRoot?: string; engineTemp?: string } = {},
  ) {
    this.#docker = docker;
    this.#store = store;
    this.#logger = logger;
    this.#stateRoot = paths.stateRoot ?? RUNSC_STATE_ROOT;
    this.#engineTemp = paths.engineTemp ?? ENGINE_TEMP_DIRECTORY;
  }

  /** Why a live snapshot cannot be made on this engine, or null. */
  async unavailable(): Promise<string | null> {
    let info: { ExperimentalBuild?: boolean; DockerRootDir?: string };
    try {
      info = await this.#docker.info();
    } catch (error) {
      return wrapDockerError(error, { operation: 'info' }).message;
    }
    if (info.ExperimentalBuild !== true)
      return 'the Docker engine runs without --experimental, which checkpoints need (scripts/setup.sh starts it so)';
    const root = rootDirectory(info);
    if (!(await exists(join(root, 'containers'), true)))
      return `the engine's root directory ${root} is not on this host: a checkpoint is started from a copy the daemon puts there`;
    this.#rootDirectory = Promise.resolve(root);
    return null;
  }

  isClosed(id: string): boolean {
    return this.#closed.has(id);
  }

  /** Resolves when sandbox `id` is not stopped for a checkpoint. */
  whenOpen(id: string): Promise<void> {
    return this.#closed.get(id) ?? Promise.resolve();
  }

  /** Runs a command's (or a transfer's) call past the gate, counted, so a live snapshot sees it running. */
  async running<T>(id: string, call: () => Promise<T>): Promise<T> {
    for (let closed = this.#closed.get(id); closed !== undefined; closed = this.#closed.get(id)) await closed;
    this.#running.set(id, (this.#running.get(id) ?? 0) + 1);
    try {
      return await call();
    } finally {
      const left = (this.#running.get(id) ?? 1) - 1;
      if (left <= 0) this.#running.delete(id);
      else this.#running.set(id, left);
    }
  }

  /**
   * Checkpoints container `container` of sandbox `id` as `name`, commits it, keeps a copy of the
   * checkpoint, and starts the container again from it.
   * @throws GymError `CAPABILITY_UNSUPPORTED` (the engine cannot), `SANDBOX_NOT_READY` (a command
   *   runs, or a process holds a stream of one that ended; nothing was touched), what the commit
   *   throws (the container runs again first), `PROVIDER_ERROR`.
   */
  async snapshot(
    id: string,
    container: Docker.Container,
    name: string,
    steps: LiveSnapshotSteps,
  ): Promise<SnapshotResult> {
    const reason = await this.unavailable();
    if (reason !== null)
      throw new GymError('CAPABILITY_UNSUPPORTED', `no live snapshot of sandbox ${id}: ${reason}`, {
        details: { capability: 'liveFork', sandboxId: id, reason },
      });
    // One live snapshot of a sandbox at a time: no await between the last look and the claim.
    for (let closed = this.#closed.get(id); closed !== undefined; closed = this.#closed.get(id)) await closed;
    let open: () => void = () => {};
    this.#closed.set(
      id,
      new Promise<void>((resolve) => {
        open = resolve;
      }),
    );
    try {
      const running = this.#running.get(id) ?? 0;
      if (running > 0)
        throw new GymError(
          'SANDBOX_NOT_READY',
          `sandbox ${id} has ${running} command(s) or transfer(s) running; a live snapshot stops the sandbox for a moment and would break their streams: retry when they end`,
          { details: { sandboxId: id, running, retryable: true } },
        );
      await this.#requireNoHostStreams(id, steps);
      // Until the parent runs again: a daemon killed meanwhile finds it at its next start.
      const marker = interruptedMarker(this.#store, name);
      await mkdir(this.#store, { recursive: true, mode: 0o700 });
      const record: InterruptedSnapshot = { sandboxId: id, container: container.id, image: steps.image };
      await writeFile(marker, JSON.stringify(record), { mode: 0o600 });
      try {
        return await this.#checkpointed(id, container, name, steps);
      } finally {
        await rm(marker, { force: true });
      }
    } finally {
      this.#closed.delete(id);
      open();
    }
  }

  /**
   * What a daemon killed during a live snapshot left (its marker names them): the parent,
   * stopped by its checkpoint, starts again from it (else without its processes, else it is left
   * for the reconcile to find dead); the half-made snapshot (its image, its checkpoint and /tmp
   * copies) is removed, since no record of it was written. Run before the daemon's first
   * reconcile, which would take a stopped parent for a dead one. Returns the sandboxes resumed.
   */
  async resumeInterrupted(removeImage: (image: string) => Promise<void>): Promise<string[]> {
    const resumed: string[] = [];
    for (const entry of await readdir(this.#store).catch(() => [] as string[])) {
      if (!entry.endsWith(INTERRUPTED_SUFFIX)) continue;
      const name = entry.slice(0, -INTERRUPTED_SUFFIX.length);
      const marker = join(this.#store, entry);
      let record: InterruptedSnapshot;
      try {
        record = JSON.parse(await readFile(marker, 'utf8')) as InterruptedSnapshot;
      } catch {
        await rm(marker, { force: true });
        continue;
      }
      const container = this.#docker.getContainer(record.container);
      const info = await container.inspect().catch(() => null);
      if (info !== null && !info.State.Running) {
        await this.#clearStale(record.sandboxId, info.Id);
        const restarted = () => {};
        const hasCheckpoint = await exists(
          join(await this.#root(), 'containers', info.Id, 'checkpoints', name),
        );
        if (hasCheckpoint) await this.#restart(record.sandboxId, container, name, restarted).catch(() => {});
        else await this.#startPlain(record.sandboxId, container, restarted);
        if (await this.#isRunning(container)) resumed.push(record.sandboxId);
        this.#logger.warn(
          { sandboxId: record.sandboxId, fromCheckpoint: hasCheckpoint },
          'started a sandbox again that a live snapshot had stopped when the daemon died',
        );
      }
      await removeImage(record.image).catch(() => {});
      await this.remove(name);
      await rm(marker, { force: true });
    }
    return resumed;
  }

  async #requireNoHostStreams(id: string, steps: LiveSnapshotSteps): Promise<void> {
    const deadline = Date.now() + SCAN_SETTLE_MS;
    for (;;) {
      const holders = await steps.scan();
      if (holders === null)
        throw new GymError(
          'PROVIDER_ERROR',
          `could not look for processes that block a live snapshot of sandbox ${id}: the exec helper's listing did not finish (a helper older than this daemon?)`,
          { details: { sandboxId: id } },
        );
      if (holders.length === 0) return;
      if (Date.now() >= deadline)
        throw new GymError(
          'SANDBOX_NOT_READY',
          `sandbox ${id} cannot be snapshotted live: process(es) ${holders.join(', ')} hold the output of a command that has ended, which gVisor cannot restore; start background processes with their output redirected (cmd >file 2>&1 </dev/null &) or stop them`,
          { details: { sandboxId: id, processes: holders, retryable: false } },
        );
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  async #checkpointed(
    id: string,
    container: Docker.Container,
    name: string,
    steps: LiveSnapshotSteps,
  ): Promise<SnapshotResult> {
    const root = await this.#root();
    const containerId = (await container.inspect()).Id;
    const source = join(root, 'containers', containerId, 'checkpoints', name);
    const kept = join(this.#store, name);
    const keptTmp = tmpArchive(this.#store, name);
    try {
      await checkpoints(container).createCheckpoint({ CheckpointID: name, Exit: true });
    } catch (error) {
      await this.#clearStale(id, containerId);
      await this.#startPlain(id, container, steps.restarted);
      throw wrapDockerError(error, { operation: 'checkpoint', sandboxId: id });
    }
    await this.#clearStale(id, containerId);
    let made: SnapshotResult;
    try {
      made = await steps.commit();
    } catch (error) {
      await this.#restart(id, container, name, steps.restarted);
      throw error;
    }
    try {
      await rm(kept, { recursive: true, force: true });
      await cp(source, kept, { recursive: true, preserveTimestamps: true });
      const bytes = (made.sizeBytes ?? 0) + (await directoryBytes(kept));
      const tmpBytes = await keepTmp(id, container, keptTmp, steps.maxBytes, bytes);
      await this.#restart(id, container, name, steps.restarted);
      return { ...made, sizeBytes: bytes + tmpBytes, checkpoint: name };
    } catch (error) {
      await rm(kept, { recursive: true, force: true }).catch(() => {});
      await rm(keptTmp, { force: true }).catch(() => {});
      await steps.removeImage(made.image).catch(() => {});
      // From its checkpoint when it can (its processes kept), else without them.
      if (!(await this.#isRunning(container)))
        await this.#restart(id, container, name, steps.restarted).catch(() => {});
      throw error instanceof GymError
        ? error
        : new GymError('PROVIDER_ERROR', `live snapshot of sandbox ${id} failed: ${String(error)}`, {
            details: { sandboxId: id },
            cause: error,
          });
    }
  }

  async #clearStale(id: string, containerId: string): Promise<void> {
    if (await clearStaleRuntimeState(this.#stateRoot, containerId).catch(() => false))
      this.#logger.debug({ sandboxId: id }, "removed runsc's stale state of a checkpointed sandbox");
  }

  /** Starts the parent from its own checkpoint and drops that checkpoint. */
  async #restart(id: string, container: Docker.Container, name: string, restarted: () => void) {
    try {
      await this.#startFrom(container, name);
    } catch (error) {
      await this.#startPlain(id, container, restarted);
      throw new GymError(
        'PROVIDER_ERROR',
        `sandbox ${id} could not resume from its checkpoint and was started again without its processes: ${wrapDockerError(error, { operation: 'restore', sandboxId: id }).message}`,
        { details: { sandboxId: id, processesLost: true }, cause: error },
      );
    } finally {
      await checkpoints(container)
        .deleteCheckpoint(name)
        .catch(() => {});
    }
    restarted();
  }

  /** The last resort for a parent that did not come back: its files, a fresh keeper. */
  async #startPlain(id: string, container: Docker.Container, restarted: () => void): Promise<void> {
    if (await this.#isRunning(container)) return;
    try {
      await container.start();
      restarted();
      this.#logger.warn(
        { sandboxId: id },
        'live snapshot failed; the sandbox was started without its processes',
      );
    } catch (error) {
      this.#logger.warn(
        { sandboxId: id, error: String(error) },
        'live snapshot failed and the sandbox could not be started again; it will be found dead',
      );
    }
  }

  async #isRunning(container: Docker.Container): Promise<boolean> {
    return container.inspect().then(
      (info) => info.State.Running,
      () => false,
    );
  }

  async #root(): Promise<string> {
    this.#rootDirectory ??= this.#docker.info().then(rootDirectory);
    return this.#rootDirectory;
  }

  /**
   * Starts the created container `container` from kept checkpoint `name`.
   * @throws what the engine throws (the caller removes the container).
   */
  async restore(container: Docker.Container, name: string): Promise<void> {
    if (!CHECKPOINT_NAME.test(name))
      throw new GymError('VALIDATION_FAILED', `${name} is not a checkpoint this provider made`);
    const kept = join(this.#store, name);
    if (!(await exists(kept, true)))
      throw new GymError('SNAPSHOT_NOT_FOUND', `the checkpoint of live snapshot ${name} is gone`, {
        details: { checkpoint: name },
      });
    const containerId = (await container.inspect()).Id;
    const target = join(await this.#root(), 'containers', containerId, 'checkpoints', name);
    await mkdir(join(target, '..'), { recursive: true, mode: 0o700 });
    await cp(kept, target, { recursive: true, preserveTimestamps: true });
    // The guest's /tmp is a volume of its own under gVisor: not in the commit, so given back here.
    const keptTmp = tmpArchive(this.#store, name);
    if (await exists(keptTmp)) await container.putArchive(createReadStream(keptTmp), { path: '/' });
    await this.#startFrom(container, name);
    // The engine keeps the copy with the container; it is not needed once the guest runs.
    await checkpoints(container)
      .deleteCheckpoint(name)
      .catch(() => {});
  }

  /**
   * Starts `container` from its checkpoint `name`, one such start at a time, after removing the
   * folders earlier starts left in the engine's temporary directory (`sweepEngineLeftovers`: 768
   * KiB each for an idle busybox, the guest's memory for a busy one).
   */
  #startFrom(container: Docker.Container, name: string): Promise<void> {
    const start = this.#lastStart.then(async () => {
      await sweepEngineLeftovers(this.#engineTemp);
      // Starts go one at a time here, but not across daemons (or test files) on one engine: an
      // identical checkpoint (two idle sandboxes of one image) uploaded by another at the same
      // moment fails this one with "already exists", and tried again it works. The engine may
      // have gone on with that start all the same: a try after it that finds the container
      // started (304) finds it started from this checkpoint, the only start asked of it.
      for (let attempt = 1; ; attempt += 1) {
        try {
          await checkpoints(container).start({ _query: { checkpoint: name }, _body: {} });
          return;
        } catch (error) {
          if (attempt > 1 && (error as { statusCode?: number }).statusCode === 304) return;
          if (attempt >= 3 || !/already exists/.test(String((error as Error).message))) throw error;
          await new Promise((resolve) => setTimeout(resolve, 500 * attempt));
        }
      }
    });
    this.#lastStart = start.then(
      () => {},
      () => {},
    );
    return start;
  }

  /** Removes kept checkpoint `name` (idempotent). */
  async remove(name: string): Promise<void> {
    if (!CHECKPOINT_NAME.test(name)) return;
    await rm(join(this.#store, name), { recursive: true, force: true });
    await rm(tmpArchive(this.#store, name), { force: true });
  }
}
