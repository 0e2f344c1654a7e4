/**
 * What a container runtime reached over SSH fills in for the SSH-runtime provider
 * (`./ssh-runtime-provider.ts`): how to start one sandbox on a host, enter it, tell it is gone,
 * stop its processes and remove it, and how its images sit on a host. The fleet, placement, state
 * files, Slurm, exec and its timeout kill, sessions, files, the relay and the image store are the
 * provider's, the same for every runtime.
 */
import type { Readable } from 'node:stream';
import type { SandboxSpec } from '../../core/schemas/sandbox.ts';
import type { DerivedImageSource, ProviderCapabilities, ProviderContext } from '../sandbox-provider.ts';
import type { AbnormalEnd } from '../shared/abnormal-end.ts';
import type { KillScope } from '../shared/kill-script.ts';
import type { FleetHost, HostConfig, RemoteResult } from '../ssh/host-fleet.ts';

export type { KillScope };

/** Where the host's static busybox is bound in every sandbox (file transfers, the exec wrapper). */
export const TOOLS = '/.gym-tools/busybox';
/** Where the relay is bound in every sandbox started with gateway reach. */
export const RELAY_IN_SANDBOX = '/.gym-tools/gym-relay';
export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * argv run through the bound busybox: `env -i` with exactly `env`, then its shell enters `cwd`
 * (one the sandbox lacks is a shell's 126 with its message) and executes argv; `label` is `$0`.
 */
export function wrappedArgv(
  env: Record<string, string>,
  cwd: string,
  argv: string[],
  label: string,
): string[] {
  const variables = Object.entries(env).map(([key, value]) => `${key}=${value}`);
  const enterCwd = [TOOLS, 'sh', '-c', 'cd "$1" || exit 126; shift; exec "$@"', label, cwd];
  return [TOOLS, 'env', '-i', ...variables, ...enterCwd, ...argv];
}

/** What the provider lends its driver. */
export interface RuntimeAccess<H extends HostConfig> {
  context: ProviderContext;
  /** Runs a shell line on a host, collecting its output (the fleet's `run`). */
  run(host: FleetHost<H>, command: string, stdin?: Buffer | Readable): Promise<RemoteResult>;
  /** The runtime's container name of a sandbox (`gym-<namespace>-<id>`). */
  nameOf(id: string): string;
  /** A sandbox's state file on its host. */
  statePath(host: FleetHost<H>, id: string): string;
  /** Whether the sandbox is alive on the host (state file and runtime listing); false when it does not answer. */
  exists(host: FleetHost<H>, id: string): Promise<boolean>;
}

/** A new sandbox for `start`: its container name, image path on the host and relay path (null: no reach). */
export interface SandboxStart {
  id: string;
  name: string;
  image: string;
  relay: string | null;
  spec: SandboxSpec;
}

/**
 * The shell lines that make a derived image at `partial` on a host: `prepare` makes the working
 * copy from the base and unpacks the recipe's files (a tar on stdin) into its working directory;
 * `run` runs the recipe's command there, contained; `seal` makes `partial` from the working copy
 * when it is not `partial` itself; `cleanup` removes what they left after a failure.
 */
export interface DerivedSteps {
  prepare: string;
  run: string;
  seal: string | null;
  cleanup: string;
}

/** How a runtime's images sit on a host and in this daemon's state directory. */
export interface RuntimeImageFormat<H extends HostConfig> {
  /** Appended to an image's name on a host: `''` for a sandbox directory, `.sqsh` for a file. */
  readonly hostSuffix: string;
  /** The `test` flag that finds one there. */
  readonly hostTest: '-d' | '-f';
  /** Appended to the cache path of what this daemon keeps per reference (`.tar`, `.sqsh`). */
  readonly cacheSuffix: string;
  /** Keeps the builder's root filesystem in `cacheFile` (content-addressed: one already there stays right). */
  keepRootfs(cacheFile: string, rootfs: Readable): Promise<void>;
  /** A shell line that makes `partial` (beside `target`) on the host from the cache file on its stdin. */
  unpackLine(partial: string, target: string): string;
  /** The steps for `source` from its base at `basePath`; `environment` is the command's `K=V` list. */
  derivedSteps(
    host: FleetHost<H>,
    source: DerivedImageSource,
    basePath: string,
    partial: string,
    environment: string[],
  ): DerivedSteps;
}

/**
 * One runtime over SSH. `Target` is what entering a sandbox takes (an instance name, a keeper's
 * pid and start time); the driver may look it up and remember it.
 */
export interface SshRuntimeDriver<H extends HostConfig, Target> {
  /** The runtime's name: the provider's, the fleet's and in messages. */
  readonly runtime: string;
  /** Capabilities that differ from the SSH runtimes' defaults. */
  readonly capabilities: Partial<ProviderCapabilities>;
  /** The state files' folder under each host's work directory (the fleet's default when absent). */
  readonly stateFolder?: string;
  readonly images: RuntimeImageFormat<H>;
  /** The shell line that prints the runtime's version (health). */
  versionLine(host: FleetHost<H>): string;
  /** The names of the runtime's live sandboxes on a host; throws when it does not answer. */
  liveNames(host: FleetHost<H>): Promise<Set<string>>;
  /** Starts the sandbox (its state file is written); SANDBOX_START_FAILED when it does not start. */
  start(host: FleetHost<H>, sandbox: SandboxStart): Promise<void>;
  /** What entering the sandbox takes; null when it is gone. */
  target(host: FleetHost<H>, id: string): Promise<Target | null>;
  /**
   * The shell line that runs argv in the sandbox, tagged with `tag` from its first process (the
   * timeout kill finds it by it), with the user flags `as` (from `userFlags`).
   */
  enter(
    host: FleetHost<H>,
    target: Target,
    argv: string[],
    options?: { tag?: string; as?: string[] },
  ): string;
  /** Whether the stderr of an entry that exited 255 says the sandbox is not there. */
  isGone(stderr: string): boolean;
  /** The entry flags that run as uid:gid (`user` as asked, for messages); throws when the runtime cannot. */
  userFlags(uid: number, gid: number, user: string): string[];
  /** Why a command ended abnormally (`sigkilled`: by SIGKILL): gone, OOM-killed, or killed. */
  abnormalEnd(host: FleetHost<H>, id: string, sigkilled: boolean): Promise<AbnormalEnd>;
  /** Where a timeout kill acts; null when the sandbox runs nothing any more. */
  killScope(host: FleetHost<H>, target: Target): Promise<KillScope | null>;
  /** A shell line that kills every process of the sandbox but its init and prints how many. */
  stopLine(host: FleetHost<H>, id: string, target: Target): Promise<string>;
  /** A shell line that stops and removes the sandbox and its state file (destroy, Slurm reaping). */
  removeLine(host: FleetHost<H>, id: string): string;
  /** The sandbox was seen gone: drop what was remembered of its target. */
  lost(id: string): void;
  /** The sandbox was destroyed: drop all that was remembered of it. */
  forget(id: string): void;
}
