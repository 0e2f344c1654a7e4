import { z } from 'zod';
import { AbsolutePathSchema, EnvSchema, ExecArgumentSchema, LabelsSchema } from './common.ts';
import { EntrypointSchema, HealthCheckSchema } from './service.ts';
import { ServicesSchema } from './services.ts';

/** One week: a lease longer than this is almost always a forgotten sandbox. */
export const MAX_TTL_SECONDS = 7 * 24 * 3600;
/** One hour: long enough for a SWE-bench rollout, short enough that a leak costs little. */
export const DEFAULT_TTL_SECONDS = 3600;

/**
 * The smallest CPU limit: Docker counts in billionths of a CPU and a value that rounds to 0
 * means "no limit", and a sandbox slower than 1% of a core cannot run a shell in time anyway.
 */
export const MIN_CPUS = 0.01;
/** The smallest pids limit: tini, a shell, the command and a kill helper must fit. */
export const MIN_PIDS_LIMIT = 8;
/** One seed file's content (characters, base64 or UTF-8): what a create body (16 MiB) can carry. */
export const MAX_SEED_FILE_CHARS = 16 * 1024 * 1024;

export const ResourcesSchema = z
  .object({
    /** CPU cores, fractional allowed (0.5 = half a core). */
    cpus: z
      .number()
      .min(MIN_CPUS, {
        message: `must be at least ${MIN_CPUS} (smaller values round to no limit at all)`,
      })
      .max(1024)
      .optional(),
    /** Memory limit in MiB; swap is capped at the same value so the limit is real. */
    memoryMiB: z
      .number()
      .int()
      .min(6)
      .max(16 * 1024 * 1024)
      .optional(),
    /** Maximum number of processes and threads in the sandbox. */
    pidsLimit: z
      .number()
      .int()
      .min(MIN_PIDS_LIMIT, {
        message: `must be at least ${MIN_PIDS_LIMIT} (a shell, an init and a command need a few)`,
      })
      .max(4_194_304)
      .optional(),
    /** Writable-layer size limit in MiB (only where the provider's storage supports it). */
    diskMiB: z.number().int().positive().optional(),
    /** Number of GPUs (only where the provider declares the `gpus` capability). */
    gpus: z.number().int().nonnegative().max(64).optional(),
  })
  .strict();

export const ReadinessProbeSchema = z
  .object({
    /** The command to run; exit 0 means ready. Exactly one of argv or command. */
    argv: z.array(ExecArgumentSchema).min(1).max(1024).optional(),
    command: ExecArgumentSchema.min(1).optional(),
    /** How long to keep trying before the create fails and tears down what it made. */
    timeoutMs: z.number().int().positive().max(600_000).default(30_000),
    /** Pause between attempts. */
    intervalMs: z.number().int().positive().max(60_000).default(200),
  })
  .strict()
  .refine((probe) => (probe.argv === undefined) !== (probe.command === undefined), {
    message: 'a readiness probe needs exactly one of argv or command',
  });

export const SeedFileSchema = z
  .object({
    path: AbsolutePathSchema,
    content: z.string().max(MAX_SEED_FILE_CHARS),
    encoding: z.enum(['utf8', 'base64']).default('utf8'),
    /** Permission bits, e.g. 0o755 for a script. */
    mode: z.number().int().min(0).max(0o7777).default(0o644),
  })
  .strict();

export const NetworkModeSchema = z.enum(['none', 'host', 'bridge']);
export type NetworkMode = z.infer<typeof NetworkModeSchema>;

/**
 * One allow-list entry: a host name (`pypi.test`), every name under a suffix (`*.pypi.test`, not
 * `pypi.test` itself) or an IP literal, optionally with `:port` (`:*` any port; no port: 80 and
 * 443). Lower case; at most 253 characters of name.
 */
export const AllowedHostSchema = z
  .string()
  .min(1)
  .max(260)
  .regex(/^(\*\.)?[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:(\*|[0-9]{1,5}))?$|^\[[0-9a-f:.]+\](:(\*|[0-9]{1,5}))?$/, {
    message:
      'must be `host`, `*.suffix` or an IP literal (IPv6 in brackets), lower case, optionally `:port` or `:*`',
  });

/**
 * What a sandbox may reach through the daemon's egress proxy (the sandbox itself gets no route,
 * no DNS): `none` nothing, `allowlist` the hosts listed, `public` any public address. Capped by the
 * operator's `egress` configuration.
 */
export const NetworkPolicySchema = z
  .object({
    mode: z.enum(['none', 'allowlist', 'public']),
    allowedHosts: z.array(AllowedHostSchema).max(256).default([]),
  })
  .strict();
export type NetworkPolicy = z.output<typeof NetworkPolicySchema>;
export type NetworkPolicyInput = z.input<typeof NetworkPolicySchema>;

/** The egress policy a spec's `network` asks for; null for an engine mode (`none`, `host`, `bridge`). */
export function networkPolicyOf(network: unknown): NetworkPolicy | null {
  const parsed = NetworkPolicySchema.safeParse(network);
  return parsed.success ? parsed.data : null;
}

/** Ports a spec may declare at most. */
export const MAX_DECLARED_PORTS = 32;

/**
 * The TCP ports a service in the sandbox listens on (on its loopback or any address), which the
 * daemon proxies for the caller at `/v1/sandboxes/{id}/ports/{port}/...` with the sandbox's port
 * key (`GET /v1/sandboxes/{id}/ports/{port}` gives the URL and the header). Reached through the
 * relay over the provider's exec channel: declaring one opens no network.
 */
export const DeclaredPortsSchema = z
  .array(z.number().int().min(1).max(65_535))
  .max(MAX_DECLARED_PORTS)
  .refine((ports) => new Set(ports).size === ports.length, { message: 'a port is declared twice' });

export const SandboxSpecSchema = z
  .object({
    image: z.string().min(1).max(512),
    /** Provider name; the daemon's default provider when absent. */
    provider: z.string().min(1).max(128).optional(),
    resources: ResourcesSchema.default({}),
    env: EnvSchema.default({}),
    workdir: AbsolutePathSchema.optional(),
    /** User to run as inside the sandbox (`uid`, `uid:gid` or a name the image knows). */
    user: z.string().min(1).max(256).optional(),
    /**
     * `none` (default): loopback only. `host` and `bridge` only where the provider offers them.
     * The object form (`{mode, allowedHosts}`, see `NetworkPolicySchema`) gives the sandbox no
     * network of its own (`none`) and the egress proxy with that policy; the parsed spec keeps the
     * engine mode, and the policy lives with the sandbox (`/v1/sandboxes/{id}/network`).
     */
    network: z
      .union([NetworkModeSchema, NetworkPolicySchema])
      .default('none')
      .transform((network): NetworkMode => (typeof network === 'string' ? network : 'none'))
      // The parsed form is an engine mode again: documented (and re-parsed from the store) as one.
      .pipe(NetworkModeSchema),
    ttlSeconds: z.number().int().positive().max(MAX_TTL_SECONDS).default(DEFAULT_TTL_SECONDS),
    labels: LabelsSchema.default({}),
    files: z.array(SeedFileSchema).max(1000).default([]),
    readiness: ReadinessProbeSchema.optional(),
    /** Ports a caller may reach through the daemon (see `DeclaredPortsSchema`); any other is refused. */
    ports: DeclaredPortsSchema.default([]),
    /**
     * A service started beside the sandbox's keeper once it is up (`core/schemas/service.ts`): an
     * argv, or `image` for the image's own ENTRYPOINT and CMD. Supervised by the daemon: its output
     * kept (the latest 256 KiB per stream), its end reported; it dies with the sandbox.
     */
    entrypoint: EntrypointSchema.optional(),
    /** Docker's HEALTHCHECK (`HealthCheckSchema`): create returns once it passes, or fails with SERVICE_UNHEALTHY. */
    healthcheck: HealthCheckSchema.optional(),
    /**
     * The task's other containers (a Compose file's other services), run beside the sandbox in its
     * network namespace and destroyed with it (see `services.ts`); only where the provider has the
     * `services` capability. Created in `dependsOn` order, health-checked, before `create` returns.
     */
    services: ServicesSchema.optional(),
    /** What only one provider understands; each provider validates its own part. */
    providerOptions: z.record(z.string(), z.unknown()).default({}),
  })
  .strict();

/** A spec as a caller writes it (defaults optional). */
export type SandboxSpecInput = z.input<typeof SandboxSpecSchema>;
/** A spec after parsing (defaults filled in). */
export type SandboxSpec = z.output<typeof SandboxSpecSchema>;

/**
 * `unreachable`: the part of the backend that holds the sandbox does not answer (an engine, a
 * host). The daemon keeps it, neither forgotten nor destroyed, until the backend answers again
 * (it is `ready` again, or found gone) or its deadline passes.
 */
export const SandboxStateSchema = z.enum([
  'creating',
  'ready',
  'destroying',
  'gone',
  'failed',
  'unreachable',
]);
export type SandboxState = z.infer<typeof SandboxStateSchema>;

/**
 * What a provider knows of a sandbox from its own records (labels, engine state). The daemon
 * adds leases and ownership on top of this.
 */
export const SandboxInfoSchema = z.object({
  id: z.string(),
  provider: z.string(),
  state: SandboxStateSchema,
  image: z.string(),
  /** The user labels given at create. */
  labels: LabelsSchema,
  /** The namespace the sandbox was created under (one per deployment). */
  namespace: z.string(),
  /** The daemon instance that created it. */
  daemonId: z.string(),
  pool: z.string().nullable(),
  createdAt: z.string(),
  /** The lease expiry the sandbox was created with (later renewals live in the daemon's store). */
  leaseExpiresAt: z.string(),
  /** A hard deadline no renewal can pass: a reaper may destroy the sandbox after it, whatever the store says. */
  deadlineAt: z.string(),
  /** Provider-specific reference (container id, pod name, instance name) for humans and logs. */
  providerRef: z.string(),
  /**
   * The part of the backend that holds it (an SSH host), as a listing names it when it cannot be
   * seen; absent on a backend of one part.
   */
  scope: z.string().optional(),
});
export type SandboxInfo = z.infer<typeof SandboxInfoSchema>;
