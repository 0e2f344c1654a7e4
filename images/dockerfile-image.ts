/**
 * Carries out a Dockerfile build plan (environments/kinds/harbor/dockerfile.ts) with no registry
 * and no BuildKit: a container from a base image the machine has, each RUN executed in it, each
 * COPY put in as a tar, and the container committed with the Dockerfile's settings. Builds have
 * no network, as every sandbox here: a RUN that downloads fails, and says so.
 *
 * A base image the machine lacks is one of ours when it is named `gym/<definition>` (built then,
 * as `gym image build` would), else a clear error: nothing is ever pulled.
 */
import { lstat, readdir, readFile, readlink } from 'node:fs/promises';
import { join, posix, relative } from 'node:path';
import { PassThrough, type Readable } from 'node:stream';
import type Docker from 'dockerode';
import * as tar from 'tar-stream';
import { GymError } from '../core/errors.ts';
import type { Logger } from '../core/logger.ts';
import {
  type BuildStep,
  commitChanges,
  type DockerfilePlan,
  parseDockerfile,
  planDockerfile,
} from '../environments/kinds/harbor/dockerfile.ts';
import { IMAGE_DEFINITIONS, IMAGE_REPOSITORY_PREFIX } from './definitions.ts';

export interface DockerfileBuildRequest {
  /** The Dockerfile's text. */
  dockerfile: string;
  /** The build context (a Harbor task's environment/ folder). */
  contextDirectory: string;
  /** The tag to give the image; a build is skipped when it exists. */
  reference: string;
  buildArgs?: Record<string, string>;
  /** The whole build, after which it is stopped and nothing is tagged. */
  timeoutMs: number;
  /**
   * Makes a built-in definition's image (`busybox`, `debian-base`) when the Dockerfile starts FROM
   * it and the engine lacks it (the CLI asks the daemon's image service). Without it, a missing
   * one is an error saying how to build it.
   */
  prepareBase?: (definition: string) => Promise<void>;
}

/** The base images this machine can make itself, for the error that names a missing one. */
export const LOCAL_BASES = IMAGE_DEFINITIONS.map(
  (definition) => `${IMAGE_REPOSITORY_PREFIX}${definition.name}:latest (${definition.description})`,
);

async function imageConfig(docker: Docker, reference: string) {
  try {
    return (await docker.getImage(reference).inspect()).Config;
  } catch {
    return undefined;
  }
}

/** The base image's config, building it first when it is one of our own definitions. */
async function baseConfig(docker: Docker, base: string, prepareBase: DockerfileBuildRequest['prepareBase']) {
  const present = await imageConfig(docker, base);
  if (present !== undefined) return present;
  const [repository, tag = 'latest'] = base.split(/:(?=[^/]*$)/);
  const definition = IMAGE_DEFINITIONS.find(
    (candidate) => `${IMAGE_REPOSITORY_PREFIX}${candidate.name}` === repository && tag === 'latest',
  );
  if (definition !== undefined) {
    if (prepareBase === undefined)
      throw new GymError(
        'IMAGE_NOT_FOUND',
        `the base image "${base}" (FROM) is not built yet: run gym image build ${definition.name}`,
        { details: { image: base } },
      );
    await prepareBase(definition.name);
    const built = await imageConfig(docker, base);
    if (built !== undefined) return built;
  }
  throw new GymError(
    'IMAGE_NOT_FOUND',
    `the base image "${base}" (FROM) is not on this machine, and no registry is reachable to pull it: load it (docker load -i FILE.tar) or start FROM a base this machine has or builds: ${LOCAL_BASES.join('; ')}`,
    { details: { image: base } },
  );
}

/** An image config's ENTRYPOINT or CMD as a list (the engine may give a string). */
function asList(value: string | string[] | null | undefined): string[] | null {
  if (value === undefined || value === null) return null;
  return typeof value === 'string' ? [value] : value;
}

/** Runs argv in the build container; the output tail on a non-zero exit. */
async function exec(
  docker: Docker,
  container: Docker.Container,
  argv: string[],
  options: { workdir?: string; env?: Record<string, string>; user?: string },
): Promise<{ exitCode: number; output: string }> {
  const created = await container.exec({
    Cmd: argv,
    ...(options.workdir === undefined ? {} : { WorkingDir: options.workdir }),
    Env: Object.entries(options.env ?? {}).map(([key, value]) => `${key}=${value}`),
    ...(options.user === undefined ? {} : { User: options.user }),
    AttachStdout: true,
    AttachStderr: true,
  });
  const stream = (await created.start({ hijack: true, stdin: false })) as unknown as Readable;
  const output = new PassThrough();
  let tail = '';
  output.on('data', (chunk: Buffer) => {
    tail = (tail + chunk.toString('utf8')).slice(-4000);
  });
  docker.modem.demuxStream(stream, output, output);
  await new Promise<void>((resolve) => {
    stream.once('end', resolve);
    stream.once('close', resolve);
  });
  const { ExitCode } = await created.inspect();
  return { exitCode: ExitCode ?? -1, output: tail };
}

async function mustExec(
  docker: Docker,
  container: Docker.Container,
  argv: string[],
  what: string,
  options: { workdir?: string; env?: Record<string, string>; user?: string } = {},
): Promise<void> {
  const result = await exec(docker, container, argv, options);
  if (result.exitCode !== 0)
    throw new GymError(
      'VALIDATION_FAILED',
      `${what} exited with ${result.exitCode} (builds here have no network: a step that downloads cannot work):\n${result.output}`,
    );
}

/** Adds a context file or folder to the tar at `target` (absolute, in the image), as root. */
async function addToTar(
  pack: tar.Pack,
  source: string,
  target: string,
  chmod: number | undefined,
  entries: string[],
): Promise<void> {
  const info = await lstat(source);
  const name = target.replace(/^\/+/, '');
  const header = { name, uid: 0, gid: 0, mtime: info.mtime };
  if (info.isSymbolicLink()) {
    pack.entry({ ...header, type: 'symlink', linkname: await readlink(source) });
  } else if (info.isDirectory()) {
    pack.entry({ ...header, type: 'directory', mode: chmod ?? info.mode & 0o7777 });
    for (const child of (await readdir(source)).sort())
      await addToTar(pack, join(source, child), posix.join(target, child), chmod, entries);
  } else {
    pack.entry({ ...header, mode: chmod ?? info.mode & 0o7777 }, await readFile(source));
  }
  entries.push(target);
}

/**
 * One COPY: the destination's folder made, the sources put in (a folder's contents, not the
 * folder itself, as Docker copies), ownership as `--chown` says (root otherwise).
 */
async function copy(
  docker: Docker,
  container: Docker.Container,
  step: Extract<BuildStep, { kind: 'copy' }>,
  contextDirectory: string,
): Promise<void> {
  const chmod = step.chmod === undefined ? undefined : Number.parseInt(step.chmod, 8);
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
  const parent = isDirectory ? destination : posix.dirname(destination);
  await mustExec(
    docker,
    container,
    ['mkdir', '-p', parent],
    `Dockerfile line ${step.line}: mkdir ${parent}`,
    {
      user: '0',
    },
  );
  const pack = tar.pack();
  const top: string[] = [];
  const all: string[] = [];
  const packed = (async () => {
    for (const { source, path, isDirectory: isFolder } of sources) {
      if (isFolder) {
        for (const child of (await readdir(path)).sort()) {
          const target = posix.join(destination, child);
          await addToTar(pack, join(path, child), target, chmod, all);
          top.push(target);
        }
      } else {
        const target = isDirectory ? posix.join(destination, posix.basename(source)) : destination;
        await addToTar(pack, path, target, chmod, all);
        top.push(target);
      }
    }
    pack.finalize();
  })().catch((error: unknown) => {
    // The upload must end too, or it would wait for the rest of the archive.
    pack.destroy(error as Error);
    throw error;
  });
  await Promise.all([packed, container.putArchive(pack as unknown as Readable, { path: '/' })]);
  if (step.chown !== undefined && top.length > 0)
    await mustExec(
      docker,
      container,
      ['chown', '-R', step.chown, '--', ...top],
      `Dockerfile line ${step.line}: chown`,
      { user: '0' },
    );
}

/**
 * Builds the image unless `reference` exists. Errors: IMAGE_NOT_FOUND for a base the machine
 * lacks; VALIDATION_FAILED for a Dockerfile outside the subset, a missing COPY source, a step
 * that fails, or a build past its timeout.
 */
export async function buildDockerfileImage(
  docker: Docker,
  request: DockerfileBuildRequest,
  logger: Logger,
): Promise<{ reference: string; built: boolean; plan: DockerfilePlan }> {
  const instructions = parseDockerfile(request.dockerfile);
  const firstPlan = planDockerfile(instructions, request.buildArgs);
  if ((await imageConfig(docker, request.reference)) !== undefined)
    return { reference: request.reference, built: false, plan: firstPlan };
  const base = await baseConfig(docker, firstPlan.base, request.prepareBase);
  const plan = planDockerfile(instructions, request.buildArgs, base.WorkingDir ?? '/');
  for (const { keyword, line } of plan.ignored)
    logger.debug({ keyword, line }, 'Dockerfile instruction without effect on a sandbox');
  // The keep-alive goes where the commit can replace it: the command, unless the base has an
  // entrypoint (which would run it), and then the entrypoint (which the commit puts back).
  const keepAlive = ['sh', '-c', 'sleep 86400'];
  const baseEntrypoint = asList(base.Entrypoint) ?? [];
  const container = await docker.createContainer({
    Image: plan.base,
    ...(baseEntrypoint.length > 0 ? { Entrypoint: keepAlive, Cmd: [] } : { Cmd: keepAlive }),
    User: '0',
    HostConfig: { NetworkMode: 'none', LogConfig: { Type: 'none', Config: {} } },
    Labels: { 'gym.role': 'image-build' },
  });
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => {
      reject(
        new GymError('VALIDATION_FAILED', `building ${request.reference} ran past ${request.timeoutMs} ms`),
      );
      // Removing the container ends whatever step was running in it.
      void container.remove({ force: true }).catch(() => {});
    }, request.timeoutMs);
  });
  try {
    const steps = async () => {
      await container.start();
      // Docker's RUN runs as the base image's user unless USER says otherwise.
      const baseUser = base.User === undefined || base.User === '' ? '0' : base.User;
      for (const step of plan.steps) {
        if (step.kind === 'workdir')
          await mustExec(
            docker,
            container,
            ['mkdir', '-p', step.path],
            `Dockerfile line ${step.line}: WORKDIR`,
            {
              user: '0',
            },
          );
        else if (step.kind === 'copy') await copy(docker, container, step, request.contextDirectory);
        else
          await mustExec(docker, container, step.argv, `Dockerfile line ${step.line}: RUN`, {
            workdir: step.workdir,
            env: step.env,
            user: step.user ?? baseUser,
          });
      }
      const separator = request.reference.lastIndexOf(':');
      await container.commit({
        repo: request.reference.slice(0, separator),
        tag: request.reference.slice(separator + 1),
        changes: commitChanges(plan.settings, { entrypoint: asList(base.Entrypoint), cmd: asList(base.Cmd) }),
      } as never);
    };
    await Promise.race([steps(), timedOut]);
  } finally {
    clearTimeout(timer);
    await container.remove({ force: true }).catch(() => {});
  }
  logger.info(
    { image: request.reference, context: relative(process.cwd(), request.contextDirectory) },
    'built',
  );
  return { reference: request.reference, built: true, plan };
}
