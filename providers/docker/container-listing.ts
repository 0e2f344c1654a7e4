/**
 * Docker containers as sandboxes: identity read back from their labels, found by name (`get`) or
 * by label filter (`list`), and removed. The engine answers whole or not at all, so a listing
 * that fails is the one unreachable scope.
 */
import type Docker from 'dockerode';
import { GymError } from '../../core/errors.ts';
import type { SandboxInfo, SandboxState } from '../../core/schemas/sandbox.ts';
import type { ListFilter, SandboxListing } from '../sandbox-provider.ts';
import { decodeLabels, matchesListFilter, selectorLabels } from '../shared/labels.ts';
import { wrapDockerError } from './docker-errors.ts';
import type { EngineTraits } from './engine-kind.ts';

/** Every label we write starts with this, so one filter finds all our containers. */
export const DOCKER_LABEL_PREFIX = 'gym.';

/**
 * The keys of the sandbox's own user labels, comma-separated. A container inherits the labels of
 * its image, and a snapshot's image carries those of the sandbox it was taken from: only the keys
 * listed here are the sandbox's. (A container of an older daemon has no list: all are its own.)
 */
export const USER_KEYS_LABEL = `${DOCKER_LABEL_PREFIX}user-keys`;

/** The one scope of a Docker backend: its sandboxes carry none, all are hidden when it does not answer. */
const ENGINE_SCOPE = 'engine';

function containerState(state: string | undefined): SandboxState {
  switch (state) {
    case 'created':
      return 'creating';
    case 'running':
      return 'ready';
    case 'removing':
      return 'destroying';
    default:
      return 'failed';
  }
}

export class ContainerListing {
  readonly #docker: Docker;
  /** The deployment's namespace: only its containers are its sandboxes. */
  readonly #namespace: string;
  readonly #providerName: string;
  readonly #containerName: (id: string) => string;
  /** Which engine answers: Podman lists images and joins label filters its own way. */
  readonly #engine: EngineTraits;

  constructor(
    docker: Docker,
    namespace: string,
    providerName: string,
    engine: EngineTraits,
    containerName: (id: string) => string,
  ) {
    this.#docker = docker;
    this.#namespace = namespace;
    this.#providerName = providerName;
    this.#engine = engine;
    this.#containerName = containerName;
  }

  /**
   * `image` is the container's own record of it (inspect's `Config.Image`, list's `Image`), not
   * a label: labels hold identity only. (Containers of older daemons also carry a `gym.image`
   * label; nothing reads it.) A listing shows the image id instead of the reference when that
   * reference has since been moved to another image.
   */
  #toInfo(
    labels: Record<string, string>,
    state: string | undefined,
    image: string,
    ref: string,
  ): SandboxInfo | null {
    const decoded = decodeLabels(DOCKER_LABEL_PREFIX, labels);
    if (decoded === null || decoded.namespace !== this.#namespace) return null;
    const ownKeys = labels[USER_KEYS_LABEL]?.split(',');
    return {
      ...decoded,
      labels:
        ownKeys === undefined
          ? decoded.labels
          : Object.fromEntries(Object.entries(decoded.labels).filter(([key]) => ownKeys.includes(key))),
      provider: this.#providerName,
      state: containerState(state),
      image,
      providerRef: ref,
    };
  }

  async get(id: string): Promise<SandboxInfo> {
    let inspected: Docker.ContainerInspectInfo;
    try {
      inspected = await this.#docker.getContainer(this.#containerName(id)).inspect();
    } catch (error) {
      throw wrapDockerError(error, { operation: 'inspect', sandboxId: id });
    }
    const info = this.#toInfo(
      inspected.Config.Labels ?? {},
      inspected.State.Status,
      inspected.Config.Image,
      inspected.Id,
    );
    if (info === null || info.id !== id)
      throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
    return info;
  }

  /** One listing call: the engine answers whole or not at all, and then it is the one unreachable scope. */
  async list(filter: ListFilter = {}): Promise<SandboxListing> {
    const labelFilters = Object.entries(selectorLabels(DOCKER_LABEL_PREFIX, this.#namespace, filter)).map(
      ([key, value]) => `${key}=${value}`,
    );
    let containers: Docker.ContainerInfo[];
    try {
      containers = await this.#docker.listContainers({ all: true, filters: { label: labelFilters } });
    } catch (error) {
      const reason = wrapDockerError(error, { operation: 'list' }).message;
      return { sandboxes: [], unreachable: [{ scope: ENGINE_SCOPE, reason }] };
    }
    const isPodman = (await this.#engine.kind().catch(() => 'docker')) === 'podman';
    // The engine also matches labels a container inherited from its image (see USER_KEYS_LABEL):
    // a container of a sandbox's snapshot (a build's, a user's `docker run`) carries that
    // sandbox's identity labels. Only the container of the sandbox's own name is the sandbox.
    const sandboxes = containers
      .flatMap((container) => {
        // Podman lists a short name it resolved locally as `localhost/<name>`.
        const image = isPodman ? container.Image.replace(/^localhost\//, '') : container.Image;
        const info = this.#toInfo(container.Labels, container.State, image, container.Id);
        return info !== null && (container.Names ?? []).includes(`/${this.#containerName(info.id)}`)
          ? info
          : [];
      })
      // Podman's engine joins several label filters with "or": each is checked again here.
      .filter((info) => matchesListFilter(info, filter));
    return { sandboxes, unreachable: [] };
  }
}

/** Removes the container and its volumes; one already gone, or being removed, counts as removed. */
export async function removeContainer(container: Docker.Container): Promise<void> {
  try {
    await container.remove({ force: true, v: true });
  } catch (error) {
    const status = (error as { statusCode?: number }).statusCode;
    // 404: already gone. 409: a removal is already in progress. Both mean "destroyed" to the caller.
    if (status === 404 || status === 409) return;
    throw error;
  }
}
