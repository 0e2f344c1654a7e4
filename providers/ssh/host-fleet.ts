/**
 * The hosts an SSH provider (apptainer, enroot) runs sandboxes on, whatever the runtime: their
 * inventory (HostSchema), a pool of SSH connections per host (pool.ts: a session holds a channel
 * for its life, so many sessions need several connections), placement by free slots, and the small
 * state file per sandbox on its host (`<workDirectory>/sandboxes/<namespace>.<id>.json`: the
 * SandboxInfo with labels and deadline, the spec, the image's config) joined with the runtime's
 * own listing, so a reaper without the daemon's state still finds orphans; a runtime container
 * without a state file is not ours.
 *
 * The host set can be replaced at runtime (`setHosts`: the nodes of a Slurm allocation, say). A
 * host that leaves the set is closed: its sandboxes drop out of listings, their commands end
 * `sandbox_gone` (the closed connection answers PROVIDER_UNAVAILABLE), `get` says they do not
 * exist and `destroy` forgets them; a host that joins takes creates at once.
 */
import { createHash, randomBytes } from 'node:crypto';
import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import { z } from 'zod';
import { GymError, isGymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import type { SandboxInfo, SandboxSpec } from '../../core/schemas/sandbox.ts';
import type { ImageConfig, ListFilter, ProviderHealth, SandboxListing } from '../sandbox-provider.ts';
import { loadRelayBinary } from '../shared/gateway-relay.ts';
import { matchesListFilter } from '../shared/labels.ts';
import { OutputCapture } from '../shared/output-capture.ts';
import { shellJoin } from '../shared/shell.ts';
import { DEFAULT_TARGET } from './connection.ts';
import { DEFAULT_POOL, SshPool } from './pool.ts';

/** One host of the inventory; a runtime's provider extends it with its own command's path. */
export const HostSchema = z
  .object({
    /** How the host is named in listings (`scope`) and messages. */
    name: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/),
    host: z.string().min(1),
    port: z.number().int().min(1).max(65_535).default(22),
    username: z.string().min(1),
    privateKeyPath: z.string().optional(),
    agent: z.string().optional(),
    knownHostsPath: z.string().min(1),
    /** Sandboxes this host takes at most. */
    maxSandboxes: z.number().int().positive().default(16),
    /** The host's folder for images and sandbox state files. */
    workDirectory: z.string().regex(/^\//, 'must be an absolute path'),
    /** A static busybox on the host, bound into every sandbox for file transfers and kills. */
    busyboxPath: z.string().default('/bin/busybox'),
    /** Environment for the runtime's command on the host (e.g. APPTAINER_CONFIGDIR, PATH). */
    env: z.record(z.string(), z.string()).default({}),
    /**
     * Lets the SSH user be root (uid 0) on this host; off by default, and then no sandbox is made
     * there. The agent's commands run as the SSH user, and uid 0 of the host is dangerous even
     * with no capabilities at all: it may write the host's /proc/sys (kernel.core_pattern names
     * a program the kernel runs as full root). For throwaway nodes, and tests.
     */
    allowRootSshUser: z.boolean().default(false),
  })
  .strict();
export type HostConfig = z.output<typeof HostSchema>;

/** The SSH settings shared by every host of a fleet (spread into a provider's options schema). */
export const FleetConnectionFields = {
  keepaliveIntervalMs: z.number().int().positive().default(DEFAULT_TARGET.keepaliveIntervalMs),
  keepaliveCountMax: z.number().int().positive().default(DEFAULT_TARGET.keepaliveCountMax),
  /** SSH channels open at once per connection; keep below the server's MaxSessions (default 10). */
  maxChannels: z.number().int().positive().max(64).default(DEFAULT_TARGET.maxChannels),
  /** SSH connections per host at most: each session holds a channel, so many need several. */
  maxConnections: z.number().int().positive().max(64).default(DEFAULT_POOL.maxConnections),
  /** An extra connection to a host that carried nothing this long is closed. */
  idleCloseMs: z.number().int().positive().default(DEFAULT_POOL.idleCloseMs),
  /**
   * Commands through one runner per connection, so the SSH user's shell start-up files run once
   * per connection (see connection.ts); false: a channel, and a login shell, per command.
   */
  commandRunner: z.boolean().default(true),
  /** How long the login shell may take to start the runner (a blocking start-up file fails here). */
  shellStartTimeoutMs: z.number().int().positive().default(DEFAULT_TARGET.shellStartTimeoutMs),
};
export interface FleetConnectionSettings {
  keepaliveIntervalMs: number;
  keepaliveCountMax: number;
  maxChannels: number;
  maxConnections?: number;
  idleCloseMs?: number;
  commandRunner?: boolean;
  shellStartTimeoutMs?: number;
}

export type FleetHost<C extends HostConfig = HostConfig> = C & { readonly connection: SshPool };

/** What a remote helper command (listing, state files) may print at most. */
export const CONTROL_OUTPUT_BYTES = 8 * 1024 * 1024;

export interface RemoteResult {
  code: number | null;
  signal: string | null;
  stdout: Buffer;
  stderr: string;
}

/** What the state file of a sandbox holds. */
export interface SandboxRecord {
  info: SandboxInfo;
  spec: SandboxSpec;
  /** The image's env and working directory, read when the sandbox was made. */
  imageConfig?: ImageConfig;
}

export interface HostFleetOptions<C extends HostConfig> {
  /** The runtime's name, for messages (`no apptainer host answers`). */
  runtime: string;
  namespace: string;
  logger: Logger;
  connection: FleetConnectionSettings;
  hosts: C[];
  /**
   * The names of the runtime's containers alive on a host (instances, enroot containers with a
   * PID). Throws when the host does not answer or the runtime fails.
   */
  liveNames: (host: FleetHost<C>) => Promise<Set<string>>;
  /** The runtime's container name for a sandbox id. */
  nameOf: (id: string) => string;
  /** The folder under each host's workDirectory for the state files (default `sandboxes`). */
  stateFolder?: string;
}

const SANDBOX_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

export class HostFleet<C extends HostConfig = HostConfig> {
  readonly #options: HostFleetOptions<C>;
  #hosts: Array<FleetHost<C>> = [];
  /** Which host holds a sandbox, as last seen (create, get, list); may be a host that left. */
  readonly #placement = new Map<string, FleetHost<C>>();
  /**
   * Each sandbox's state file as written or last read: it never changes after create, so a
   * command does not pay an SSH round trip to read it again.
   */
  readonly #records = new Map<string, SandboxRecord>();
  /** Where each host has the gateway relay binary (by host name), placed once. */
  readonly #relayOnHost = new Map<string, Promise<string>>();

  constructor(options: HostFleetOptions<C>) {
    this.#options = options;
    this.setHosts(options.hosts);
  }

  /** The hosts that take sandboxes now. */
  get hosts(): ReadonlyArray<FleetHost<C>> {
    return this.#hosts;
  }

  /**
   * Replaces the host set. A host kept with the same settings keeps its connection; a host that
   * leaves (or whose settings changed) is closed, and its sandboxes are gone for this fleet.
   */
  setHosts(hosts: C[]): void {
    const names = new Set<string>();
    for (const host of hosts) {
      if (names.has(host.name))
        throw new GymError('VALIDATION_FAILED', `two hosts are named ${host.name}`, {
          details: { host: host.name },
        });
      names.add(host.name);
    }
    const previous = new Map(this.#hosts.map((host) => [host.name, host]));
    const next = hosts.map((config) => {
      const kept = previous.get(config.name);
      if (kept !== undefined && sameConfig(kept, config)) {
        previous.delete(config.name);
        return kept;
      }
      return this.#connect(config);
    });
    this.#hosts = next;
    for (const left of previous.values()) left.connection.close();
  }

  #connect(config: C): FleetHost<C> {
    const settings = this.#options.connection;
    return {
      ...config,
      connection: new SshPool(
        {
          host: config.host,
          port: config.port,
          username: config.username,
          knownHostsPath: config.knownHostsPath,
          keepaliveIntervalMs: settings.keepaliveIntervalMs,
          keepaliveCountMax: settings.keepaliveCountMax,
          maxChannels: settings.maxChannels,
          readyTimeoutMs: DEFAULT_TARGET.readyTimeoutMs,
          ...(settings.commandRunner === undefined ? {} : { commandRunner: settings.commandRunner }),
          ...(settings.shellStartTimeoutMs === undefined
            ? {}
            : { shellStartTimeoutMs: settings.shellStartTimeoutMs }),
          ...(config.privateKeyPath === undefined ? {} : { privateKeyPath: config.privateKeyPath }),
          ...(config.agent === undefined ? {} : { agent: config.agent }),
        },
        this.#options.logger,
        {
          maxConnections: settings.maxConnections ?? DEFAULT_POOL.maxConnections,
          idleCloseMs: settings.idleCloseMs ?? DEFAULT_POOL.idleCloseMs,
        },
      ),
    };
  }

  /** Whether the host is (still) one of the set. */
  isMember(host: FleetHost<C>): boolean {
    return this.#hosts.includes(host);
  }

  /**
   * The relay binary's path on a host: `<workDirectory>/tools/gym-relay-<sha256>`, copied there
   * once (by its content, so a second daemon or a changed binary never mixes them up).
   */
  placeRelay(host: FleetHost<C>, relayHelperPath: string): Promise<string> {
    const known = this.#relayOnHost.get(host.name);
    if (known !== undefined) return known;
    const placing = (async () => {
      const binary = await loadRelayBinary(relayHelperPath);
      if (binary === null)
        throw new GymError('PROVIDER_ERROR', `the relay ${relayHelperPath} cannot be read`);
      const digest = createHash('sha256').update(binary).digest('hex').slice(0, 16);
      const target = posix.join(host.workDirectory, 'tools', `gym-relay-${digest}`);
      const partial = `${target}.partial-${randomBytes(4).toString('hex')}`;
      const placed = await this.run(
        host,
        `[ -x ${shellJoin([target])} ] || { mkdir -p ${shellJoin([posix.dirname(target)])} && cat > ${shellJoin([partial])} && chmod 555 ${shellJoin([partial])} && mv ${shellJoin([partial, target])}; }`,
        binary,
      );
      if (placed.code !== 0)
        throw new GymError(
          'PROVIDER_ERROR',
          `copying the relay to ${host.name} failed: ${placed.stderr.trim()}`,
        );
      return target;
    })();
    this.#relayOnHost.set(host.name, placing);
    placing.catch(() => {
      if (this.#relayOnHost.get(host.name) === placing) this.#relayOnHost.delete(host.name);
    });
    return placing;
  }

  /** Runs a shell line on a host, collecting stdout (bounded) and the end of stderr. */
  async run(host: FleetHost<C>, command: string, stdin?: Buffer | Readable): Promise<RemoteResult> {
    const stdout = new OutputCapture(CONTROL_OUTPUT_BYTES);
    let stderr = '';
    const exit = await host.connection.exec(command, {
      ...(stdin === undefined ? {} : { stdin }),
      onStdout: (chunk) => stdout.push(chunk),
      onStderr: (chunk) => {
        stderr = (stderr + chunk.toString()).slice(-4000);
      },
    });
    if (stdout.isTruncated)
      throw new GymError('PROVIDER_ERROR', `host ${host.name}: a control command printed more than expected`);
    return { ...exit, stdout: stdout.toBuffer(), stderr };
  }

  /** Every host asked for its runtime's version (`versionLine` is the shell line that prints it). */
  async health(versionLine: (host: FleetHost<C>) => string): Promise<ProviderHealth> {
    const hosts = await Promise.all(
      this.#hosts.map(async (host) => {
        try {
          const version = await this.run(host, versionLine(host));
          const refused = version.code === 0 ? await this.#rootRefusal(host) : null;
          return {
            host: host.name,
            ok: version.code === 0 && refused === null,
            message: refused ?? (version.stdout.toString().trim() || version.stderr.trim()),
            ...(refused === null ? {} : { refused: true }),
          };
        } catch (error) {
          return { host: host.name, ok: false, message: (error as Error).message };
        }
      }),
    );
    const up = hosts.filter((host) => host.ok).length;
    const refused = hosts.filter((host) => 'refused' in host).map((host) => host.host);
    return {
      ok: up > 0,
      message:
        refused.length === 0
          ? `${up} of ${hosts.length} hosts answer`
          : `${up} of ${hosts.length} hosts usable; refused, their SSH user is root and allowRootSshUser is off: ${refused.join(', ')}`,
      details: { hosts },
    };
  }

  /** The SSH user's uid on each host, asked once per connection (a host set anew asks again). */
  readonly #sshUids = new WeakMap<FleetHost<C>, Promise<number>>();

  #sshUid(host: FleetHost<C>): Promise<number> {
    let asking = this.#sshUids.get(host);
    if (asking === undefined) {
      asking = this.run(host, 'id -u').then((result) => {
        const uid = Number(result.stdout.toString().trim());
        if (result.code !== 0 || !Number.isSafeInteger(uid))
          throw new GymError(
            'PROVIDER_ERROR',
            `cannot tell the SSH user's uid on ${host.name}: ${result.stderr.trim()}`,
          );
        return uid;
      });
      this.#sshUids.set(host, asking);
      asking.catch(() => this.#sshUids.delete(host));
    }
    return asking;
  }

  /** Why a host takes no sandbox because its SSH user is root; null when it may. */
  async #rootRefusal(host: FleetHost<C>): Promise<string | null> {
    if (host.allowRootSshUser || (await this.#sshUid(host)) !== 0) return null;
    return `the SSH user ${host.username} is root (uid 0) on ${host.name}: the agent's commands would run as uid 0 of the host, which may write its /proc/sys even with no capabilities; log in as an unprivileged user, or set allowRootSshUser: true on the host to accept it`;
  }

  /** The reachable host with the most free slots; PROVIDER_UNAVAILABLE or CAPACITY_EXCEEDED when none. */
  async pick(): Promise<FleetHost<C>> {
    const runtime = this.#options.runtime;
    const counts = await Promise.all(
      this.#hosts.map(async (host) => {
        try {
          return { host, used: (await this.listHost(host)).length };
        } catch {
          return { host, used: Number.POSITIVE_INFINITY };
        }
      }),
    );
    const free = counts
      .filter(({ host, used }) => used < host.maxSandboxes)
      .sort((left, right) => right.host.maxSandboxes - right.used - (left.host.maxSandboxes - left.used));
    const chosen = free[0];
    if (chosen === undefined) {
      const down = counts.filter(({ used }) => used === Number.POSITIVE_INFINITY).length;
      throw new GymError(
        down === counts.length ? 'PROVIDER_UNAVAILABLE' : 'CAPACITY_EXCEEDED',
        down === counts.length
          ? `no ${runtime} host answers`
          : `every reachable ${runtime} host is full (${counts.length - down} up, ${down} down)`,
      );
    }
    const refused = await this.#rootRefusal(chosen.host);
    if (refused !== null)
      throw new GymError('FORBIDDEN_BY_CONFIG', refused, {
        details: { host: chosen.host.name, setting: 'allowRootSshUser' },
      });
    return chosen.host;
  }

  statePath(host: FleetHost<C>, id: string): string {
    return posix.join(this.#stateDirectory(host), `${this.#options.namespace}.${id}.json`);
  }

  #stateDirectory(host: FleetHost<C>): string {
    return posix.join(host.workDirectory, this.#options.stateFolder ?? 'sandboxes');
  }

  /** Notes where a sandbox is (before its state file is written, so a failed create can be undone). */
  place(id: string, host: FleetHost<C>): void {
    this.#placement.set(id, host);
  }

  /** Forgets a sandbox's host and record (destroyed, or found gone). */
  forget(id: string): void {
    this.#placement.delete(id);
    this.#records.delete(id);
  }

  /** Writes a sandbox's state file on its host. SANDBOX_START_FAILED when it cannot. */
  async writeRecord(host: FleetHost<C>, id: string, record: SandboxRecord): Promise<void> {
    const statePath = this.statePath(host, id);
    const saved = await this.run(
      host,
      `mkdir -p ${shellJoin([posix.dirname(statePath)])} && cat > ${shellJoin([statePath])}`,
      Buffer.from(JSON.stringify(record)),
    );
    if (saved.code !== 0)
      throw new GymError('SANDBOX_START_FAILED', `cannot write ${statePath}: ${saved.stderr}`);
    this.#records.set(id, record);
  }

  /** A sandbox's state file, as cached or read from its host. */
  async record(host: FleetHost<C>, id: string): Promise<SandboxRecord> {
    const known = this.#records.get(id);
    if (known !== undefined) return known;
    const read = await this.run(host, shellJoin(['cat', this.statePath(host, id)]));
    if (read.code !== 0) throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
    const record = JSON.parse(read.stdout.toString()) as SandboxRecord;
    this.#records.set(id, record);
    return record;
  }

  /** Our sandboxes on one host: state files joined with the live containers. Throws when the host does not answer. */
  async listHost(host: FleetHost<C>): Promise<SandboxInfo[]> {
    const directory = this.#stateDirectory(host);
    const prefix = `${this.#options.namespace}.`;
    const states = await this.run(
      host,
      `for f in ${shellJoin([directory])}/${shellJoin([prefix])}*.json; do [ -f "$f" ] && cat "$f" && echo; done; true`,
    );
    const live = await this.#options.liveNames(host);
    const sandboxes: SandboxInfo[] = [];
    for (const line of states.stdout.toString().split('\n')) {
      if (line.trim() === '') continue;
      const { info } = JSON.parse(line) as { info: SandboxInfo };
      if (!live.has(this.#options.nameOf(info.id))) continue;
      this.#placement.set(info.id, host);
      sandboxes.push(info);
    }
    return sandboxes;
  }

  async list(filter: ListFilter = {}): Promise<SandboxListing> {
    const results = await Promise.all(
      this.#hosts.map(async (host) => {
        try {
          return { host, sandboxes: await this.listHost(host) };
        } catch (error) {
          return { host, error: error as Error };
        }
      }),
    );
    const sandboxes: SandboxInfo[] = [];
    const unreachable: SandboxListing['unreachable'] = [];
    for (const result of results) {
      if ('error' in result && result.error !== undefined) {
        unreachable.push({ scope: result.host.name, reason: result.error.message });
        continue;
      }
      for (const info of result.sandboxes ?? []) {
        if (!matchesListFilter(info, filter)) continue;
        sandboxes.push(info);
      }
    }
    return { sandboxes, unreachable };
  }

  /**
   * The host of a sandbox we know of (perhaps one that left the set: its connection is closed,
   * so a command there fails as unreachable); else found by listing every host.
   */
  async locate(id: string): Promise<FleetHost<C>> {
    if (!SANDBOX_ID.test(id)) throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
    const known = this.#placement.get(id);
    // A host that left and came back is a new connection: its sandboxes are found again by listing.
    if (
      known !== undefined &&
      (this.isMember(known) || !this.#hosts.some((host) => host.name === known.name))
    )
      return known;
    this.#placement.delete(id);
    await this.list();
    const found = this.#placement.get(id);
    if (found === undefined) throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
    return found;
  }

  async get(id: string): Promise<SandboxInfo> {
    const host = await this.locate(id);
    const found = this.isMember(host)
      ? (await this.listHost(host)).find((info) => info.id === id)
      : undefined;
    if (found === undefined) {
      this.forget(id);
      throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
    }
    return found;
  }

  /** Whether the sandbox is alive on the host; false when the host does not answer. */
  async exists(host: FleetHost<C>, id: string): Promise<boolean> {
    try {
      return (await this.listHost(host)).some((info) => info.id === id);
    } catch {
      return false;
    }
  }

  /**
   * The host of a sandbox to destroy, or null when there is nothing to reach: no such sandbox,
   * or its host left the set (then it is forgotten here).
   */
  async hostToDestroy(id: string): Promise<FleetHost<C> | null> {
    let host: FleetHost<C>;
    try {
      host = await this.locate(id);
    } catch (error) {
      if (isGymError(error, 'SANDBOX_NOT_FOUND')) return null;
      throw error;
    }
    if (!this.isMember(host)) {
      this.forget(id);
      return null;
    }
    return host;
  }

  /**
   * Removes (`removeLine`) the sandboxes created by `endedAt` on every host, then closes: the
   * reaping of an ended Slurm allocation's nodes. A host that no longer lets us in is passed over.
   */
  async removeCreatedBy(
    endedAt: number,
    removeLine: (host: FleetHost<C>, id: string) => string,
  ): Promise<void> {
    try {
      await Promise.all(
        this.hosts.map(async (host) => {
          for (const info of await this.listHost(host).catch(() => []))
            if (Date.parse(info.createdAt) <= endedAt)
              await this.run(host, removeLine(host, info.id)).catch(() => {});
        }),
      );
    } finally {
      this.close();
    }
  }

  close(): void {
    for (const host of this.#hosts) host.connection.close();
  }
}

function sameConfig<C extends HostConfig>(kept: FleetHost<C>, config: C): boolean {
  const { connection: _connection, ...settings } = kept;
  return canonical(settings) === canonical(config);
}

/** JSON with object keys in order, so equal settings compare equal whatever their key order. */
function canonical(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'undefined';
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  const entries = Object.entries(value)
    .filter(([, item]) => item !== undefined)
    .sort(([left], [right]) => left.localeCompare(right));
  return `{${entries.map(([key, item]) => `${JSON.stringify(key)}:${canonical(item)}`).join(',')}}`;
}
