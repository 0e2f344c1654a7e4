/**
 * What a sandbox spec may take from the host, decided by the operator's configuration only.
 *
 * The API token administers sandboxes; it must not grant the host. Every option that reaches past
 * the container (a bind mount, an added capability, a network mode other than `none`, an image
 * tag written by a snapshot) is refused unless the provider's options allow it, with a
 * `FORBIDDEN_BY_CONFIG` error whose `details.setting` names the option to change.
 */
import { realpath } from 'node:fs/promises';
import { resolve, sep } from 'node:path';
import { GymError } from '../../core/errors.ts';

/**
 * Sockets that drive a container engine: whoever reaches one is root on the host. They are
 * refused even under an allowed directory, unless listed exactly (the socket itself, or the
 * directory that holds it).
 */
export const ENGINE_SOCKETS = ['/var/run/docker.sock', '/run/docker.sock', '/run/containerd/containerd.sock'];

/** Snapshots go under this prefix by default, so they can never replace a base image. */
export const DEFAULT_SNAPSHOT_IMAGE_PREFIX = 'gym-snapshot/';

export interface HostAccessSettings {
  /** Host directories (and their descendants) that `readOnlyBinds` may mount. */
  allowedHostPaths: readonly string[];
  /** Capabilities that `capAdd` may add on top of the defaults. */
  allowedCapabilities: readonly string[];
  /** `network` modes a spec may ask for. */
  allowedNetworkModes: readonly string[];
  /** Image name prefixes that `snapshot` may write. */
  snapshotImagePrefixes: readonly string[];
}

function forbidden(setting: string, message: string, details: Record<string, unknown>): GymError {
  return new GymError(
    'FORBIDDEN_BY_CONFIG',
    `${message}; the operator allows it with \`${setting}\` in the docker provider's options`,
    { details: { setting, ...details } },
  );
}

function isWithin(path: string, directory: string): boolean {
  return path === directory || path.startsWith(directory === sep ? sep : directory + sep);
}

/** The real path, or null when it does not exist (the engine would then create it on the host). */
async function realPathOrNull(path: string): Promise<string | null> {
  return realpath(path).catch(() => null);
}

export class HostAccessPolicy {
  readonly #settings: HostAccessSettings;
  readonly #engineSockets: readonly string[];

  /** @param engineSocket the socket this provider talks to, refused like the well-known ones. */
  constructor(settings: HostAccessSettings, engineSocket: string | undefined) {
    this.#settings = settings;
    this.#engineSockets = [...new Set([...ENGINE_SOCKETS, ...(engineSocket ? [engineSocket] : [])])];
  }

  checkNetwork(mode: string): void {
    if (!this.#settings.allowedNetworkModes.includes(mode)) {
      throw forbidden('allowedNetworkModes', `network "${mode}" is not allowed`, {
        network: mode,
        allowed: this.#settings.allowedNetworkModes,
      });
    }
  }

  /** @param defaults capabilities every sandbox has anyway (asking for them again is harmless). */
  checkCapabilities(capAdd: readonly string[], defaults: readonly string[]): void {
    const refused = capAdd.filter(
      (capability) =>
        !defaults.includes(capability) && !this.#settings.allowedCapabilities.includes(capability),
    );
    if (refused.length > 0) {
      throw forbidden('allowedCapabilities', `capAdd ${refused.join(', ')} is not allowed`, {
        capabilities: refused,
        allowed: this.#settings.allowedCapabilities,
      });
    }
  }

  /**
   * Checks each bind by the path the engine will really mount: symbolic links resolved, so a link
   * inside an allowed directory cannot lead out of it. Returns the resolved host paths to mount,
   * so a link swapped after the check cannot change what is mounted.
   * @throws GymError `FORBIDDEN_BY_CONFIG` (`allowedHostPaths`), `VALIDATION_FAILED` for a path
   *   that does not exist (the engine would create it on the host as root).
   */
  async resolveBinds(
    binds: ReadonlyArray<{ hostPath: string; path: string }>,
  ): Promise<Array<{ hostPath: string; path: string }>> {
    if (binds.length === 0) return [];
    const allowed = await Promise.all(
      this.#settings.allowedHostPaths.map(async (entry) => {
        const resolved = resolve(entry);
        return { resolved, real: (await realPathOrNull(resolved)) ?? resolved };
      }),
    );
    const sockets = (
      await Promise.all(
        this.#engineSockets.map(async (socket) => [resolve(socket), await realPathOrNull(socket)]),
      )
    )
      .flat()
      .filter((socket): socket is string => socket !== null);
    const result: Array<{ hostPath: string; path: string }> = [];
    for (const bind of binds) {
      const requested = resolve(bind.hostPath);
      const refuse = (why: string) =>
        forbidden('allowedHostPaths', `readOnlyBinds: host path ${bind.hostPath} ${why}`, {
          hostPath: bind.hostPath,
          allowed: this.#settings.allowedHostPaths,
        });
      if (!allowed.some((entry) => isWithin(requested, entry.resolved) || isWithin(requested, entry.real)))
        throw refuse('is not under an allowed path');
      const real = await realPathOrNull(requested);
      if (real === null) {
        throw new GymError(
          'VALIDATION_FAILED',
          `readOnlyBinds: host path ${bind.hostPath} does not exist (the engine would create it on the host)`,
          { details: { hostPath: bind.hostPath } },
        );
      }
      if (!allowed.some((entry) => isWithin(real, entry.real)))
        throw refuse(`leads to ${real}, outside the allowed paths`);
      // The engine socket, or a directory that holds it, only when listed exactly.
      const exposesEngine = sockets.some((socket) => isWithin(socket, real));
      if (exposesEngine && !allowed.some((entry) => entry.real === real))
        throw refuse('exposes the container engine socket (allowed only when listed exactly)');
      result.push({ hostPath: real, path: bind.path });
    }
    return result;
  }

  /**
   * A snapshot writes only under an allowed prefix, and never replaces an existing image that is
   * not itself a snapshot (`isSnapshot` tells, from the existing image's labels).
   */
  checkSnapshotTarget(image: string, existing: { isSnapshot: boolean } | null): void {
    const prefixes = this.#settings.snapshotImagePrefixes;
    if (!prefixes.some((prefix) => image.startsWith(prefix))) {
      throw forbidden(
        'snapshotImagePrefixes',
        `snapshot image ${image} does not start with an allowed prefix`,
        {
          image,
          allowed: prefixes,
        },
      );
    }
    if (existing !== null && !existing.isSnapshot) {
      throw forbidden(
        'snapshotImagePrefixes',
        `snapshot image ${image} would replace an image that is not a snapshot`,
        {
          image,
          allowed: prefixes,
        },
      );
    }
  }
}
