/**
 * A sandbox's snapshot: its container committed as an image (paused meanwhile, so the copy is
 * of one instant). Two kinds:
 * - named: under a name the operator allows (`host-access.ts`);
 * - managed (`managedId`, the daemon's snapshot record): under `gym-snapshot/<namespace>:<id>`,
 *   a name only the daemon picks, so always allowed.
 * Either way an existing image is replaced only when it is itself a snapshot.
 *
 * The engine's commit merges the container's own configuration back into whatever config it is
 * given: an env variable or label can be overridden, never dropped. So the committed config is the
 * base image's (env, labels, command, entrypoint, user, workdir), every env variable the sandbox
 * was given on top (its spec env) is kept with an empty value, every label of ours is emptied, and
 * the snapshot's own labels are added. No value of the parent's env reaches the image: a child
 * gets its env from its own spec. (The daemon gives gateway keys and session settings per exec,
 * never in the container's env.)
 */
import type Docker from 'dockerode';
import { GymError } from '../../core/errors.ts';
import type { SnapshotOptions, SnapshotResult } from '../sandbox-provider.ts';
import { SYSTEM_LABELS } from '../shared/labels.ts';
import { DOCKER_LABEL_PREFIX } from './container-listing.ts';
import { wrapDockerError } from './docker-errors.ts';
import type { HostAccessPolicy } from './host-access.ts';

/** The repository of managed snapshots; the namespace follows it, the snapshot id is the tag. */
export const MANAGED_SNAPSHOT_REPOSITORY = 'gym-snapshot';
/** Labels a snapshot image carries: the namespace that owns it, the sandbox it was taken of. */
export const SNAPSHOT_LABELS = {
  namespace: `${DOCKER_LABEL_PREFIX}snapshot.namespace`,
  sandboxId: `${DOCKER_LABEL_PREFIX}snapshot.sandbox-id`,
  /** The daemon's labels (`SnapshotOptions.labels`) go under this prefix. */
  userPrefix: `${DOCKER_LABEL_PREFIX}snapshot.label.`,
} as const;

/** The image of managed snapshot `snapshotId` of `namespace` (a repository path is lower case). */
export function managedSnapshotImage(namespace: string, snapshotId: string): string {
  const repo =
    namespace
      .toLowerCase()
      .replace(/[^a-z0-9._-]+/g, '-')
      .replace(/^[^a-z0-9]+/, '') || 'default';
  const tag = snapshotId.replace(/[^A-Za-z0-9_.-]/g, '-').slice(0, 128);
  return `${MANAGED_SNAPSHOT_REPOSITORY}/${repo}:${tag}`;
}

export function splitReference(image: string): { repo: string; tag: string } {
  const separator = image.lastIndexOf(':');
  const hasTag = separator > image.lastIndexOf('/');
  return hasTag
    ? { repo: image.slice(0, separator), tag: image.slice(separator + 1) }
    : { repo: image, tag: 'latest' };
}

async function inspectOrNull(docker: Docker, image: string, id: string | null) {
  try {
    return await docker.getImage(image).inspect();
  } catch (error) {
    if ((error as { statusCode?: number }).statusCode === 404) return null;
    throw wrapDockerError(error, { operation: 'snapshot', ...(id === null ? {} : { sandboxId: id }) });
  }
}

function isSnapshotImage(info: Docker.ImageInspectInfo): boolean {
  const labels = info.Config?.Labels ?? {};
  // Older snapshots carry only the committed container's sandbox-id label.
  return (
    labels[SNAPSHOT_LABELS.namespace] !== undefined ||
    labels[DOCKER_LABEL_PREFIX + SYSTEM_LABELS.sandboxId] !== undefined
  );
}

/** What an engine adds to a container's env itself (Podman: when the image has no PATH): kept as they are. */
const RUNTIME_ENV = new Set(['PATH', 'HOME', 'HOSTNAME', 'TERM', 'container']);

/** The commit's config: the base image's, the container's additions emptied, the snapshot's labels. */
function commitConfig(
  base: Docker.ImageInspectInfo['Config'] | undefined,
  container: Docker.ContainerInspectInfo['Config'],
  snapshotLabels: Record<string, string>,
): Record<string, unknown> & { changes: string[] } {
  const baseEnv = base?.Env ?? [];
  const baseKeys = new Set(baseEnv.map((entry) => entry.split('=')[0]));
  const env = [...baseEnv];
  for (const entry of container.Env ?? []) {
    const key = entry.split('=')[0]!;
    if (!baseKeys.has(key)) {
      baseKeys.add(key);
      env.push(RUNTIME_ENV.has(key) ? entry : `${key}=`);
    }
  }
  const labels: Record<string, string> = { ...(base?.Labels ?? {}) };
  for (const key of Object.keys(container.Labels ?? {}))
    if (!(key in labels) && key.startsWith(DOCKER_LABEL_PREFIX)) labels[key] = '';
  Object.assign(labels, snapshotLabels);
  return {
    // For an engine that takes only the instructions (Podman's compatible API ignores the body).
    changes: [
      ...env.map((entry) => {
        const separator = entry.indexOf('=');
        return `ENV ${entry.slice(0, separator)}=${JSON.stringify(entry.slice(separator + 1))}`;
      }),
      ...Object.entries(labels)
        .filter(([key]) => key.startsWith(DOCKER_LABEL_PREFIX))
        .map(([key, value]) => `LABEL ${JSON.stringify(key)}=${JSON.stringify(value)}`),
    ],
    Env: env,
    Labels: labels,
    Cmd: base?.Cmd ?? [],
    Entrypoint: base?.Entrypoint ?? [],
    User: base?.User ?? '',
    WorkingDir: base?.WorkingDir ?? '',
  };
}

/**
 * Commits container `containerName` of sandbox `id`: as `options.image` (`repo[:tag]`, default
 * tag `latest`) or, for a managed snapshot, under `managedSnapshotImage`. `sizeBytes` is what the
 * snapshot adds to its base image (its own layer).
 * @throws GymError `FORBIDDEN_BY_CONFIG`, `SNAPSHOT_TOO_LARGE` (the container's changes past `maxBytes`).
 */
export async function commitSnapshot(
  docker: Docker,
  containerName: string,
  hostAccess: HostAccessPolicy,
  namespace: string,
  id: string,
  options: SnapshotOptions,
): Promise<SnapshotResult> {
  const image =
    options.managedId === undefined ? options.image : managedSnapshotImage(namespace, options.managedId);
  const { repo, tag } = splitReference(image);
  const existing = await inspectOrNull(docker, `${repo}:${tag}`, id);
  const isSnapshot = existing !== null && isSnapshotImage(existing);
  if (options.managedId === undefined)
    hostAccess.checkSnapshotTarget(`${repo}:${tag}`, existing === null ? null : { isSnapshot });
  else if (existing !== null && !isSnapshot)
    throw new GymError(
      'FORBIDDEN_BY_CONFIG',
      `${repo}:${tag} exists and is not a snapshot; it is never replaced`,
      {
        details: { image: `${repo}:${tag}` },
      },
    );
  const container = docker.getContainer(containerName);
  // Paused before it is measured, and until the commit has copied it: the bound is checked on the
  // very files the commit writes. Measured first and paused by the commit after, an agent that
  // swapped a small file for a large sparse one in between (`rm f; truncate -s 1T f` in a loop)
  // had the engine write the file's full apparent size to the host's disk. A live snapshot commits
  // a container its checkpoint has stopped already (no process is left to change it), which the
  // engine may still show as running for a moment and cannot pause.
  const paused = options.live === true ? false : await pauseForSnapshot(container, id);
  try {
    return await commitPaused(docker, container, containerName, namespace, id, options, { repo, tag });
  } finally {
    if (paused) await unpauseAfterSnapshot(container);
  }
}

/** Pauses a running sandbox; whether this call paused it (false: it was not running, or is paused already). */
async function pauseForSnapshot(container: Docker.Container, id: string): Promise<boolean> {
  try {
    const { State } = await container.inspect();
    if (!State.Running || State.Paused) return false;
    await container.pause();
    return true;
  } catch (error) {
    throw wrapDockerError(error, { operation: 'snapshot', sandboxId: id });
  }
}

/** Lets the sandbox run again. A container gone meanwhile (destroyed) has nothing to resume. */
async function unpauseAfterSnapshot(container: Docker.Container): Promise<void> {
  try {
    await container.unpause();
  } catch (error) {
    const status = (error as { statusCode?: number }).statusCode;
    if (status !== 404 && status !== 409) throw wrapDockerError(error, { operation: 'snapshot' });
  }
}

/**
 * Lets run again the sandboxes of this daemon left paused: a daemon killed during a snapshot's
 * commit leaves its sandbox paused (nothing else of ours pauses one). Returns the container ids
 * it let run.
 */
export async function unpauseInterruptedCommits(
  docker: Docker,
  namespace: string,
  daemonId: string,
): Promise<string[]> {
  const paused = await docker.listContainers({
    all: true,
    filters: {
      status: ['paused'],
      label: [
        `${DOCKER_LABEL_PREFIX}${SYSTEM_LABELS.namespace}=${namespace}`,
        `${DOCKER_LABEL_PREFIX}${SYSTEM_LABELS.daemonId}=${daemonId}`,
      ],
    },
  });
  const resumed: string[] = [];
  for (const container of paused) {
    // One that cannot be let run (it went meanwhile) does not keep the others paused.
    await unpauseAfterSnapshot(docker.getContainer(container.Id)).then(
      () => resumed.push(container.Id),
      () => {},
    );
  }
  return resumed;
}

/** Measures the paused container's own layer against `maxBytes`, then commits it. */
async function commitPaused(
  docker: Docker,
  container: Docker.Container,
  containerName: string,
  namespace: string,
  id: string,
  options: SnapshotOptions,
  { repo, tag }: { repo: string; tag: string },
): Promise<SnapshotResult> {
  let info: Docker.ContainerInspectInfo & { SizeRw?: number };
  try {
    // `size` makes the engine count the container's own layer (SizeRw, the files' apparent sizes:
    // what the commit writes): asked only with a bound.
    info = await (container as unknown as { inspect(options: object): Promise<typeof info> }).inspect({
      size: options.maxBytes !== undefined,
    });
  } catch (error) {
    throw wrapDockerError(error, { operation: 'snapshot', sandboxId: id });
  }
  if (options.maxBytes !== undefined && (info.SizeRw ?? 0) > options.maxBytes)
    throw new GymError(
      'SNAPSHOT_TOO_LARGE',
      `sandbox ${id} changed ${info.SizeRw} bytes, past the snapshot limit of ${options.maxBytes}`,
      { details: { sandboxId: id, sizeBytes: info.SizeRw, maxBytes: options.maxBytes } },
    );
  const base = await inspectOrNull(docker, info.Image, id);
  const snapshotLabels: Record<string, string> = {
    [SNAPSHOT_LABELS.namespace]: namespace,
    [SNAPSHOT_LABELS.sandboxId]: id,
  };
  for (const [key, value] of Object.entries(options.labels ?? {}))
    snapshotLabels[SNAPSHOT_LABELS.userPrefix + key] = value;
  try {
    const { changes, ...config } = commitConfig(base?.Config, info.Config, snapshotLabels);
    // Paused already (or not running): the engine's own pause would be a second one.
    await container.commit({
      _query: { container: containerName, repo, tag, pause: false, changes },
      _body: config,
    });
  } catch (error) {
    throw wrapDockerError(error, { operation: 'snapshot', sandboxId: id });
  }
  const committed = await inspectOrNull(docker, `${repo}:${tag}`, id);
  const sizeBytes = committed === null ? undefined : Math.max(0, committed.Size - (base?.Size ?? 0));
  return { image: `${repo}:${tag}`, ...(sizeBytes === undefined ? {} : { sizeBytes }) };
}

/**
 * Removes snapshot `image` of `namespace`. A missing image is success; an image that is not a
 * snapshot of this namespace is refused. A child still running from it keeps its layers (the
 * engine only drops the name then).
 */
export async function deleteSnapshot(docker: Docker, namespace: string, image: string): Promise<void> {
  const info = await inspectOrNull(docker, image, null);
  if (info === null) return;
  if (info.Config?.Labels?.[SNAPSHOT_LABELS.namespace] !== namespace)
    throw new GymError(
      'FORBIDDEN_BY_CONFIG',
      `${image} is not a snapshot of namespace ${namespace}; it is not removed`,
      {
        details: { image },
      },
    );
  try {
    await docker.getImage(image).remove({ force: true });
  } catch (error) {
    if ((error as { statusCode?: number }).statusCode === 404) return;
    throw wrapDockerError(error, { operation: 'delete snapshot' });
  }
}
