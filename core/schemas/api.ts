/** Request and response bodies of the HTTP API (v1) that are not domain types of their own. */
import { z } from 'zod';
import { ERROR_CODES } from '../errors.ts';
import { SANDBOX_ID_PATTERN } from '../ids.ts';
import { AbsolutePathSchema, LabelsSchema } from './common.ts';
import { NetworkPolicySchema, SandboxSpecSchema, SandboxStateSchema } from './sandbox.ts';
import { ServiceViewSchema } from './service.ts';
import { SandboxLineageSchema, SnapshotInfoSchema } from './snapshot.ts';

export {
  ForkRequestSchema,
  SnapshotListSchema,
  SnapshotRequestSchema,
  SnapshotResponseSchema,
} from './snapshot.ts';

/** A sandbox as the API shows it: the provider's facts plus the daemon's lease. */
export const SandboxSchema = z.object({
  id: z.string(),
  provider: z.string(),
  state: SandboxStateSchema,
  image: z.string(),
  labels: LabelsSchema,
  pool: z.string().nullable(),
  createdAt: z.string(),
  /** Renewed by keepalive and by any use; the reaper destroys the sandbox after it. */
  leaseExpiresAt: z.string(),
  /** No renewal goes past it. */
  deadlineAt: z.string(),
  /** True when a pool handed it out warm; false when it was created for the request. */
  fromPool: z.boolean(),
  /** The spec it was created from (seed files are not echoed). */
  spec: SandboxSpecSchema,
  /** Where it was forked from; null for a sandbox that is no fork. */
  lineage: SandboxLineageSchema.nullable(),
  /** Its service (the spec's `entrypoint`), when this daemon started one: state, exit, last health probe. */
  service: ServiceViewSchema.optional(),
});
export type Sandbox = z.infer<typeof SandboxSchema>;

export const CreateSandboxRequestSchema = SandboxSpecSchema;

/** A create from a pool: the pool's spec, with only these set per acquire. */
export const PoolAcquireRequestSchema = z
  .object({
    pool: z.string(),
    /** Added to the environment of every exec in the sandbox. */
    env: z.record(z.string(), z.string()).optional(),
    labels: LabelsSchema.optional(),
    ttlSeconds: z.number().int().positive().optional(),
  })
  .loose();

export const SandboxListSchema = z.object({ sandboxes: z.array(SandboxSchema) });

export const ListSandboxesQuerySchema = z
  .object({
    /** `key=value`, repeatable or comma-separated: all must match. */
    label: z.union([z.string(), z.array(z.string())]).optional(),
    provider: z.string().optional(),
  })
  .strict();

export const KeepaliveRequestSchema = z
  .object({
    /** New lease length from now; default the sandbox's own ttlSeconds. */
    ttlSeconds: z.number().int().positive().optional(),
  })
  .strict();

/** What `POST /v1/sandboxes/{id}/fork` answers: the snapshot the children came from, and the children in fork order. */
export const ForkResponseSchema = z.object({
  snapshot: SnapshotInfoSchema,
  sandboxes: z.array(SandboxSchema),
});

/** What `POST /v1/sandboxes/{id}/gateway` answers. */
export const GatewayReachSchema = z.object({
  /**
   * The gateway's origin as an agent inside the sandbox reaches it (`http://127.0.0.1:<port>` on
   * Docker): a rollout's endpoint is this followed by its `basePath`. The same for the sandbox's
   * whole life, across daemon restarts.
   */
  url: z.string(),
});

/** What `GET` and `PUT /v1/sandboxes/{id}/network` answer. */
export const NetworkViewSchema = z.object({
  policy: NetworkPolicySchema,
  /** The proxy URL its commands get in HTTP_PROXY (secret masked); null while the policy opens nothing. */
  proxy: z.string().nullable(),
});

/** One attempt through the egress proxy, allowed or refused. */
export const EgressAttemptSchema = z.object({
  at: z.string(),
  /** `connect`: a CONNECT tunnel (HTTPS and any TCP); `http`: a plain `http://` request. */
  kind: z.enum(['connect', 'http']),
  host: z.string(),
  port: z.number().int(),
  /** The address connected to, once resolved and allowed. */
  address: z.string().optional(),
  verdict: z.enum(['allowed', 'refused']),
  /** Why it was refused, or why an allowed connection was ended (a limit, a policy change). */
  reason: z.string().optional(),
  bytesUp: z.number().int().nonnegative(),
  bytesDown: z.number().int().nonnegative(),
  durationMs: z.number().nonnegative(),
});

/** What `GET /v1/sandboxes/{id}/network/log` answers: oldest first; `dropped` fell off the bounded log. */
export const NetworkLogSchema = z.object({
  attempts: z.array(EgressAttemptSchema),
  dropped: z.number().int().nonnegative(),
});
export type NetworkView = z.infer<typeof NetworkViewSchema>;
export type EgressAttemptRecord = z.infer<typeof EgressAttemptSchema>;
export type NetworkLog = z.infer<typeof NetworkLogSchema>;

/** What `POST /v1/sandboxes/{id}/stop-processes` answers. */
export const StopProcessesResponseSchema = z.object({
  /** How many processes were killed (0 when only the sandbox's keeper was running). */
  killed: z.number().int().nonnegative(),
  /**
   * The sandbox did not survive the stop, by its processes' doing: they resisted being stopped,
   * so the provider killed the sandbox (as `ExecResult.sandboxLost`). The daemon forgets it; an
   * evaluation grades the rollout as the agent's failure.
   */
  sandboxLost: z.literal(true).optional(),
  /** Why, with `sandboxLost`. */
  reason: z.string().max(500).optional(),
});
export type StopProcessesResult = z.infer<typeof StopProcessesResponseSchema>;

export const PathQuerySchema = z
  .object({
    path: AbsolutePathSchema,
    /** For file uploads: permission bits as an octal string, e.g. "755". */
    mode: z
      .string()
      .regex(/^[0-7]{3,4}$/)
      .optional(),
  })
  .strict();

export const ExecQuerySchema = z
  .object({
    /** `ndjson`: stream output as it comes, one JSON object per line, the result last. */
    stream: z.enum(['ndjson']).optional(),
  })
  .strict();

/** Without the token `/healthz` says only `ok`; with it, the version, the daemon id and each provider. */
export const HealthSchema = z.object({
  ok: z.boolean(),
  version: z.string().optional(),
  daemonId: z.string().optional(),
  providers: z.record(z.string(), z.object({ ok: z.boolean(), message: z.string() })).optional(),
});

export const ErrorBodySchema = z.object({
  error: z.object({
    code: z.enum(Object.keys(ERROR_CODES) as [keyof typeof ERROR_CODES, ...Array<keyof typeof ERROR_CODES>]),
    message: z.string(),
    details: z.record(z.string(), z.unknown()),
  }),
});

/** One line of a streamed exec: output chunks (UTF-8 text), then exactly one result. */
export const ExecStreamEventSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('stdout'), data: z.string() }),
  z.object({ type: z.literal('stderr'), data: z.string() }),
  z.object({ type: z.literal('result'), result: z.record(z.string(), z.unknown()) }),
  z.object({ type: z.literal('error'), error: ErrorBodySchema.shape.error }),
]);

/** A model upstream: NeMo Gym's policy_base_url, policy_api_key, policy_model_name. */
export const UpstreamSchema = z
  .object({
    baseUrl: z.string().url(),
    apiKey: z.string().optional(),
    model: z.string().optional(),
    /** What the upstream speaks: OpenAI's APIs (default; Anthropic Messages calls are translated to Chat Completions) or Anthropic Messages. */
    api: z.enum(['openai', 'anthropic']).optional(),
    /** Ask for exact token ids and logprobs on every Chat Completions call and record them (vLLM 0.10.2+; off: other upstreams refuse unknown fields). */
    requestTokenIds: z.boolean().optional(),
  })
  .strict();

/** Rollout ids name files of records: letters, digits, ".", "_" and "-" only. */
export const ROLLOUT_ID_PATTERN = /^[A-Za-z0-9._-]{1,128}$/;

export const OpenRolloutRequestSchema = z
  .object({
    rolloutId: z.string().regex(ROLLOUT_ID_PATTERN).optional(),
    upstream: UpstreamSchema.optional(),
    /**
     * The sandbox whose agent makes the rollout's calls: a call that arrives through any other
     * sandbox's reach is refused as a wrong key is (a fork child holds its parent's key). Calls
     * from outside every sandbox (a loop on the host) are taken as before.
     */
    sandboxId: z.string().regex(SANDBOX_ID_PATTERN, { message: 'not a sandbox id' }).optional(),
  })
  .strict();
