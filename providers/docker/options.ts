/**
 * The Docker provider's options and the fixed settings every sandbox container gets: the
 * capabilities it keeps, its keeper's idle loop, its read-only paths, and the limits of an image
 * build.
 */
import { z } from 'zod';
import { NetworkModeSchema, ResourcesSchema } from '../../core/schemas/sandbox.ts';
import { DEFAULT_RELAY_HELPER_PATH } from '../shared/gateway-relay.ts';
import { DEFAULT_SNAPSHOT_IMAGE_PREFIX } from './host-access.ts';
import { ImageSourcesSchema } from './image-sources.ts';
import { DEFAULT_EXEC_HELPER_PATH } from './process-control.ts';
/**
 * The few capabilities a shell, a package manager and a test suite need when running as root in
 * the sandbox; everything else Docker grants by default (raw sockets, mknod, chroot, ...) is dropped.
 */
export const DEFAULT_CAPABILITIES = ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'FSETID', 'KILL', 'SETGID', 'SETUID'];

/** Keeps the container alive doing nothing; the init process (tini) reaps zombies under it. */
export const IDLE_SCRIPT = "trap 'exit 0' TERM INT; while :; do sleep 86400 & wait $!; done";

/**
 * The engine's default read-only paths (HostConfig.ReadonlyPaths replaces them, so they are
 * repeated), and the OOM score of the keeper, PID 1: root in the container could otherwise raise
 * it to 1000 (raising needs no capability), fill its memory, and have the kernel's OOM killer end
 * the keeper, and with it the sandbox. Left at 0 and out of reach, the keeper, the smallest
 * process there, is the OOM killer's last choice. (Lowering it, which would make it immune,
 * needs CAP_SYS_RESOURCE in the engine, which not every host grants; `task/1` is the same
 * process's other name.)
 */
export const SANDBOX_READONLY_PATHS = [
  '/proc/bus',
  '/proc/fs',
  '/proc/irq',
  '/proc/sys',
  '/proc/sysrq-trigger',
  '/proc/1/oom_score_adj',
  '/proc/1/oom_adj',
  '/proc/1/task/1/oom_score_adj',
  '/proc/1/task/1/oom_adj',
];

/**
 * Limits of an image build unless the options say otherwise: the values of the daemon's default
 * `defaults.resources` (a test holds them equal), which run a package install or a test suite.
 */
export const DEFAULT_BUILD_RESOURCES = { cpus: 2, memoryMiB: 4096, pidsLimit: 1024 } as const;

export const DockerProviderOptionsSchema = z
  .object({
    /** The engine's unix socket; default /var/run/docker.sock (or DOCKER_HOST as dockerode reads it). */
    socketPath: z.string().optional(),
    /** Run tini as PID 1 to reap zombies (recommended). */
    init: z.boolean().default(true),
    /** The engine has GPUs and the NVIDIA runtime: allow `resources.gpus`. */
    gpus: z.boolean().default(false),
    /** Storage is overlay2 on xfs with pquota: allow `resources.diskMiB`. */
    diskQuota: z.boolean().default(false),
    /** An OCI runtime other than the engine's default (for example `runsc` for gVisor). */
    runtime: z.string().optional(),
    /**
     * Gateway reach (`exposeGateway`): a port on the sandbox's loopback relayed to the daemon's
     * gateway socket (the engine must run on this host and the daemon as root, with `nsenter`):
     * how agents in network-less sandboxes reach the gateway. The daemon itself holds the
     * listening socket; see `gateway-relay.ts` for what a relay costs.
     */
    gatewayReach: z.boolean().default(true),
    /** Open relay connections per sandbox at most; one more is closed at once. */
    relayMaxConnections: z.number().int().positive().max(4096).default(32),
    /**
     * A relay connection with no traffic for this long is closed. Above the gateway's default
     * upstream timeout (10 min), so a slow model answer is never cut.
     */
    relayIdleTimeoutMs: z
      .number()
      .int()
      .positive()
      .default(15 * 60_000),
    /**
     * The static exec helper (`exec-helper/gym-exec.c`, built by scripts/setup.sh) mounted into
     * every sandbox, so a timed-out command is killed from the host through its own cgroup. When
     * it is missing (or the host has no cgroup v2, or the engine is remote), timeouts fall back to
     * a kill script inside the sandbox, and `capabilities.timeoutKill` says `tagged`.
     */
    execHelperPath: z.string().startsWith('/').default(DEFAULT_EXEC_HELPER_PATH),
    /**
     * The static relay (`../shared/relay-helper/gym-relay.c`, built by scripts/setup.sh) that
     * carries a spec's declared `ports` over an exec (`port-relay.ts`); without it, opening a
     * port is `CAPABILITY_UNSUPPORTED`.
     */
    relayHelperPath: z.string().startsWith('/').default(DEFAULT_RELAY_HELPER_PATH),
    /**
     * Whether a confined session shell talks to the daemon over pipes the exec helper makes
     * (`session-pipes.ts`), not through the engine's exec stream. On by default; off is how it
     * worked before, kept for comparison (`bench:scale --engine-sessions`) and as a way back.
     */
    sessionPipes: z.boolean().default(true),
    /**
     * Host directories that `readOnlyBinds` may mount (each with what lies under it; symbolic
     * links are resolved before the check). Default none. The engine's socket, or a directory
     * holding it, is refused unless listed exactly: it makes the sandbox root on the host.
     */
    allowedHostPaths: z.array(z.string().startsWith('/')).default([]),
    /** Capabilities that `capAdd` may add beyond the defaults. Default none. */
    allowedCapabilities: z.array(z.string().regex(/^[A-Z_]+$/)).default([]),
    /** The `network` modes specs may ask for. Default `none` only: `host` shares the host's network. */
    allowedNetworkModes: z
      .array(NetworkModeSchema)
      .refine((modes) => modes.includes('none'), 'must include none, the mode of every spec that names none')
      .default(['none']),
    /**
     * Image name prefixes that `snapshot` may write; a snapshot never replaces an existing image
     * that is not itself a snapshot. Default `gym-snapshot/`, so base images stay untouched.
     */
    snapshotImagePrefixes: z.array(z.string().min(1)).default([DEFAULT_SNAPSHOT_IMAGE_PREFIX]),
    /**
     * Limits of the containers that build images (a plan's steps, a derived image's command):
     * they run commands from datasets (a Dockerfile's RUN lines, a task's setup), which must not
     * fork-bomb the host or take its memory. Each unset field defaults to the same value as the
     * daemon's `defaults.resources`.
     */
    /**
     * Where a missing image may be loaded from (a folder of `docker save` tarballs, a registry
     * mirror of the operator's); nothing is pulled without it. See `image-sources.ts`.
     */
    imageSources: ImageSourcesSchema.default({}),
    buildResources: z
      .object({
        cpus: ResourcesSchema.shape.cpus.unwrap().default(DEFAULT_BUILD_RESOURCES.cpus),
        memoryMiB: ResourcesSchema.shape.memoryMiB.unwrap().default(DEFAULT_BUILD_RESOURCES.memoryMiB),
        pidsLimit: ResourcesSchema.shape.pidsLimit.unwrap().default(DEFAULT_BUILD_RESOURCES.pidsLimit),
      })
      .strict()
      .prefault({}),
  })
  .strict();
export type DockerProviderOptions = z.input<typeof DockerProviderOptionsSchema>;
