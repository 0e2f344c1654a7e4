/**
 * The provider contract: what every sandbox backend implements.
 *
 * How the four backends map onto it:
 *
 * | operation | Docker | Kubernetes | Apptainer over SSH | Enroot over SSH |
 * | --- | --- | --- | --- | --- |
 * | create | create + start a labelled container whose main process idles under an init | a labelled Pod, wait for Ready | `apptainer instance start IMAGE NAME` on a chosen host, state in a labelled file beside it | `enroot create -n NAME IMAGE.sqsh` + `enroot start` held open in a long-lived SSH channel |
 * | exec | `docker exec` (one-shot) or a shell attached through one exec (session) | pods/exec over the WebSocket channel protocol | `apptainer exec instance://NAME` over an SSH channel | `enroot exec PID` over an SSH channel |
 * | files | tar through the engine's archive endpoints | tar through exec (`tar -x` / `tar -c`) | tar through an SSH exec into the instance | tar through an SSH exec into the container |
 * | destroy | force-remove the container (idempotent: a missing one is success) | delete the Pod | `apptainer instance stop -F NAME` | kill the start channel, `enroot remove -f NAME` |
 * | list | containers filtered by our labels | Pods filtered by label selector | `apptainer instance list --json` per host, joined with our state files | `enroot list` per host, joined with our state files |
 * | terminals (`openPty`) | an exec with `Tty`, resized through the engine | pods/exec with `tty` and the resize channel | an ssh2 channel with a pty request around `apptainer exec` | likewise, around `enroot exec` |
 * | gateway reach (`exposeGateway`) | a daemon-held listener in the container's network namespace, relayed to the gateway socket | a relay over the exec channel, or a Service plus a NetworkPolicy that admits only the Pod | the static relay run in the instance over an SSH channel, listening on the instance's own loopback and framed to the gateway socket (a port on the host's shared network would be open to every sandbox there) | likewise |
 * | toolchain check (`checkToolchain`) | the container's overlay2 folders read on the host (else the engine's change list), files through the archive endpoints of the container and of a never-started container of its image | none: exec and tar run inside the Pod | none yet (the host could read the instance's overlay over SSH) | none yet (the host could read the container's root folder over SSH) |
 * | images (`prepareImage`) | `docker import` of the root filesystem; a derived image or a build plan: a container of the base (no network), files written, commands run, committed with the settings | an image pushed to a registry the nodes pull from, or preloaded on them | a SIF built from the root filesystem, copied to the hosts | a squashfs of the root filesystem (`mksquashfs`), copied to the hosts |
 *
 * A backend that cannot store labels on the resource itself (Apptainer, Enroot) keeps the same
 * facts in a small file next to it, so a reaper that lost the daemon's state can still find
 * orphans by namespace.
 *
 * Timeouts kill every process the command started, not just the client of the call, and the
 * sandbox stays usable. How strong that is depends on the provider, which says so in
 * `capabilities.timeoutKill`:
 *
 * - Docker with the exec helper built, the daemon as root beside the engine and a cgroup v2
 *   hierarchy on the host (`cgroup`): each command, or each session's shell, runs in a cgroup of
 *   its own, entered before it can fork; a timeout kills that cgroup from the host. Nothing the
 *   command started survives, whatever it does to its environment, its session or the sandbox's
 *   binaries. A session's timeout kills its shell too and drops the session. Background jobs of a
 *   command that ended normally are moved out first, so they live on as they would elsewhere.
 *   (Only a sandbox given CAP_SYS_ADMIN by the operator could leave its cgroup.)
 * - Docker under gVisor (`runtime: runsc`) with the exec helper (`traced`): the host cannot tell
 *   the guest's processes apart, so each command, or each session's shell, runs traced (ptrace)
 *   by the helper inside the sandbox, every process it starts traced from birth; a timeout kills
 *   the tracer, and the guest kernel every process it traces. As strong as `cgroup` against what
 *   the command does to its environment, session or binaries; a command that kills its tracer
 *   kills itself; a traced command cannot use ptrace itself (strace, gdb). What an ended command
 *   left running is let go of, as with `cgroup`.
 * - Docker without one of those (a remote engine, no cgroup v2, the helper missing), and any
 *   provider with only a shell in the sandbox (`tagged`): each exec is tagged with `GYM_EXEC_ID`
 *   in its environment and a kill script inside the sandbox kills every process with the tag or
 *   in the session of one (`shared/kill-script.ts`; it uses only the shell's builtins). A process
 *   that clears its environment and leaves its session (`env -i setsid ...`), or an agent that
 *   replaced `/bin/sh`, survives it.
 * - Kubernetes (`providers/kubernetes/`), Apptainer (`providers/apptainer/`) and Enroot
 *   (`providers/enroot/`): `tagged`; none of them kills the command's cgroup (a Pod's container,
 *   an instance's own cgroup) from the node yet.
 */
import type { Readable } from 'node:stream';
import type { Clock } from '../core/clock.ts';
import type { ImageFilter, ImageFormat, ImageInfo, ImageSource } from '../core/image-source.ts';
import type { Logger } from '../core/logger.ts';
import type { StopProcessesResult } from '../core/schemas/api.ts';
import type { ExecRequest, ExecResult } from '../core/schemas/exec.ts';
import type { SandboxInfo, SandboxSpec } from '../core/schemas/sandbox.ts';
import type { ToolchainCheckRequest, ToolchainCheckResult } from '../core/schemas/toolchain.ts';
import type { PortRelay } from './shared/port-relay.ts';
import type { PtyChannel, PtyOpenOptions, PtyOpenRequest } from './shared/pty-channel.ts';
import type { RelayStats } from './shared/relay-stats.ts';
import type { SandboxTimes } from './shared/sandbox-identity.ts';

/** What a provider can do beyond the required operations. Asking for a missing one is `CAPABILITY_UNSUPPORTED`. */
export interface ProviderCapabilities {
  /** Persistent shells (`ExecRequest.session`), the fast path for many small commands. */
  sessions: boolean;
  /**
   * `snapshot()`: the backend's own copy of a sandbox's filesystem (Docker: commit to an image).
   * Without it the daemon still snapshots and forks through the provider-neutral archive of
   * `shared/archive-snapshot.ts`, which needs only exec and the archive operations.
   */
  snapshot: boolean;
  /**
   * A fork can carry memory and processes over, not only files (absent: false): `snapshot()`
   * takes `live` and returns a `checkpoint`, and `create()` takes it back as `restore`. Without it
   * a fork asking for `live` is `CAPABILITY_UNSUPPORTED`, never a silent files-only fork. A
   * provider that declares it may still refuse a live snapshot, with `CAPABILITY_UNSUPPORTED`,
   * when its backend turns out not to be set up for it (a Docker engine without `--experimental`).
   */
  liveFork?: boolean;
  /** `resources.gpus`. */
  gpus: boolean;
  /** `resources.diskMiB`. */
  diskLimit: boolean;
  /**
   * `resources.pidsLimit` is enforced per sandbox (absent: true). Without it the provider takes
   * the field but the backend's own limit applies instead: Kubernetes has no per-Pod pids field,
   * only the kubelet's node-wide `podPidsLimit`.
   */
  pidsLimit?: boolean;
  /**
   * `resources.memoryMiB` is enforced per sandbox and a command that passes it ends `oom`
   * (absent: true). Without it (Enroot has no cgroups of its own) the provider takes the field
   * and whatever bounds the host (a Slurm allocation's cgroup) applies instead.
   */
  memoryLimit?: boolean;
  /**
   * What a command over its sandbox's memory or pids limit takes down (absent: `command`): only
   * itself (the kernel's OOM killer ends it, a fork fails), or the whole `sandbox`, reported as
   * lost with the reason (gVisor: its kernel lives inside the limits it enforces).
   */
  limitOverrun?: 'command' | 'sandbox';
  /**
   * A command can end its sandbox by killing the sandbox's first process (absent: false): gVisor
   * delivers a SIGKILL to PID 1 from inside, where Linux ignores it. The command's result then
   * says its sandbox was lost by what ran in it (`sandboxLost`, with the reason), never
   * `sandbox_gone`.
   */
  keeperKillable?: boolean;
  /** Commands run as other users than root (`user`; absent: true). */
  otherUsers?: boolean;
  /**
   * The `network` modes (our names) the backend has; the manager refuses any other with
   * `CAPABILITY_UNSUPPORTED`. A provider may allow fewer by its operator's settings and refuse
   * the rest at create (`FORBIDDEN_BY_CONFIG`).
   */
  networkModes: ReadonlyArray<SandboxSpec['network']>;
  /**
   * `spec.services`: a task's other containers beside the sandbox, sharing its network namespace
   * (names resolve to 127.0.0.1), created and health-checked with it and destroyed with it
   * (absent: false, and a spec with services is `CAPABILITY_UNSUPPORTED`).
   */
  services?: boolean;
  /** `exposeGateway()`: the daemon's model gateway reachable from inside a sandbox, at a URL the provider chooses. */
  gatewayReach: boolean;
  /**
   * `openPortRelay()`: the spec's declared `ports` reached from the daemon through the relay over
   * the exec channel (absent: false, and a spec that declares ports is refused at create).
   */
  ports?: boolean;
  /**
   * How a timeout finds what a command started (see the top of this file): `cgroup` from outside
   * the sandbox, which nothing inside can escape; `traced` by the command's tracer inside the
   * sandbox, which nothing it traces can leave; `tagged` by a script inside the sandbox, which a
   * command that clears its environment and leaves its session escapes.
   */
  timeoutKill: 'cgroup' | 'traced' | 'tagged';
  /** `stopProcesses()`: stop every process in a sandbox but its keeper, before a verifier runs. */
  stopProcesses: boolean;
  /**
   * `checkToolchain()`: which of the files a verifier's tools are made of differ from the image,
   * seen from outside the sandbox (absent: false). Without it a verifier cannot tell that it runs
   * on the agent's tools.
   */
  toolchainCheck?: boolean;
  /**
   * The image sources `prepareImage()` accepts (see `ImageSource`); absent or empty: the provider
   * has no image part, and preparing an image on it is `CAPABILITY_UNSUPPORTED` (its images are
   * made by other means, and specs name them as they are).
   */
  imageFormats?: ReadonlyArray<ImageFormat>;
  /**
   * `openPty()`: terminals (PTY sessions) inside a sandbox, with resize (absent: false). Without
   * it opening one is `CAPABILITY_UNSUPPORTED`.
   */
  pty?: boolean;
}

// The image sources a provider turns into what it runs: below the providers (the builder in
// images/ makes them), so they live in core/ and are named here for the providers' imports.
export type {
  DerivedImageSource,
  ImageBuildStep,
  ImageConfig,
  ImageFilter,
  ImageFormat,
  ImageInfo,
  ImagePlanSettings,
  ImageSource,
  PlanImageSource,
  RootfsImageSource,
} from '../core/image-source.ts';

/** What `snapshot()` is asked for. */
export interface SnapshotOptions {
  /** The image to commit to (a name the operator allows, or a managed name the daemon chose). */
  image: string;
  /**
   * Labels of the daemon's snapshot record (its id, namespace, expiry), written onto the image
   * where the backend stores labels, so a reaper without the daemon's state can find it.
   */
  labels?: Record<string, string>;
  /**
   * A managed snapshot's record id (`snp_...`): the provider names the image itself from it
   * (Docker: `gym-snapshot/<namespace>:<id>`), whatever the operator's allowed names, and `image`
   * is ignored. Such a snapshot never replaces an image that is not one, carries none of the
   * sandbox's spec env, and `deleteSnapshot` removes it.
   */
  managedId?: string;
  /** The most bytes the snapshot may add to its base image; past it, `SNAPSHOT_TOO_LARGE` and nothing is made. */
  maxBytes?: number;
  /**
   * Memory and processes too (the `liveFork` capability; a managed snapshot only): the result
   * carries a `checkpoint` that `create()` restores. The sandbox keeps running with its
   * processes; what the provider cannot carry over it refuses before it touches the sandbox.
   */
  live?: boolean;
}

/** What `snapshot()` made. */
export interface SnapshotResult {
  /** What a spec names to start from it, exactly (opaque: a backend may store it its own way). */
  image: string;
  /** Its size, where the backend tells it. */
  sizeBytes?: number;
  /**
   * With `live`: what `create()` takes as `restore` to start a sandbox of `image` with the
   * processes and memory the sandbox had (opaque; `deleteSnapshot(image)` removes it too).
   */
  checkpoint?: string;
}

export type { RelayStats };

/** What the composition root hands every provider. */
export interface ProviderContext {
  /** Separates deployments sharing one backend; every resource is labelled with it. */
  namespace: string;
  /** Identifies the daemon instance that creates resources (for humans and reapers). */
  daemonId: string;
  logger: Logger;
  clock: Clock;
  /**
   * The hard deadline given to every resource, in seconds after its creation. No lease renewal
   * goes past it, and a reaper may destroy a resource after it without asking anyone.
   */
  maxLifetimeSeconds: number;
  /**
   * A directory of this provider's own (`<daemon state>/providers/<name>/`, mode 0700), kept
   * across restarts of the daemon: what the provider must find again after a crash and the
   * backend cannot tell it (a Slurm job id, a host inventory, relay records). It exists when the
   * factory is called and is empty on the first start. Nothing else writes there; a provider that
   * keeps nothing ignores it. Files holding secrets should be written 0600.
   */
  stateDirectory: string;
}

export interface CreateOptions {
  /** The sandbox id to use (the daemon chooses ids so it can record them first); generated if absent. */
  id?: string;
  /**
   * The sandbox's creation time, lease and deadline, as the daemon computed them
   * (`providers/shared/sandbox-identity.ts`); computed the same way if absent. A provider reports
   * them as given and does no lease arithmetic of its own.
   */
  times?: SandboxTimes;
  /** The pool the sandbox belongs to, written into its labels. */
  pool?: string | null;
  /**
   * A live snapshot's `checkpoint` (the `liveFork` capability): the sandbox starts with the
   * processes and memory it holds, on the snapshot's image (which the spec names). A restore that
   * fails fails the create, with `SANDBOX_START_FAILED`, and leaves nothing behind.
   */
  restore?: string;
}

export interface ExecOptions {
  /** Called with each chunk of output as it arrives, before truncation (for streaming APIs). */
  onOutput?: (stream: 'stdout' | 'stderr', chunk: Buffer) => void;
  /**
   * Aborting it cancels the command exactly as its timeout would (every process it started is
   * killed); the result's status is then `killed`. A streamed exec whose client goes away aborts.
   */
  signal?: AbortSignal;
}

export interface WriteFileOptions {
  /** Permission bits of the new file; default 0o644. */
  mode?: number;
}

export interface ListFilter {
  /** Only sandboxes carrying all of these user labels. */
  labels?: Record<string, string>;
  /** Only sandboxes of this pool (`null`: only those of no pool). */
  pool?: string | null;
  /** Only sandboxes created by this daemon id; default: any daemon of our namespace. */
  daemonId?: string;
}

/**
 * A part of a backend that a listing could not see: the engine (Docker), the API server
 * (Kubernetes: one scope for the whole cluster), one host (SSH: one scope per host, so one host
 * down hides only its own sandboxes).
 */
export interface UnreachableScope {
  /**
   * The part, as `SandboxInfo.scope` names it for the sandboxes it holds (a host name); for a
   * backend of one part, any stable name (`engine`): its sandboxes carry no scope and all are
   * hidden with it.
   */
  scope: string;
  /** Why it could not be seen, for logs and humans. */
  reason: string;
}

/** What `list()` saw, and what it could not. */
export interface SandboxListing {
  /** Complete for every part of the backend not named in `unreachable`. */
  sandboxes: SandboxInfo[];
  /** Empty when the whole backend answered. */
  unreachable: UnreachableScope[];
}

/** How to turn on a capability the provider lacks as configured (`SandboxProvider.capabilityHints`). */
export type CapabilityHints = Partial<Record<'gpus' | 'diskLimit', string>>;

export interface ProviderHealth {
  ok: boolean;
  /** What was checked or what is wrong, for `gym doctor` and `/healthz`. */
  message: string;
  details?: Record<string, unknown>;
}

/** A file's content: bytes in memory, or a stream with its exact length (tar needs it up front). */
export type FileContent = Uint8Array | { stream: Readable; sizeBytes: number };

/**
 * The version of this contract. A provider declares the version it was written against; the
 * registry refuses a module that declares another, so a third-party provider built for a future
 * contract fails at load with a clear message instead of misbehaving.
 */
export const PROVIDER_SPECIFICATION_VERSION = 1;

export interface SandboxProvider {
  /** The contract version the provider implements; absent means 1 (providers written before it existed). */
  readonly specificationVersion?: typeof PROVIDER_SPECIFICATION_VERSION;
  /** The registry name (`docker`, `kubernetes`, ...). */
  readonly name: string;
  readonly capabilities: ProviderCapabilities;
  /** How the operator turns on a capability this provider lacks as configured (shown when it is refused). */
  readonly capabilityHints?: CapabilityHints;

  /** Whether the backend answers. Never throws. */
  health(): Promise<ProviderHealth>;

  /**
   * Creates a sandbox and returns once it is ready: running, seed files written, readiness probe
   * passed. A create that fails tears down everything it made before it throws.
   * @throws GymError `IMAGE_NOT_FOUND`, `CAPABILITY_UNSUPPORTED`, `SANDBOX_START_FAILED`,
   *   `VALIDATION_FAILED` (bad `providerOptions`), `FORBIDDEN_BY_CONFIG` (an option that reaches
   *   the host and the operator did not allow), `PROVIDER_UNAVAILABLE`, `PROVIDER_ERROR`.
   */
  create(spec: SandboxSpec, options?: CreateOptions): Promise<SandboxInfo>;

  /** @throws GymError `SANDBOX_NOT_FOUND` when no resource of our namespace has this id. */
  get(id: string): Promise<SandboxInfo>;

  /**
   * Every sandbox of our namespace matching the filter, in any state, that the backend could
   * show. A part of the backend that did not answer (or failed to list) is named in
   * `unreachable` rather than thrown, so the daemon keeps what it could not see instead of taking
   * it for gone; every other part's listing is complete. Does not throw for an unreachable part.
   */
  list(filter?: ListFilter): Promise<SandboxListing>;

  /**
   * Runs one command. A non-zero exit is a result, not an error; so are a timeout (all the
   * command's processes killed), an OOM kill and a sandbox that died mid-command (`sandbox_gone`).
   * Output is bounded per stream by `request.maxOutputBytes` (head and tail kept).
   * @throws GymError `SANDBOX_NOT_FOUND` when the sandbox does not exist;
   *   `CAPABILITY_UNSUPPORTED` for `request.session` without the `sessions` capability.
   */
  exec(id: string, request: ExecRequest, options?: ExecOptions): Promise<ExecResult>;

  /**
   * Writes one file at an absolute path, creating missing parent directories. Replaces an
   * existing file.
   * @throws GymError `SANDBOX_NOT_FOUND`, `PATH_KIND_MISMATCH` (the path is a directory).
   */
  writeFile(id: string, path: string, content: FileContent, options?: WriteFileOptions): Promise<void>;

  /**
   * Streams one file's bytes out. Symbolic links are followed.
   * @throws GymError `SANDBOX_NOT_FOUND`, `FILE_NOT_FOUND`, `PATH_KIND_MISMATCH` (a directory).
   */
  readFile(id: string, path: string): Promise<Readable>;

  /**
   * Extracts a tar archive into a directory (created if missing). Every entry is checked first:
   * an absolute name, a `..` that climbs out, a link that points outside, or a device entry
   * refuses the whole archive and nothing is written.
   * @throws GymError `ARCHIVE_UNSAFE`, `SANDBOX_NOT_FOUND`, `VALIDATION_FAILED` (not a tar).
   */
  writeArchive(id: string, directory: string, archive: Readable): Promise<void>;

  /**
   * Streams a tar of a directory's contents, entry names relative to the directory (so the
   * archive can be written into another directory as it is). A file path gives a one-entry tar.
   * @throws GymError `SANDBOX_NOT_FOUND`, `FILE_NOT_FOUND`.
   */
  readArchive(id: string, directory: string): Promise<Readable>;

  /** Destroys the sandbox and everything it holds. Idempotent: a missing sandbox is success. */
  destroy(id: string): Promise<void>;

  /**
   * Commits the sandbox's filesystem to an image usable in later specs. The returned `image` is
   * opaque: a spec names it exactly as returned, and it need not equal the name asked for (a
   * backend may store a snapshot as a file of its own naming, say).
   * Optional: present only with the `snapshot` capability.
   * @throws GymError `FORBIDDEN_BY_CONFIG` when the image name is outside what the operator allows.
   */
  snapshot?(id: string, options: SnapshotOptions): Promise<SnapshotResult>;

  /**
   * Removes an image this provider's `snapshot()` made (the daemon's reaper calls it when a
   * managed snapshot expires). Refuses, with `FORBIDDEN_BY_CONFIG`, an image that is not a
   * snapshot of this namespace. Idempotent: a missing image is success.
   * Optional: present only with the `snapshot` capability.
   */
  deleteSnapshot?(image: string): Promise<void>;

  /**
   * The image part (optional, all three together, with a non-empty `capabilities.imageFormats`).
   * What a provider implements to run the images the project builds itself:
   *
   * `prepareImage` turns a source of one of its `imageFormats` into what the backend runs,
   * stored so that a spec naming `source.reference` (or an alias) starts from it. It replaces an
   * image of that reference. A failure leaves no half-made image under the reference.
   * @throws GymError `CAPABILITY_UNSUPPORTED` (a format it lacks), `IMAGE_NOT_FOUND` (a derived
   *   or plan source's base), `VALIDATION_FAILED` (a derived source's command or a plan's step
   *   failed; the message ends with its output; neither image nor build container is left), `PROVIDER_UNAVAILABLE`, `PROVIDER_ERROR`.
   */
  prepareImage?(source: ImageSource): Promise<void>;

  /** The image a spec naming `reference` would start from, or null when the backend has none. */
  inspectImage?(reference: string): Promise<ImageInfo | null>;

  /** Images of the backend matching the filter, one entry per reference, newest first. */
  listImages?(filter?: ImageFilter): Promise<ImageInfo[]>;

  /**
   * Makes the daemon's model gateway reachable from inside one sandbox, and returns the URL an
   * agent there must use as the gateway's origin (`http://host:port`, no path: the gateway's
   * routes go under it). How is the provider's choice, and so is the port: a relay into the
   * sandbox's network namespace (Docker), a reverse forward on a free port of the host it runs on
   * (SSH), a Service with a NetworkPolicy or a relay over the exec channel (Kubernetes). Whatever
   * the mechanism, a provider guarantees:
   *
   * - **Only that sandbox**: the URL works from inside this sandbox and is no way into the
   *   gateway, or anything else, for other sandboxes or the network.
   * - **Only the gateway**: every connection to the URL goes to `socketPath` (a unix socket of
   *   the daemon's host, serving the model routes alone; the daemon gives each sandbox one of its
   *   own and knows which sandbox asks by the socket a connection arrives on, so never join one
   *   sandbox's connections to another's) and nowhere else. The sandbox gains no
   *   other route: not to the daemon's API, the host, the engine or another sandbox.
   * - **Idempotent**: another call for the same sandbox returns the same URL and opens nothing
   *   more; two sandboxes never collide (on one host, each gets its own port or namespace).
   * - **Same URL after a restart**: the agent inside keeps the URL it was given while the daemon
   *   restarts. A restarted daemon calls again with the URL it recorded (`options.url`), and the
   *   provider restores reach at exactly that URL, or throws.
   * - **Released** by `destroy(id)`, and by `close()` (the sandbox then keeps running without
   *   reach until a daemon restores it). A daemon killed with -9 leaves no process behind that
   *   still relays: whatever the mechanism holds on the daemon's side dies with it.
   *
   * Optional: present only with the `gatewayReach` capability.
   * @throws GymError `SANDBOX_NOT_FOUND`, `SANDBOX_NOT_READY`, `CAPABILITY_UNSUPPORTED` (the
   *   backend or this host cannot, e.g. a Docker engine on another host), `PROVIDER_ERROR` (the
   *   recorded URL cannot be restored, or the mechanism failed).
   */
  exposeGateway?(id: string, options: { socketPath: string; url?: string }): Promise<{ url: string }>;

  /** What the relays of `exposeGateway` hold now, for metrics. Optional, with `gatewayReach`. */
  relayStats?(): RelayStats;

  /**
   * Starts the static relay in connect mode in the sandbox (`shared/port-relay.ts`) over one
   * long-lived exec channel of the provider's own, and resolves once it is ready: each connection
   * the daemon opens through it reaches 127.0.0.1:PORT inside that sandbox and nowhere else. It
   * opens no network: a sandbox whose network is `none` keeps none. Which ports may be asked is
   * the daemon's check (the spec's `ports`), not the provider's. Each call starts a new relay; the
   * daemon keeps one per sandbox and closes it at destroy. The relay dies with the sandbox, and
   * with the daemon (its stdin ends).
   * Optional: present only with the `ports` capability.
   * @throws GymError `SANDBOX_NOT_FOUND`, `SANDBOX_NOT_READY`, `CAPABILITY_UNSUPPORTED` (no relay
   *   binary on this host), `PROVIDER_ERROR` (the relay did not start).
   */
  openPortRelay?(id: string): Promise<PortRelay>;

  /**
   * Kills every process in the sandbox except what keeps it alive (its init and idle keeper),
   * with no process able to fork or escape meanwhile, and drops its sessions. The sandbox stays
   * ready and its files untouched. What a verifier calls so that no agent process runs while it
   * judges. Idempotent.
   * Optional: present only with the `stopProcesses` capability.
   * @returns how many processes were killed.
   * @throws GymError `SANDBOX_NOT_FOUND`, `SANDBOX_NOT_READY`, `PROVIDER_ERROR` (processes kept
   *   appearing, or the host refused the kill).
   */
  stopProcesses?(id: string): Promise<StopProcessesResult>;

  /**
   * Which files that a verifier's interpreters and tools consist of, or that they read before any
   * test code (the loader's configuration, python's startup files, the test runner's package),
   * differ from the sandbox's pristine image, by the rules of `shared/toolchain-rules.ts`. Seen
   * from outside the sandbox only: nothing runs in it, so nothing the agent left there can answer
   * for it. Called with the sandbox's processes stopped. Read-only and idempotent.
   * Optional: present only with the `toolchainCheck` capability.
   * @throws GymError `SANDBOX_NOT_FOUND`, `PROVIDER_ERROR` (the backend could not show the files).
   */
  checkToolchain?(id: string, request: ToolchainCheckRequest): Promise<ToolchainCheckResult>;

  /**
   * Starts one program inside the sandbox on a terminal of its own (or on pipes, `tty: false`) and
   * returns its transport (`shared/pty-channel.ts`): output to `options.onOutput` as it comes,
   * input, resize, and its end. The daemon keeps the output, signals the program and ends it (by
   * the `GYM_EXEC_ID` tag in `request.env`, through `exec`); the provider only carries bytes. A
   * program started so dies with its sandbox.
   * Optional: present only with the `pty` capability.
   * @throws GymError `SANDBOX_NOT_FOUND`, `SANDBOX_NOT_READY`, `PROVIDER_ERROR`.
   */
  openPty?(id: string, request: PtyOpenRequest, options: PtyOpenOptions): Promise<PtyChannel>;

  /** Releases connections and sessions (does not destroy sandboxes). */
  close(): Promise<void>;
}

/** What a provider module (built-in or third-party) exports. */
export type SandboxProviderFactory = (
  options: unknown,
  context: ProviderContext,
) => SandboxProvider | Promise<SandboxProvider>;
