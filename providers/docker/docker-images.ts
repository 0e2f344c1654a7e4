/**
 * The Docker provider's image part (`prepareImage`, `inspectImage`, `listImages`): a root
 * filesystem becomes an image through the engine's import endpoint (`docker import`), a derived
 * image through a container of its base that gets the files and the command and is committed,
 * a build plan likewise with its steps in order and committed with its settings.
 * Nothing here needs a registry. Build containers run commands from datasets (a Dockerfile's RUN
 * lines, a task's setup), so they run with no network, under cpu, memory and pids limits, and
 * within a deadline after which they are removed, by the build or by the next daemon's sweep.
 */
import { randomBytes } from 'node:crypto';
import { PassThrough, type Readable } from 'node:stream';
import type Docker from 'dockerode';
import * as tar from 'tar-stream';
import type { Clock } from '../../core/clock.ts';
import { GymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import type {
  DerivedImageSource,
  ImageFilter,
  ImageInfo,
  ImagePlanSettings,
  ImageSource,
  PlanImageSource,
  RootfsImageSource,
} from '../sandbox-provider.ts';
import { OOM_COUNTER_COMMAND, parseOomKillCount, SIGKILL_EXIT_CODE } from '../shared/exec-output.ts';
import { SYSTEM_LABELS } from '../shared/labels.ts';
import { runPlanSteps } from '../shared/plan-steps.ts';
import { engineStatus, wrapDockerError } from './docker-errors.ts';

/** The label every sandbox container carries (docker-provider.ts's prefix), and no build container. */
const SANDBOX_NAMESPACE_LABEL = `gym.${SYSTEM_LABELS.namespace}`;

/** `repo:tag` split at the tag's colon (a registry host's port colon comes before a slash). */
export function splitReference(reference: string): { repo: string; tag: string } {
  const separator = reference.lastIndexOf(':');
  const hasTag = separator > reference.lastIndexOf('/');
  return hasTag
    ? { repo: reference.slice(0, separator), tag: reference.slice(separator + 1) }
    : { repo: reference, tag: 'latest' };
}

/** An image config as the Dockerfile instructions the import and commit endpoints take. */
export function dockerfileChanges(config: Partial<ImagePlanSettings>): string[] {
  return [
    ...Object.entries(config.env ?? {}).map(([name, value]) => `ENV ${name}=${JSON.stringify(value)}`),
    ...(config.workdir === undefined ? [] : [`WORKDIR ${config.workdir}`]),
    ...(config.user === undefined ? [] : [`USER ${config.user}`]),
    ...(config.entrypoint === undefined || config.entrypoint.length === 0
      ? []
      : [`ENTRYPOINT ${JSON.stringify(config.entrypoint)}`]),
    ...(config.cmd === undefined || config.cmd.length === 0 ? [] : [`CMD ${JSON.stringify(config.cmd)}`]),
    ...Object.entries(config.labels ?? {}).map(
      ([name, value]) => `LABEL ${JSON.stringify(name)}=${JSON.stringify(value)}`,
    ),
  ];
}

/** An image config's ENTRYPOINT or CMD as a list (the engine may give a string or null). */
function asList(value: string | string[] | null | undefined): string[] | undefined {
  if (value === undefined || value === null) return undefined;
  return typeof value === 'string' ? [value] : value;
}

function filesTar(files: Record<string, string>): Readable {
  const pack = tar.pack();
  for (const [path, content] of Object.entries(files)) pack.entry({ name: path, mode: 0o644 }, content);
  pack.finalize();
  return pack as unknown as Readable;
}

/** How long a derived image's command may run; its container's keeper lives a minute longer. */
const DERIVE_TIMEOUT_SECONDS = 540;

/** How much longer than its build's time limit a build container's keeper lives. */
const KEEPER_SLACK_SECONDS = 60;

/**
 * On a build container: the reference it builds. Not proof that a container is one: a commit
 * copies the container's labels into the image, so every sandbox of a built image carries this
 * label and the deadline below too (see {@link isBuildContainerName}). Earlier daemons used
 * `gym.image-build` and `gym.image-build-deadline-at` and removed whatever carried them past the
 * deadline: keys of their own keep the sandboxes of images built now out of such a daemon's reach.
 */
export const BUILD_LABEL = 'gym.build-reference';

/**
 * A build container's name: this prefix and 16 hex digits. A name is the one mark of a container
 * that its image does not pass on, and no sandbox has one like it (sandbox names are
 * `gym-<namespace>-<id>`, and a namespace has no dot).
 */
const BUILD_NAME_PREFIX = 'gym.image-build.';

/** Whether an engine's name of a container (`/name`, as listings give it) is a build container's. */
export function isBuildContainerName(name: string): boolean {
  return /^\/?gym\.image-build\.[0-9a-f]{16}$/.test(name);
}

export function buildContainerName(): string {
  return `${BUILD_NAME_PREFIX}${randomBytes(8).toString('hex')}`;
}

/**
 * On a build container: when its keeper ends (epoch milliseconds), after which nothing waits for
 * it and a daemon's start removes it (see `sweepLeftovers`).
 */
export const BUILD_DEADLINE_LABEL = 'gym.build-deadline-at';

/** The longest a build container without a deadline label (an older daemon's) may live: a plan's longest time limit. */
const UNLABELLED_BUILD_MAX_MS = (24 * 3600 + KEEPER_SLACK_SECONDS) * 1000;

/** The cpu, memory and pids limits of every build container. */
export interface BuildLimits {
  cpus: number;
  memoryMiB: number;
  pidsLimit: number;
}

/** How long a build waits for a container removal already under way to finish. */
const REMOVAL_WAIT_MS = 30_000;

/**
 * A plan's default time limit (a plan may set its own); its container's keeper lives a minute
 * longer, so a daemon killed mid-build leaves the container behind for at most that long.
 */
const PLAN_TIMEOUT_SECONDS = 900;

export class DockerImages {
  readonly #docker: Docker;
  readonly #logger: Logger;
  readonly #limits: BuildLimits;
  readonly #clock: Clock;

  constructor(docker: Docker, logger: Logger, limits: BuildLimits, clock: Clock) {
    this.#docker = docker;
    this.#logger = logger;
    this.#limits = limits;
    this.#clock = clock;
  }

  /**
   * `sweepLeftovers` as the daemon's start runs it: never throws; an engine that does not answer
   * is logged, and the next start tries again.
   */
  async sweepLeftoversLogged(): Promise<void> {
    try {
      const removed = await this.sweepLeftovers();
      if (removed > 0)
        this.#logger.info({ removed }, 'removed image-build containers left past their deadline');
    } catch (error) {
      this.#logger.warn({ error: String(error) }, 'could not sweep image-build containers');
    }
  }

  /**
   * Removes the build containers past their keeper's deadline, whichever daemon made them. A build
   * removes its own container when it ends, and the engine removes one whose keeper ended; what is
   * left past the deadline is a daemon's that died: one it made but never started (auto-remove
   * acts only on exit), or one whose keeper (the base image's own `sleep`, which a dataset
   * chooses) did not end. Returns how many it removed.
   *
   * A build container is told by its name, never by its labels alone: every sandbox of a built
   * image inherits the build's labels, its deadline long past, and a daemon's start once removed
   * another live daemon's sandboxes (a user's `docker run` of the image too) as leftovers.
   */
  async sweepLeftovers(): Promise<number> {
    let containers: Docker.ContainerInfo[];
    try {
      containers = await this.#docker.listContainers({ all: true, filters: { label: [BUILD_LABEL] } });
    } catch (error) {
      throw wrapDockerError(error, { operation: 'list build containers' });
    }
    const now = this.#clock.now();
    let removed = 0;
    for (const info of containers) {
      // Only what this code made as a build container (its name says so). A container inherits
      // its image's labels, and images built before build containers were named carry their build
      // container's (docker commit keeps them): sandboxes of those show the build label and a
      // long-past deadline, and removing them here killed live sandboxes of other daemons.
      if (!(info.Names ?? []).some(isBuildContainerName)) continue;
      if (info.Labels?.[SANDBOX_NAMESPACE_LABEL] !== undefined) continue;
      const labelled = Number(info.Labels?.[BUILD_DEADLINE_LABEL]);
      const deadline = Number.isFinite(labelled) ? labelled : info.Created * 1000 + UNLABELLED_BUILD_MAX_MS;
      if (deadline > now) continue;
      try {
        await this.#docker.getContainer(info.Id).remove({ force: true });
        removed += 1;
      } catch (error) {
        const status = engineStatus(error);
        if (status !== 404 && status !== 409)
          throw wrapDockerError(error, { operation: 'remove build container' });
      }
    }
    return removed;
  }

  /** A build container's engine settings: no network, no log, removed when its keeper ends, limited. */
  #buildHostConfig(): Docker.HostConfig {
    const memory = this.#limits.memoryMiB * 1024 * 1024;
    return {
      NetworkMode: 'none',
      AutoRemove: true,
      LogConfig: { Type: 'none', Config: {} },
      Memory: memory,
      MemorySwap: memory,
      NanoCpus: Math.round(this.#limits.cpus * 1e9),
      PidsLimit: this.#limits.pidsLimit,
    };
  }

  /** A build container's labels: what it builds and when its keeper ends. */
  #buildLabels(reference: string, keeperSeconds: number): Record<string, string> {
    return {
      'gym.role': 'image-build',
      [BUILD_LABEL]: reference,
      [BUILD_DEADLINE_LABEL]: String(this.#clock.now() + keeperSeconds * 1000),
    };
  }

  /**
   * Runs a build in its container within `timeoutSeconds`, then removes the container. Past the
   * deadline the build fails and the container is removed at once, which ends whatever step was
   * running in it.
   */
  async #bounded(
    container: Docker.Container,
    reference: string,
    timeoutSeconds: number,
    build: (timedOut: () => boolean) => Promise<void>,
  ): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    let timedOut = false;
    let removal: Promise<void> | undefined;
    const deadline = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => {
        timedOut = true;
        reject(
          new GymError('VALIDATION_FAILED', `building ${reference} ran past ${timeoutSeconds} s`, {
            details: { timeoutSeconds },
          }),
        );
        removal = this.#removeBuildContainer(container, 'an image build');
      }, timeoutSeconds * 1000);
    });
    try {
      const steps = build(() => timedOut);
      steps.catch(() => {});
      await Promise.race([steps, deadline]);
    } catch (error) {
      throw wrapDockerError(error, { operation: 'build image', image: reference });
    } finally {
      clearTimeout(timer);
      await (removal ?? this.#removeBuildContainer(container, 'an image build'));
    }
  }

  async inspect(reference: string): Promise<ImageInfo | null> {
    try {
      const image = await this.#docker.getImage(reference).inspect();
      return {
        reference,
        labels: image.Config?.Labels ?? {},
        sizeBytes: image.Size,
        createdAt: new Date(image.Created).toISOString(),
        ...(image.Config?.WorkingDir ? { workdir: image.Config.WorkingDir } : {}),
        ...((asList(image.Config?.Entrypoint as string | string[] | null) ?? []).length > 0
          ? { entrypoint: asList(image.Config?.Entrypoint as string | string[] | null)! }
          : {}),
        ...((asList(image.Config?.Cmd as string | string[] | null) ?? []).length > 0
          ? { command: asList(image.Config?.Cmd as string | string[] | null)! }
          : {}),
      };
    } catch (error) {
      if (engineStatus(error) === 404) return null;
      throw wrapDockerError(error, { operation: 'inspect image', image: reference });
    }
  }

  async list(filter: ImageFilter = {}): Promise<ImageInfo[]> {
    let images: Docker.ImageInfo[];
    try {
      images = await this.#docker.listImages(
        filter.labelKeys === undefined || filter.labelKeys.length === 0
          ? {}
          : { filters: { label: filter.labelKeys } },
      );
    } catch (error) {
      throw wrapDockerError(error, { operation: 'list images' });
    }
    return images
      .flatMap((image) =>
        (image.RepoTags ?? [])
          .filter((reference) => reference !== '<none>:<none>')
          .map((reference) => ({
            reference,
            labels: image.Labels ?? {},
            sizeBytes: image.Size,
            createdAt: new Date(image.Created * 1000).toISOString(),
          })),
      )
      .sort(
        (left, right) =>
          right.createdAt.localeCompare(left.createdAt) || left.reference.localeCompare(right.reference),
      );
  }

  async prepare(source: ImageSource): Promise<void> {
    if (source.format === 'rootfs') await this.#import(source);
    else if (source.format === 'derived') await this.#derive(source);
    else if (source.format === 'plan') await this.#plan(source);
    else {
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        `the docker provider cannot prepare images of format "${(source as { format: string }).format}"`,
        { details: { provider: 'docker', capability: 'imageFormats' } },
      );
    }
  }

  /** `docker import`: the tar stream goes straight into the engine, the config as Dockerfile changes. */
  async #import(source: RootfsImageSource): Promise<void> {
    const { repo, tag } = splitReference(source.reference);
    try {
      const response = (await this.#docker.importImage(
        source.rootfs as never,
        { repo, tag, changes: dockerfileChanges(source.config) } as never,
      )) as unknown as Readable;
      await new Promise<void>((resolve, reject) => {
        this.#docker.modem.followProgress(
          response,
          (error: Error | null, events: Array<{ error?: string }>) => {
            const failed = events?.find((event) => event.error);
            if (error || failed)
              reject(
                new GymError('PROVIDER_ERROR', `image import failed: ${error?.message ?? failed?.error}`),
              );
            else resolve();
          },
        );
      });
      for (const alias of source.aliases ?? []) {
        await this.#docker.getImage(source.reference).tag(splitReference(alias));
      }
    } catch (error) {
      throw wrapDockerError(error, { operation: 'import image', image: source.reference });
    }
  }

  /**
   * A build container of the base, the files written, the command run, the container committed
   * under the reference with the labels added.
   */
  async #derive(source: DerivedImageSource): Promise<void> {
    const keeperSeconds = DERIVE_TIMEOUT_SECONDS + KEEPER_SLACK_SECONDS;
    let container: Docker.Container;
    try {
      container = await this.#docker.createContainer({
        name: buildContainerName(),
        Image: source.base,
        Entrypoint: ['sh', '-c', `sleep ${keeperSeconds}`],
        Cmd: [],
        WorkingDir: source.workdir,
        HostConfig: this.#buildHostConfig(),
        Labels: this.#buildLabels(source.reference, keeperSeconds),
      });
    } catch (error) {
      throw wrapDockerError(error, { operation: 'derive image', image: source.base });
    }
    await this.#bounded(container, source.reference, DERIVE_TIMEOUT_SECONDS, async (timedOut) => {
      await container.start();
      await this.#run(container, `mkdir -p '${source.workdir.replaceAll("'", `'\\''`)}'`, '/', {});
      await container.putArchive(filesTar(source.files), { path: source.workdir });
      await this.#run(container, source.command, source.workdir, source.env);
      if (timedOut()) return;
      const { repo, tag } = splitReference(source.reference);
      await container.commit({ repo, tag, changes: dockerfileChanges({ labels: source.labels }) } as never);
    });
  }

  /**
   * Removes a build container and returns only once it is gone. A removal already under way (the
   * engine's auto-remove when the keeper ends, or the deadline's own removal) answers 409: then
   * wait for the engine to finish it, so a caller that lists containers next sees none.
   */
  async #removeBuildContainer(container: Docker.Container, what: string): Promise<void> {
    try {
      await container.remove({ force: true });
      return;
    } catch (error) {
      if (engineStatus(error) === 404) return;
      if (engineStatus(error) !== 409) {
        this.#logger.warn({ error: String(error) }, `could not remove the container of ${what}`);
        return;
      }
    }
    const waited = await Promise.race([
      container.wait({ condition: 'removed' }).then(
        () => true,
        (error: unknown) => engineStatus(error) === 404,
      ),
      new Promise<false>((resolve) => setTimeout(resolve, REMOVAL_WAIT_MS, false).unref()),
    ]);
    if (!waited)
      this.#logger.warn(
        { what },
        `the container of ${what} was still being removed after ${REMOVAL_WAIT_MS} ms`,
      );
  }

  /**
   * A container of the base (no network, no log, removed when its keeper ends), each step run
   * or unpacked in order, the container committed under the reference with the settings. The
   * keeper takes the command, unless the base has an entrypoint (which would run it), and then
   * the entrypoint; the commit writes back whichever it replaced.
   */
  async #plan(source: PlanImageSource): Promise<void> {
    let base: Docker.ImageInspectInfo;
    try {
      base = await this.#docker.getImage(source.base).inspect();
    } catch (error) {
      if (engineStatus(error) === 404)
        throw new GymError('IMAGE_NOT_FOUND', `the base image "${source.base}" is not on this machine`, {
          details: { image: source.base },
        });
      throw wrapDockerError(error, { operation: 'build image', image: source.base });
    }
    const baseEntrypoint = asList(base.Config?.Entrypoint as string | string[] | null) ?? [];
    const baseCmd = asList(base.Config?.Cmd as string | string[] | null) ?? [];
    const baseWorkdir = base.Config?.WorkingDir || '/';
    const baseUser = base.Config?.User || '0';
    const timeoutSeconds = source.timeoutSeconds ?? PLAN_TIMEOUT_SECONDS;
    const keeperSeconds = timeoutSeconds + KEEPER_SLACK_SECONDS;
    const keeper = ['sh', '-c', `sleep ${keeperSeconds}`];
    let container: Docker.Container;
    try {
      container = await this.#docker.createContainer({
        name: buildContainerName(),
        Image: source.base,
        ...(baseEntrypoint.length > 0 ? { Entrypoint: keeper, Cmd: [] } : { Cmd: keeper }),
        User: '0',
        HostConfig: this.#buildHostConfig(),
        Labels: this.#buildLabels(source.reference, keeperSeconds),
      });
    } catch (error) {
      throw wrapDockerError(error, { operation: 'build image', image: source.base });
    }
    await this.#bounded(container, source.reference, timeoutSeconds, async (timedOut) => {
      await container.start();
      await runPlanSteps(
        source.steps,
        { workdir: baseWorkdir, user: baseUser },
        {
          run: (argv, { cwd, env, user }) => this.#run(container, argv, cwd, env, user),
          unpack: async (path, archive) => {
            await container.putArchive(archive as never, { path });
          },
        },
      );
      if (timedOut()) return;
      const { repo, tag } = splitReference(source.reference);
      const { settings } = source;
      await container.commit({
        repo,
        tag,
        changes: dockerfileChanges({
          ...settings,
          entrypoint: settings.entrypoint ?? baseEntrypoint,
          cmd: settings.cmd ?? baseCmd,
        }),
      } as never);
    });
  }

  /** Runs a command in the build container; a non-zero exit is VALIDATION_FAILED with its output's tail. */
  async #run(
    container: Docker.Container,
    command: string | string[],
    workdir: string,
    env: Record<string, string>,
    user?: string,
  ): Promise<void> {
    const { exitCode, tail } = await this.#exec(container, command, workdir, env, user);
    if (exitCode === 0) return;
    const shown = typeof command === 'string' ? command : JSON.stringify(command);
    const limits = this.#limits;
    const outOfMemory =
      exitCode === SIGKILL_EXIT_CODE &&
      ((await this.#exec(container, OOM_COUNTER_COMMAND, '/', {}, '0').then(
        (counter) => parseOomKillCount(counter.tail),
        () => null,
      )) ?? 0) > 0;
    throw new GymError(
      'VALIDATION_FAILED',
      `the image's command ${outOfMemory ? `ran out of the build's ${limits.memoryMiB} MiB of memory and was killed` : `failed with exit ${exitCode}`} (${shown.slice(0, 1000)}); builds here have no network and at most ${limits.cpus} cpus, ${limits.memoryMiB} MiB and ${limits.pidsLimit} processes: ${tail}`,
      {
        details: { command: shown.slice(0, 1000), exitCode, ...(outOfMemory ? { reason: 'oom' } : {}) },
      },
    );
  }

  /** Runs a command in the build container: its exit code and the last 4000 characters of its output. */
  async #exec(
    container: Docker.Container,
    command: string | string[],
    workdir: string,
    env: Record<string, string>,
    user?: string,
  ): Promise<{ exitCode: number | null; tail: string }> {
    const argv = typeof command === 'string' ? ['sh', '-c', command] : command;
    const exec = await container.exec({
      Cmd: argv,
      WorkingDir: workdir,
      Env: Object.entries(env).map(([key, value]) => `${key}=${value}`),
      ...(user === undefined ? {} : { User: user }),
      AttachStdout: true,
      AttachStderr: true,
    });
    const stream = (await exec.start({ hijack: true, stdin: false })) as unknown as Readable;
    const output = new PassThrough();
    let tail = '';
    output.on('data', (chunk: Buffer) => {
      tail = (tail + chunk.toString('utf8')).slice(-4000);
    });
    this.#docker.modem.demuxStream(stream, output, output);
    await new Promise<void>((resolve) => {
      stream.once('end', resolve);
      stream.once('close', resolve);
    });
    const { ExitCode } = await exec.inspect();
    return { exitCode: ExitCode, tail };
  }
}
