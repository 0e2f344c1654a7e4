/**
 * The images Harbor rows run in, made by the daemon's provider (whatever its backend): each task's
 * environment/Dockerfile translated into a build plan (dockerfile.ts) and sent with its build
 * context to `POST /v1/images`, once per distinct image, before any rollout; a prebuilt
 * `docker_image` must exist already (nothing is pulled). No registry and no BuildKit: the
 * provider runs each RUN in a container of the base with no network, unpacks each COPY, and
 * commits the Dockerfile's settings.
 */
import { createWriteStream } from 'node:fs';
import { lstat, mkdtemp, readdir, readFile, readlink, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, posix, resolve, sep } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import * as tar from 'tar-stream';
import type { GymClient } from '../../../client/client.ts';
import { GymError } from '../../../core/errors.ts';
import type { Logger } from '../../../core/logger.ts';
import type { ImagePlanRequest } from '../../../core/schemas/image.ts';
import { IMAGE_DEFINITIONS, IMAGE_REPOSITORY_PREFIX } from '../../../images/definitions.ts';
import { type BuildStep, type DockerfilePlan, parseDockerfile, planDockerfile } from './dockerfile.ts';

/** What building needs of the daemon's client. */
export type ImageClient = Pick<GymClient, 'inspectImage' | 'prepareImage' | 'buildImagePlan'>;

/** The base images this machine can make itself, for the error that names a missing one. */
export const LOCAL_BASES = IMAGE_DEFINITIONS.map(
  (definition) => `${IMAGE_REPOSITORY_PREFIX}${definition.name}:latest (${definition.description})`,
);

export interface DockerfileBuildRequest {
  /** The Dockerfile's text. */
  dockerfile: string;
  /** The build context (a Harbor task's environment/ folder). */
  contextDirectory: string;
  /** The reference to give the image (`gym/<name>:<tag>`); a build is skipped when it exists. */
  reference: string;
  buildArgs?: Record<string, string>;
  /** The whole build (task.toml's build_timeout_sec); default: the provider's. */
  timeoutSeconds?: number;
}

/**
 * Makes each distinct image of the rows, one after the other. A task whose image cannot be made
 * (a RUN that fails, a base or a docker_image this machine lacks) gets `refused` with the reason,
 * it and every row of the same image: the run writes them as failure lines and runs the rest. An
 * error that is not the task's (the daemon gone) is thrown.
 */
export async function buildHarborImages(
  client: ImageClient,
  /** Their `workdir` is set to the image's working directory. */
  rows: ReadonlyArray<Record<string, unknown>>,
  logger: Logger,
  options: {
    /** Before each distinct image is looked at (and built, when the row builds one). */
    onStart?: (reference: string, index: number, total: number) => void;
    onImage?: (reference: string, built: boolean, durationMs: number) => void;
  } = {},
): Promise<void> {
  const total = new Set(rows.map((row) => String(row.image))).size;
  const workdirs = new Map<string, { workdir?: string | undefined; entrypoint?: string[] | undefined }>();
  const failed = new Map<string, string>();
  for (const row of rows) {
    const reference = String(row.image);
    if (workdirs.has(reference) || failed.has(reference)) continue;
    options.onStart?.(reference, workdirs.size + failed.size, total);
    try {
      workdirs.set(reference, await prepareRowImage(client, row, reference, logger, options.onImage));
    } catch (error) {
      if (!(error instanceof GymError) || !TASK_IMAGE_ERRORS.has(error.code)) throw error;
      logger.warn({ task: row.id, image: reference }, error.message);
      failed.set(reference, error.message);
    }
  }
  for (const row of rows) {
    const reason = failed.get(String(row.image));
    if (reason !== undefined) {
      row.refused = reason;
      continue;
    }
    // The agent and test.sh start where the image says (a prebuilt image's WORKDIR is known only now).
    const { workdir, entrypoint } = workdirs.get(String(row.image)) ?? {};
    if (row.workdir_from_task !== true && typeof workdir === 'string' && workdir.startsWith('/'))
      row.workdir = workdir;
    // Harbor keeps the image's ENTRYPOINT (only its CMD gives way to a keepalive): it runs too.
    if (entrypoint !== undefined && entrypoint.length > 0) row.entrypoint = entrypoint;
  }
}

/**
 * The codes of a failure that is the task's own (its Dockerfile, its base, its image): that task
 * fails, the others run. A provider that failed mid-build is the task's too: a RUN can crash a
 * build container, and the next task's build says whether the provider is really gone.
 */
const TASK_IMAGE_ERRORS = new Set([
  'VALIDATION_FAILED',
  'IMAGE_NOT_FOUND',
  'PROVIDER_ERROR',
  'PROVIDER_TIMEOUT',
]);

const isInside = (folder: string, path: string) => path === folder || path.startsWith(folder + sep);

/** Builds (when the row builds one) and inspects a row's image; its working directory. */
async function prepareRowImage(
  client: ImageClient,
  row: Record<string, unknown>,
  reference: string,
  logger: Logger,
  onImage?: (reference: string, built: boolean, durationMs: number) => void,
): Promise<{ workdir?: string | undefined; entrypoint?: string[] | undefined }> {
  const started = Date.now();
  if (row.build === true) {
    const taskDir = String(row.task_dir);
    // A JSONL row names its task folder (checked to be beside the file): what is built must be in it.
    for (const field of ['build_context', 'dockerfile'] as const) {
      const path = row[field];
      if (path !== undefined && (typeof path !== 'string' || !isInside(taskDir, resolve(path))))
        throw new GymError(
          'VALIDATION_FAILED',
          `task ${String(row.id)}: ${field} is not inside its task folder ${taskDir}`,
        );
    }
    const result = await buildDockerfileImage(
      client,
      {
        dockerfile: await readFile(
          typeof row.dockerfile === 'string' ? row.dockerfile : join(taskDir, 'environment', 'Dockerfile'),
          'utf8',
        ),
        contextDirectory:
          typeof row.build_context === 'string' ? row.build_context : join(taskDir, 'environment'),
        reference,
        timeoutSeconds: Number(row.build_timeout_sec ?? 600),
      },
      logger,
    ).catch((error: unknown) => {
      if (error instanceof GymError)
        throw new GymError(error.code, `task ${String(row.id)} (${taskDir}): ${error.message}`, {
          details: error.details,
          cause: error,
        });
      throw error;
    });
    onImage?.(reference, result.built, Date.now() - started);
  }
  const info = await client.inspectImage(reference);
  if (info === null)
    throw new GymError(
      'IMAGE_NOT_FOUND',
      `task ${String(row.id)} names the image "${reference}" (task.toml docker_image), which the provider does not have; nothing is pulled here: load it (docker load -i FILE.tar), or remove docker_image to build environment/Dockerfile`,
      { details: { image: reference } },
    );
  if (row.build !== true) onImage?.(reference, false, 0);
  return { workdir: info.workdir, entrypoint: info.entrypoint };
}

/**
 * The base's working directory (where RUN starts before any WORKDIR), building it first when it
 * is one of our own definitions; and the base as the daemon names it (a definition's name).
 */
async function resolveBase(client: ImageClient, base: string): Promise<{ base: string; workdir: string }> {
  const [repository, tag = 'latest'] = base.split(/:(?=[^/]*$)/);
  const definition = IMAGE_DEFINITIONS.find(
    (candidate) => `${IMAGE_REPOSITORY_PREFIX}${candidate.name}` === repository && tag === 'latest',
  );
  if (definition !== undefined) {
    const built = await client.prepareImage({ kind: 'definition', name: definition.name });
    const info = await client.inspectImage(built.images.at(-1)?.reference ?? base);
    return { base: definition.name, workdir: info?.workdir || '/' };
  }
  const info = await client.inspectImage(base);
  if (info === null)
    throw new GymError(
      'IMAGE_NOT_FOUND',
      `the base image "${base}" (FROM) is not on this machine, and no registry is reachable to pull it: load it (docker load -i FILE.tar) or start FROM a base this machine has or builds: ${LOCAL_BASES.join('; ')}`,
      { details: { image: base } },
    );
  return { base, workdir: info.workdir || '/' };
}

/** Adds a context file or folder to the tar at `name` (relative to the step's path), as root. */
async function addToTar(pack: tar.Pack, source: string, name: string): Promise<void> {
  const info = await lstat(source);
  const header = { name, uid: 0, gid: 0, mtime: info.mtime, mode: info.mode & 0o7777 };
  if (info.isSymbolicLink()) {
    pack.entry({ ...header, type: 'symlink', linkname: await readlink(source) });
  } else if (info.isDirectory()) {
    pack.entry({ ...header, type: 'directory' });
    for (const child of (await readdir(source)).sort())
      await addToTar(pack, join(source, child), posix.join(name, child));
  } else {
    pack.entry(header, await readFile(source));
  }
}

/**
 * One COPY as a files step: its tar (the sources; a folder's contents, not the folder itself, as
 * Docker copies) written to `tarPath`, unpacked at the destination folder.
 */
async function copyStep(
  step: Extract<BuildStep, { kind: 'copy' }>,
  contextDirectory: string,
  tarPath: string,
): Promise<Extract<ImagePlanRequest['steps'][number], { kind: 'files' }>> {
  const isDirectory = step.destination.endsWith('/');
  const destination = isDirectory ? step.destination.slice(0, -1) || '/' : step.destination;
  const sources: Array<{ source: string; path: string; isDirectory: boolean }> = [];
  for (const source of step.sources) {
    const path = join(contextDirectory, source);
    const info = await lstat(path).catch(() => {
      throw new GymError(
        'VALIDATION_FAILED',
        `Dockerfile line ${step.line}: COPY ${source}: no such file in the build context`,
      );
    });
    sources.push({ source, path, isDirectory: info.isDirectory() });
  }
  const pack = tar.pack();
  const written = pipeline(Readable.from(pack as AsyncIterable<Buffer>), createWriteStream(tarPath));
  try {
    for (const { source, path, isDirectory: isFolder } of sources) {
      if (isFolder) {
        for (const child of (await readdir(path)).sort()) await addToTar(pack, join(path, child), child);
      } else {
        await addToTar(pack, path, isDirectory ? posix.basename(source) : posix.basename(destination));
      }
    }
    pack.finalize();
  } catch (error) {
    pack.destroy(error as Error);
    await written.catch(() => {});
    throw error;
  }
  await written;
  return {
    kind: 'files',
    path: isDirectory ? destination : posix.dirname(destination),
    ...(step.chown === undefined ? {} : { chown: step.chown }),
    ...(step.chmod === undefined ? {} : { chmod: step.chmod }),
  };
}

/**
 * Builds the image unless the provider has `reference`. Errors: IMAGE_NOT_FOUND for a base the
 * provider lacks; VALIDATION_FAILED for a Dockerfile outside the subset, a missing COPY source,
 * or a step that fails (named by its Dockerfile line).
 */
export async function buildDockerfileImage(
  client: ImageClient,
  request: DockerfileBuildRequest,
  logger: Logger,
): Promise<{ reference: string; built: boolean; plan: DockerfilePlan }> {
  const instructions = parseDockerfile(request.dockerfile);
  const firstPlan = planDockerfile(instructions, request.buildArgs);
  if ((await client.inspectImage(request.reference)) !== null)
    return { reference: request.reference, built: false, plan: firstPlan };
  const base = await resolveBase(client, firstPlan.base);
  const plan = planDockerfile(instructions, request.buildArgs, base.workdir);
  for (const { keyword, line } of plan.ignored)
    logger.debug({ keyword, line }, 'Dockerfile instruction without effect on a sandbox');
  const directory = await mkdtemp(join(tmpdir(), 'gym-harbor-context-'));
  try {
    const archives = new Map<number, { path: string }>();
    const steps: ImagePlanRequest['steps'] = [];
    for (const step of plan.steps) {
      if (step.kind === 'workdir') steps.push({ kind: 'run', argv: ['mkdir', '-p', step.path], user: '0' });
      else if (step.kind === 'run')
        steps.push({
          kind: 'run',
          argv: step.argv,
          workdir: step.workdir,
          env: step.env,
          ...(step.user === undefined ? {} : { user: step.user }),
        });
      else {
        const path = join(directory, `step-${steps.length}.tar`);
        archives.set(steps.length, { path });
        steps.push(await copyStep(step, request.contextDirectory, path));
      }
    }
    await client
      .buildImagePlan(
        {
          kind: 'plan',
          reference: request.reference,
          base: base.base,
          steps,
          settings: plan.settings,
          ...(request.timeoutSeconds === undefined ? {} : { timeoutSeconds: request.timeoutSeconds }),
        },
        archives,
      )
      .catch((error: unknown) => {
        const index = error instanceof GymError ? error.details?.step : undefined;
        const step = typeof index === 'number' ? plan.steps[index] : undefined;
        if (step === undefined || !(error instanceof GymError)) throw error;
        const what = step.kind === 'run' ? 'RUN' : step.kind === 'copy' ? 'COPY' : 'WORKDIR';
        throw new GymError(error.code, `Dockerfile line ${step.line}: ${what} ${error.message}`, {
          details: { ...error.details, line: step.line },
          cause: error,
        });
      });
  } finally {
    await rm(directory, { recursive: true, force: true });
  }
  logger.info({ image: request.reference }, 'built');
  return { reference: request.reference, built: true, plan };
}
