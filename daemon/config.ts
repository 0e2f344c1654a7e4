/**
 * The daemon's configuration: one YAML file, validated by zod (errors name the bad key),
 * overridden by environment variables, parsed once and frozen. `process.env` is read only in
 * `configFromEnvironment`, called by the composition root.
 */
import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { GymError } from '../core/errors.ts';
import { UpstreamSchema } from '../core/schemas/api.ts';
import { PoolDefinitionSchema, PoolNameSchema } from '../core/schemas/pool.ts';
import { DEFAULT_TTL_SECONDS, MAX_TTL_SECONDS, ResourcesSchema } from '../core/schemas/sandbox.ts';
import { TaskNetworkPolicySchema } from '../core/schemas/task-network.ts';
import { parseOrThrow } from '../core/validate.ts';
import { EgressConfigSchema } from './egress/config.ts';
import { DEFAULT_OWNER_GRACE_MS } from './owners.ts';

/**
 * Limits of a sandbox whose spec names none: two cores, 4 GiB and 1024 processes run a SWE-bench
 * test suite or a package install comfortably, and cap what a fork bomb or a leak can take.
 */
export const DEFAULT_RESOURCES = { cpus: 2, memoryMiB: 4096, pidsLimit: 1024 } as const;

export const ProviderConfigSchema = z
  .object({
    /** Registry name; also what specs say in `provider`, and the name of its state directory. */
    name: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/, {
      message: 'must be 1-63 letters, digits, `-` or `_`, starting with a letter or digit',
    }),
    /** Module path or package of a third-party provider (relative to the config file). */
    module: z.string().optional(),
    /** Passed to the provider's factory; each provider validates its own. */
    options: z.record(z.string(), z.unknown()).default({}),
    /** Creates running at once; more wait in the queue. Docker here manages 6-9 per second in total. */
    maxConcurrentCreates: z.number().int().positive().default(16),
    /** Live sandboxes at most; creates beyond wait in the queue. */
    maxLiveSandboxes: z.number().int().positive().default(1000),
    /** Creates allowed to wait; beyond it a create is refused at once with 429. */
    queueSize: z.number().int().nonnegative().default(256),
    /** How long a create may wait in the queue before it is refused with 429. */
    queueTimeoutMs: z.number().int().positive().default(60_000),
  })
  .strict();
export type ProviderConfig = z.output<typeof ProviderConfigSchema>;

export const DaemonConfigSchema = z
  .object({
    /** Where the token, the sandbox store and daemon.json live. */
    stateDir: z.string().min(1),
    /** Separates deployments sharing one backend; one daemon per namespace. */
    namespace: z
      .string()
      .regex(/^[a-z0-9][a-z0-9-]{0,30}$/)
      .default('default'),
    listen: z
      .object({
        host: z.string().default('127.0.0.1'),
        /** 0 picks a free port (written to daemon.json). */
        port: z.number().int().min(0).max(65535).default(7380),
        /** A unix socket path; when set, the daemon serves there instead of TCP. */
        socket: z.string().optional(),
      })
      .strict()
      .default({ host: '127.0.0.1', port: 7380 }),
    providers: z
      .array(ProviderConfigSchema)
      .min(1)
      .prefault([{ name: 'docker' }]),
    /** The provider of specs that name none; default the first configured. */
    defaultProvider: z.string().optional(),
    defaultTtlSeconds: z.number().int().positive().max(MAX_TTL_SECONDS).default(DEFAULT_TTL_SECONDS),
    /** Hard deadline of every sandbox after its creation; no renewal passes it. */
    maxLifetimeSeconds: z
      .number()
      .int()
      .positive()
      .max(30 * 24 * 3600)
      .default(24 * 3600),
    /**
     * How long a destroy request waits for the provider before it answers PROVIDER_ERROR. The
     * destroy goes on in the background (the record stays, and a later request or the reaper
     * joins it), so an engine that stops answering never hangs a client or the shutdown.
     */
    destroyWaitMs: z.number().int().positive().default(120_000),
    /** How often expired leases are reaped. */
    reaperIntervalMs: z.number().int().positive().default(5_000),
    /** How often the backend is scanned for labelled resources the store does not know. */
    orphanScanIntervalMs: z.number().int().positive().default(60_000),
    /**
     * The owner registry shared by daemons on this host (see owners.ts): a resource of another
     * daemon of the namespace is reclaimed only when that daemon's record shows its process gone
     * for longer than `graceMs` (or past its hard deadline). The heartbeat is the orphan scan.
     */
    owners: z
      .object({
        /**
         * Default: `/run/gym/daemons` for root, else `$XDG_RUNTIME_DIR/gym-daemons`, else
         * `<os tmpdir>/gym-daemons-<uid>`. It must be a directory of this uid (made 0700) under
         * ancestors no other user can write, or the daemon refuses to start. Daemons judge each
         * other only within one directory.
         */
        directory: z.string().optional(),
        /** How long a dead daemon's sandboxes wait for it to restart and adopt them. */
        graceMs: z.number().int().nonnegative().default(DEFAULT_OWNER_GRACE_MS),
      })
      .strict()
      .prefault({}),
    defaults: z
      .object({
        /**
         * Limits of every sandbox whose spec leaves them out (verifier sandboxes, which run the
         * model's patch, included); a spec's own values win, within `maxResources`. An agent in a
         * sandbox without limits can starve the host and every other rollout.
         */
        resources: z
          .object({
            cpus: ResourcesSchema.shape.cpus.unwrap().default(DEFAULT_RESOURCES.cpus),
            memoryMiB: ResourcesSchema.shape.memoryMiB.unwrap().default(DEFAULT_RESOURCES.memoryMiB),
            pidsLimit: ResourcesSchema.shape.pidsLimit.unwrap().default(DEFAULT_RESOURCES.pidsLimit),
          })
          .strict()
          .prefault({}),
      })
      .strict()
      .prefault({}),
    /**
     * The most a spec may ask for (unset: only the schema's bounds). With it, a token holder
     * cannot take the whole host for one sandbox.
     */
    maxResources: z
      .object({
        cpus: ResourcesSchema.shape.cpus,
        memoryMiB: ResourcesSchema.shape.memoryMiB,
        pidsLimit: ResourcesSchema.shape.pidsLimit,
      })
      .strict()
      .default({}),
    /**
     * What network a benchmark task (Harbor's task.toml network_mode) may declare and still run,
     * read by `gym eval run` (environments/kinds/harbor/network.ts). Default: no task sandbox
     * gets a network, and a task that declares one is refused with the reason.
     */
    taskNetwork: TaskNetworkPolicySchema.prefault({}),
    /** What a sandbox's egress policy may open through the daemon's proxy (daemon/egress/config.ts). */
    egress: EgressConfigSchema.prefault({}),
    /** Destroy live sandboxes on shutdown (default: keep them for the next start to adopt). */
    destroyOnShutdown: z.boolean().default(false),
    /** How long a graceful shutdown waits for in-flight requests. */
    shutdownGraceMs: z.number().int().positive().default(30_000),
    logLevel: z.enum(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']).default('info'),
    gateway: z
      .object({
        /** The policy server (NeMo Gym's policy_base_url, policy_api_key, policy_model_name). */
        upstream: UpstreamSchema.optional(),
        /** Retries on 429, 5xx and connection errors, with exponential backoff. */
        maxRetries: z.number().int().min(0).max(10).default(3),
        timeoutMs: z.number().int().positive().default(600_000),
        /**
         * The largest model request an agent may send (it is recorded whole). Checked before the
         * body is read; beyond it the call is a 413.
         */
        maxRequestBytes: z
          .number()
          .int()
          .min(1024)
          .max(256 * 1024 * 1024)
          .default(16 * 1024 * 1024),
        /**
         * How many bytes of records one rollout may write (requests, responses, streamed events).
         * A call that would start past it is refused with a 413; what was recorded stays whole.
         */
        maxRecordBytesPerRollout: z
          .number()
          .int()
          .min(1024)
          .default(256 * 1024 * 1024),
        /**
         * Pass image and document URLs in model requests (the upstream downloads them, on the
         * operator's account). Off: only inline (data:/base64) images are accepted.
         */
        allowRemoteImageUrls: z.boolean().default(false),
      })
      .strict()
      .prefault({}),
    /**
     * OpenTelemetry traces (docs/tracing.md): off unless `otlpEndpoint` is set. An operator's
     * setting only: nothing a sandbox or a token holder sends can turn it on or point it elsewhere.
     */
    telemetry: z
      .object({
        /**
         * The collector's OTLP/HTTP URL: a base URL (`http://127.0.0.1:4318`) gets `/v1/traces`;
         * a URL with a path is used as given.
         */
        otlpEndpoint: z.url({ protocol: /^https?$/ }).optional(),
        /** `service.name` of the daemon's spans. */
        serviceName: z.string().min(1).max(128).default('gym-sandboxd'),
        /** Headers sent with every export (a collector's API key). */
        headers: z.record(z.string(), z.string()).default({}),
        /** Spans held for export at most; beyond, new ones are dropped and counted. */
        maxQueueSpans: z.number().int().min(16).max(1_000_000).default(2048),
        /** How long one export, and the flush at shutdown, may take. */
        exportTimeoutMs: z.number().int().min(100).max(60_000).default(2000),
      })
      .strict()
      .prefault({}),
    /**
     * Managed snapshots and forks (docs/snapshots.md): how long one is kept, how many this daemon
     * keeps at once (a new one past it is refused with CAPACITY_EXCEEDED; none is evicted), and
     * the most bytes one may hold (past it: SNAPSHOT_TOO_LARGE, nothing kept).
     */
    snapshots: z
      .object({
        ttlSeconds: z.number().int().positive().max(MAX_TTL_SECONDS).default(3600),
        maxCount: z.number().int().positive().max(10_000).default(64),
        maxBytes: z
          .number()
          .int()
          .positive()
          .default(4 * 1024 * 1024 * 1024),
      })
      .strict()
      .prefault({}),
    /** Warm pools created at start (pools defined through the API persist on their own). */
    pools: z.record(PoolNameSchema, PoolDefinitionSchema).default({}),
  })
  .strict();
export type DaemonConfig = Readonly<z.output<typeof DaemonConfigSchema>>;
export type DaemonConfigInput = z.input<typeof DaemonConfigSchema>;

/** The default state directory: `$XDG_STATE_HOME/gym`, else `~/.local/state/gym`. */
export function defaultStateDir(env: Readonly<Record<string, string | undefined>>): string {
  return join(env.XDG_STATE_HOME ?? join(homedir(), '.local', 'state'), 'gym');
}

/** What the environment may override, read in this one place. */
export function configFromEnvironment(
  env: Readonly<Record<string, string | undefined>>,
): Partial<DaemonConfigInput> & {
  configPath?: string;
} {
  const overrides: Partial<DaemonConfigInput> & { configPath?: string } = {};
  if (env.GYM_CONFIG) overrides.configPath = env.GYM_CONFIG;
  if (env.GYM_STATE_DIR) overrides.stateDir = env.GYM_STATE_DIR;
  if (env.GYM_NAMESPACE) overrides.namespace = env.GYM_NAMESPACE;
  if (env.GYM_LOG_LEVEL) overrides.logLevel = env.GYM_LOG_LEVEL as DaemonConfigInput['logLevel'];
  const listen: Record<string, unknown> = {};
  if (env.GYM_HOST) listen.host = env.GYM_HOST;
  if (env.GYM_PORT) listen.port = Number(env.GYM_PORT);
  if (env.GYM_SOCKET) listen.socket = env.GYM_SOCKET;
  if (Object.keys(listen).length > 0) overrides.listen = listen as DaemonConfigInput['listen'];
  if (env.GYM_POLICY_BASE_URL) {
    overrides.gateway = {
      upstream: {
        baseUrl: env.GYM_POLICY_BASE_URL,
        ...(env.GYM_POLICY_API_KEY ? { apiKey: env.GYM_POLICY_API_KEY } : {}),
        ...(env.GYM_POLICY_MODEL_NAME ? { model: env.GYM_POLICY_MODEL_NAME } : {}),
        ...(env.GYM_POLICY_API ? { api: env.GYM_POLICY_API as 'openai' | 'anthropic' } : {}),
        ...(env.GYM_POLICY_REQUEST_TOKEN_IDS === '1' ? { requestTokenIds: true } : {}),
      },
    };
  }
  return overrides;
}

/**
 * The YAML file's keys, its relative paths (`stateDir`, provider modules) resolved against its
 * directory; not validated yet. Synchronous: the CLI reads the file's `stateDir` to find its daemon.
 */
export function readConfigFile(configPath: string): Record<string, unknown> {
  let text: string;
  let fromFile: Record<string, unknown>;
  try {
    text = readFileSync(configPath, 'utf8');
  } catch (error) {
    throw new GymError(
      'VALIDATION_FAILED',
      `cannot read config file ${configPath}: ${(error as Error).message}`,
    );
  }
  try {
    fromFile = (parseYaml(text) as Record<string, unknown> | null) ?? {};
  } catch (error) {
    throw new GymError(
      'VALIDATION_FAILED',
      `config file ${configPath} is not valid YAML: ${(error as Error).message}`,
    );
  }
  if (typeof fromFile !== 'object' || Array.isArray(fromFile)) {
    throw new GymError('VALIDATION_FAILED', `config file ${configPath} must hold a mapping of keys`);
  }
  const base = resolve(configPath, '..');
  if (typeof fromFile.stateDir === 'string') fromFile.stateDir = resolve(base, fromFile.stateDir);
  if (Array.isArray(fromFile.providers)) {
    for (const provider of fromFile.providers as Array<Record<string, unknown>>) {
      if (typeof provider?.module === 'string' && provider.module.startsWith('.'))
        provider.module = resolve(base, provider.module);
    }
  }
  return fromFile;
}

/** The state directory the YAML file names (resolved), if it names one. */
export function configFileStateDir(configPath: string): string | undefined {
  const { stateDir } = readConfigFile(configPath);
  return typeof stateDir === 'string' ? stateDir : undefined;
}

/**
 * Reads the YAML file (if any), applies overrides (environment, then flags) key by key, and
 * validates the result. Relative paths in the file resolve against the file's directory.
 */
export async function loadConfig(options: {
  configPath?: string;
  overrides?: Array<Partial<DaemonConfigInput>>;
  env: Readonly<Record<string, string | undefined>>;
}): Promise<DaemonConfig> {
  const fromFile = options.configPath === undefined ? {} : readConfigFile(options.configPath);
  const merged: Record<string, unknown> = { stateDir: defaultStateDir(options.env), ...fromFile };
  for (const override of options.overrides ?? []) {
    for (const [key, value] of Object.entries(override)) {
      if (value === undefined) continue;
      merged[key] =
        key === 'listen' && typeof value === 'object'
          ? { ...(merged.listen as object | undefined), ...value }
          : value;
    }
  }
  const config = parseOrThrow(
    DaemonConfigSchema,
    merged,
    options.configPath ? `config (${options.configPath})` : 'config',
  );
  const names = config.providers.map((provider) => provider.name);
  if (config.defaultProvider !== undefined && !names.includes(config.defaultProvider)) {
    throw new GymError(
      'VALIDATION_FAILED',
      `invalid config: defaultProvider "${config.defaultProvider}" is not among providers (${names.join(', ')})`,
    );
  }
  return Object.freeze({ ...config, stateDir: resolve(config.stateDir) });
}
