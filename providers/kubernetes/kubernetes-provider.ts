/**
 * The Kubernetes provider: one Pod per sandbox in a configured namespace, commands over pods/exec.
 *
 * - Identity (namespace, daemon, sandbox id, pool, times) lives in the Pod's labels, so a listing
 *   by label selector finds every sandbox of a deployment without the daemon's state; what is not
 *   identity (the spec's user, network mode) goes in annotations, the image in the Pod's spec.
 * - The Pod idles under a shell loop with `restartPolicy: Never`, no service account token, all
 *   capabilities dropped but the few a root shell needs, no privilege escalation, seccomp
 *   `RuntimeDefault`, and `activeDeadlineSeconds` at the hard deadline (the kubelet ends the Pod
 *   even if every daemon is gone). Resources: requests equal limits (cpu, memory), disk as
 *   `ephemeral-storage`, GPUs as `nvidia.com/gpu` when the operator allows them.
 * - Exec wraps each command in `sh -c` to apply env, cwd and user (`setpriv`) and to tag it with
 *   `GYM_EXEC_ID`; a timeout runs the shared kill script in the Pod (`timeoutKill: tagged`).
 * - Files and archives are tar streams over exec (`tar -x` / `tar -c`), each awaited to its exit
 *   status, with the same archive checks as Docker before a byte reaches the Pod.
 * - A NetworkPolicy that denies all ingress and egress to our Pods is created once per namespace
 *   and checked by `health()`.
 */
import { existsSync } from 'node:fs';
import { posix } from 'node:path';
import { PassThrough, type Readable, type Writable } from 'node:stream';
import {
  ApiException,
  CoreV1Api,
  type KubeConfig,
  NetworkingV1Api,
  type V1ContainerStatus,
  type V1NetworkPolicy,
  type V1Pod,
} from '@kubernetes/client-node';
import { z } from 'zod';
import { GymError } from '../../core/errors.ts';
import { createId } from '../../core/ids.ts';
import type { StopProcessesResult } from '../../core/schemas/api.ts';
import type { ExecRequest, ExecResult, ExecStatus } from '../../core/schemas/exec.ts';
import type { SandboxInfo, SandboxSpec, SandboxState } from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import type {
  CreateOptions,
  ExecOptions,
  FileContent,
  ListFilter,
  ProviderCapabilities,
  ProviderContext,
  ProviderHealth,
  RelayStats,
  SandboxListing,
  SandboxProvider,
  WriteFileOptions,
} from '../sandbox-provider.ts';
import {
  type AbnormalEnd,
  abnormalEndResult,
  type ExecHooks,
  OomKillCounts,
  type SandboxLoss,
} from '../shared/abnormal-end.ts';
import { firstEntry, packSingleFile, rebaseArchive, spoolSafeArchive } from '../shared/archive.ts';
import {
  ExecOutput,
  markSandboxLost,
  OOM_COUNTER_COMMAND,
  parseOomKillCount,
  SIGKILL_EXIT_CODE,
  stdinBytes,
} from '../shared/exec-output.ts';
import {
  EXEC_ID_ENV,
  KILL_FAILED_NOTE,
  KILL_FAILED_REASON,
  type KillOutcome,
  type KillReach,
  killScriptArgv,
} from '../shared/kill-script.ts';
import { decodeLabels, encodeLabels, SYSTEM_LABELS, selectorLabels } from '../shared/labels.ts';
import { waitUntilReady } from '../shared/readiness.ts';
import { shellQuote } from '../shared/shell.ts';
import type { ShellSession } from '../shared/shell-session.ts';
import { withTimeout } from '../shared/with-timeout.ts';
import {
  DEFAULT_RELAY_HELPER_PATH,
  loadRelayBinary,
  PodRelay,
  RELAY_PATH_IN_POD,
  relayStatsOf,
} from './gateway-relay.ts';
import { type PodExecEnd, PodExecRefused, type PodTarget, runPodCommand, startPodExec } from './pod-exec.ts';
import { openPodSession } from './pod-session.ts';

/** Every label we write starts with this (as on Docker), so one selector finds all our Pods. */
export const KUBERNETES_LABEL_PREFIX = 'gym.';
/** Annotations hold what is not identity. */
const SPEC_ANNOTATION = 'gym.sandbox/spec';
/** The sandbox's container in its Pod. */
export const SANDBOX_CONTAINER = 'sandbox';

/** The capabilities a root shell, a package manager and a test suite need (as on Docker). */
export const DEFAULT_CAPABILITIES = ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'FSETID', 'KILL', 'SETGID', 'SETUID'];

/** Keeps the container alive doing nothing; exits at once on the kubelet's TERM. */
const IDLE_SCRIPT = "trap 'exit 0' TERM INT; while :; do sleep 86400 & wait $!; done";

/**
 * Stops every process of the Pod but PID 1 (the idle keeper) and itself: each pass first stops
 * all (SIGSTOP, so none can fork or reap meanwhile), then kills them, until a pass finds none
 * that can still run. Two kinds are not killed again and again:
 * - the keeper's idle sleep (a child of PID 1 in PID 1's session: every exec starts a session of
 *   its own, and no process joins another's) is left stopped, not killed: killed, the keeper
 *   would start another, which the next pass may find (under load, pass after pass). It is
 *   settled once seen stopped (state T) in a later pass with the same pid and start time: a
 *   process that stayed stopped forked nothing meanwhile.
 * - a process killed in an earlier pass (same pid and start time) cannot run user code again,
 *   though it may take a while to go (e.g. blocked in I/O).
 * Zombies, already dead, are left to their parent or PID 1.
 * Shell builtins only; prints how many it killed. An agent that replaced `/bin/sh` defeats it,
 * as it does the kill script.
 */
const STOP_SCRIPT = `
self=$$; pass=0; total=0; held=" "; dying=" "
init=""; read -r init < /proc/1/stat; set -- \${init##*) }; keeper="$3 $4"
while [ "$pass" -lt 50 ]; do
  found=""; unsettled=0
  for dir in /proc/[0-9]*; do
    pid="\${dir#/proc/}"
    [ "$pid" = 1 ] && continue
    [ "$pid" = "$self" ] && continue
    stat=""; read -r stat < "$dir/stat" 2>/dev/null || continue
    set -- \${stat##*) }
    [ "$1" = Z ] && continue
    kill -STOP "$pid" 2>/dev/null || continue
    id="$pid@\${20}"
    if [ "$2" = 1 ] && [ "$3 $4" = "$keeper" ]; then
      case "$held" in
        *" $id "*) [ "$1" = T ] || unsettled=$((unsettled + 1));;
        *) held="$held$id "; unsettled=$((unsettled + 1));;
      esac
      continue
    fi
    case "$dying" in *" $id "*) kill -9 "$pid" 2>/dev/null; continue;; esac
    found="$found $id"
  done
  if [ -z "$found" ] && [ "$unsettled" = 0 ]; then echo "$total"; exit 0; fi
  for id in $found; do
    kill -9 "\${id%@*}" 2>/dev/null && { dying="$dying$id "; total=$((total + 1)); }
  done
  pass=$((pass + 1))
done
echo "$total"; exit 1
`;

/** Waits between reads of a Pod whose container may have just ended, for the kubelet's report. */
const OOM_REPORT_WAITS_MS = [250, 500, 1_000, 2_000];

/** After a kill, how long to wait for the command's stream to end before dropping it. */
const KILL_GRACE_MS = 5_000;

/**
 * How long a timeout's kill script may take before the kill counts as failed and the Pod is
 * killed instead. Normally it takes milliseconds; an exec can take seconds to start on a loaded
 * node, and a sandbox killed for that alone would be lost for nothing.
 */
const KILL_SCRIPT_WAIT_MS = 15_000;
/**
 * How long stop-processes' script may take before it counts as resisted and the Pod is deleted.
 * Longer than the timeout kill's: an exec can take seconds to start on a loaded node, and here a
 * Pod deleted for that alone costs an honest rollout its grade.
 */
const STOP_SCRIPT_WAIT_MS = 30_000;

/**
 * The grace of a Pod deleted because a timeout's kill script did not take effect: short, and not
 * 0, which would remove the Pod from the API at once while its containers may still run.
 */
const KILLED_POD_GRACE_SECONDS = 1;

/** How long the kubelet may take to kill such a Pod before the exec fails with an error. */
const KILLED_POD_WAIT_MS = 30_000;

/** Directories checked per exec before an extraction (their paths travel in the exec's URL). */
const EXTRACT_CHECK_BATCH = 200;

/** The one scope of a Kubernetes backend: the API server. */
const API_SCOPE = 'api-server';

/** Waiting reasons that mean the image cannot be had. */
const IMAGE_REASONS = new Set(['ErrImagePull', 'ImagePullBackOff', 'InvalidImageName', 'ErrImageNeverPull']);
/** Waiting reasons that will not resolve by themselves. */
const FATAL_REASONS = new Set([
  'CreateContainerConfigError',
  'CreateContainerError',
  'RunContainerError',
  'CrashLoopBackOff',
]);

const TolerationSchema = z
  .object({
    key: z.string().optional(),
    operator: z.enum(['Exists', 'Equal']).optional(),
    value: z.string().optional(),
    effect: z.enum(['NoSchedule', 'PreferNoSchedule', 'NoExecute']).optional(),
    tolerationSeconds: z.number().int().optional(),
  })
  .strict();

export const KubernetesProviderOptionsSchema = z
  .object({
    /** A kubeconfig file; default: `$KUBECONFIG`, `~/.kube/config`, then in-cluster configuration. */
    kubeconfigPath: z.string().optional(),
    /** A context of the kubeconfig other than its current one. */
    context: z.string().optional(),
    /** The namespace the Pods go in; default: the context's, else `default`. */
    namespace: z
      .string()
      .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/)
      .max(63)
      .optional(),
    /** How long a create waits for its Pod to be Ready (scheduling and image pull included). */
    createTimeoutMs: z.number().int().positive().max(3_600_000).default(120_000),
    /** Grace period of a destroy, in seconds (the Pod's shell exits at once on TERM). */
    deleteGracePeriodSeconds: z.number().int().min(0).max(300).default(1),
    /** A RuntimeClass for stronger isolation (gVisor, Kata). */
    runtimeClassName: z.string().optional(),
    nodeSelector: z.record(z.string(), z.string()).default({}),
    tolerations: z.array(TolerationSchema).default([]),
    /** Secrets (by name, in the namespace) the kubelet uses to pull images. */
    imagePullSecrets: z.array(z.string()).default([]),
    imagePullPolicy: z.enum(['Always', 'IfNotPresent', 'Never']).optional(),
    /** The nodes have NVIDIA GPUs and the device plugin: allow `resources.gpus`. */
    gpus: z.boolean().default(false),
    /** Create (once per namespace) and check a NetworkPolicy that denies all traffic to our Pods. */
    networkPolicy: z.boolean().default(true),
    /**
     * Gateway reach (`exposeGateway`) through a relay over an exec stream (`gateway-relay.ts`),
     * for a daemon outside the cluster. Off without the relay binary.
     */
    gatewayReach: z.boolean().default(true),
    /** The static relay copied into Pods (built by scripts/setup.sh). */
    relayHelperPath: z.string().startsWith('/').default(DEFAULT_RELAY_HELPER_PATH),
    /** Open relay connections per sandbox at most; one more is closed at once. */
    relayMaxConnections: z.number().int().positive().max(4096).default(32),
  })
  .strict();
export type KubernetesProviderOptions = z.input<typeof KubernetesProviderOptionsSchema>;

/** A spec's user as Kubernetes can take it: numbers only, since the image's names are not known before it runs. */
function numericUser(user: string | undefined): { uid: number; gid?: number } | undefined {
  if (user === undefined) return undefined;
  const match = /^(\d+)(?::(\d+))?$/.exec(user);
  if (match === null) {
    throw new GymError(
      'VALIDATION_FAILED',
      `the kubernetes provider takes the sandbox's user as uid or uid:gid (a Pod's securityContext has no user names): "${user}"`,
      { details: { user } },
    );
  }
  return { uid: Number(match[1]), ...(match[2] === undefined ? {} : { gid: Number(match[2]) }) };
}

/**
 * Runs `"$@"` as a command would run under `docker exec`: tagged for the kill script, with its
 * env and cwd, as the user asked for (by uid[:gid] or by name, through util-linux `setpriv` or
 * busybox `start-stop-daemon`).
 * Arguments: exec id, cwd (or empty), user (or empty), then the command.
 */
function wrapperScript(env: Record<string, string>): string {
  const exports = Object.entries(env)
    .map(([name, value]) => `export ${name}=${shellQuote(value)}`)
    .join('; ');
  return [
    `${EXEC_ID_ENV}=$1; export ${EXEC_ID_ENV}; cwd=$2; user=$3; shift 3`,
    exports,
    'if [ -n "$cwd" ]; then cd -- "$cwd" || exit 126; fi',
    'if [ -n "$user" ]; then',
    '  case "$user" in *:*) uid=${user%%:*}; gid=${user#*:};; *) uid=$user; gid=;; esac',
    '  case "$uid" in ""|*[!0-9]*) name=$uid; uid=$(id -u -- "$name") || exit 126; [ -n "$gid" ] || gid=$(id -g -- "$name") || exit 126;; esac',
    '  [ -n "$gid" ] || gid=$(id -g -- "$uid" 2>/dev/null) || gid=$uid',
    // util-linux setpriv (Debian); busybox's lacks --reuid but has start-stop-daemon -c.
    '  if setpriv --help 2>&1 | grep -q -e --reuid; then exec setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "$@"; fi',
    '  program=$(command -v -- "$1") || { echo "$1: not found" >&2; exit 127; }; shift',
    '  exec start-stop-daemon -S -p /nonexistent/gym.pid -c "$uid:$gid" -x "$program" -- "$@"',
    'fi',
    'exec "$@"',
  ]
    .filter((line) => line !== '')
    .join('\n');
}

function podState(pod: V1Pod): SandboxState {
  if (pod.metadata?.deletionTimestamp !== undefined && pod.metadata.deletionTimestamp !== null)
    return 'destroying';
  switch (pod.status?.phase) {
    case 'Pending':
      return 'creating';
    case 'Running':
      return isReady(pod) ? 'ready' : 'creating';
    default:
      return 'failed';
  }
}

/**
 * The prefix of a command whose stdin carries exactly `length` bytes and is never ended:
 * `head -c` passes them on and ends the command's stdin (the pipeline's status is the command's).
 */
function boundedStdin(length: number): string[] {
  return ['sh', '-c', 'n=$1; shift; head -c "$n" | "$@"', 'gym-stdin', String(length)];
}

/** A tar to send, with its size (a command reads exactly that many bytes of its stdin). */
interface SizedArchive {
  stream: Buffer | Readable;
  sizeBytes: number;
}

function sandboxContainer(pod: V1Pod): V1ContainerStatus | undefined {
  return pod.status?.containerStatuses?.find((status) => status.name === SANDBOX_CONTAINER);
}

/**
 * The sandbox's container ended because the OOM killer killed it whole (`memory.oom.group`).
 * Only its current state counts: with `restartPolicy: Never` it is never restarted, so there is
 * no earlier run (`lastState`) to confuse with this one.
 */
/**
 * A Pod whose sandbox container the OOM killer ended (with `memory.oom.group`, every process of
 * it): the Pod does not restart, so the sandbox is lost, by what ran in it.
 */
const POD_OOM_LOSS: SandboxLoss = {
  lost: 'oom',
  reason: "the sandbox ran out of memory and the kernel's OOM killer ended its container, so the Pod is lost",
};

function endedOutOfMemory(pod: V1Pod): boolean {
  return sandboxContainer(pod)?.state?.terminated?.reason === 'OOMKilled';
}

function isReady(pod: V1Pod): boolean {
  return (
    pod.status?.phase === 'Running' &&
    pod.status.conditions?.some((condition) => condition.type === 'Ready' && condition.status === 'True') ===
      true
  );
}

/** What a refused API call said: its HTTP code and the Status message. */
function apiFailure(error: unknown): { code: number | null; message: string } {
  if (error instanceof ApiException) {
    let message = String(error.message);
    const body = error.body as unknown;
    try {
      const status = (typeof body === 'string' ? JSON.parse(body) : body) as { message?: string };
      if (typeof status?.message === 'string') message = status.message;
    } catch {
      // not JSON: keep the exception's own message
    }
    return { code: error.code, message };
  }
  return { code: null, message: (error as Error)?.message ?? String(error) };
}

function wrapApiError(error: unknown, what: string, sandboxId?: string): GymError {
  if (error instanceof GymError) return error;
  const { code, message } = apiFailure(error);
  const details = { ...(sandboxId === undefined ? {} : { sandboxId }), httpStatus: code };
  if (code === null) {
    return new GymError(
      'PROVIDER_UNAVAILABLE',
      `the Kubernetes API server cannot be reached (${what}): ${message}`,
      {
        details,
        cause: error,
      },
    );
  }
  if (code === 404 && sandboxId !== undefined) {
    return new GymError('SANDBOX_NOT_FOUND', `sandbox ${sandboxId} does not exist`, { details });
  }
  if (code === 400 || code === 422) {
    return new GymError('VALIDATION_FAILED', `the API server refused the ${what}: ${message}`, {
      details,
      cause: error,
    });
  }
  return new GymError('PROVIDER_ERROR', `the API server failed the ${what} (HTTP ${code}): ${message}`, {
    details,
    cause: error,
  });
}

function emptyResult(status: ExecStatus): ExecResult {
  return {
    status,
    exitCode: null,
    stdout: '',
    stderr: '',
    stdoutTruncated: false,
    stderrTruncated: false,
    stdoutBytes: 0,
    stderrBytes: 0,
    durationMs: 0,
  };
}

export class KubernetesProvider implements SandboxProvider {
  readonly name = 'kubernetes';
  readonly capabilities: ProviderCapabilities;
  readonly #kubeConfig: KubeConfig;
  readonly #core: CoreV1Api;
  readonly #networking: NetworkingV1Api;
  readonly #context: ProviderContext;
  readonly #options: z.output<typeof KubernetesProviderOptionsSchema>;
  readonly #namespace: string;
  /** The deny-all policy's creation, once per provider. */
  #policy: Promise<void> | null = null;
  /** Last OOM-kill count seen per sandbox; a fresh Pod starts at 0. */
  readonly #oomCounts = new OomKillCounts();
  /** Gateway relays by sandbox id, with the exec id that tags each for the kill script. */
  readonly #relays = new Map<string, Promise<{ relay: PodRelay; execId: string }>>();
  readonly #relayCounters = { refusedTotal: 0 };
  /** The relays started and not released, for `relayStats`. */
  readonly #relayList = new Set<PodRelay>();
  /** Sessions by sandbox id, then by session name and user. */
  readonly #sessions = new Map<string, Map<string, Promise<ShellSession>>>();

  constructor(kubeConfig: KubeConfig, context: ProviderContext, options: KubernetesProviderOptions = {}) {
    this.#kubeConfig = kubeConfig;
    this.#context = context;
    this.#options = parseOrThrow(KubernetesProviderOptionsSchema, options, 'kubernetes provider options');
    if (!/^[a-z0-9][a-z0-9-]{0,30}$/.test(context.namespace)) {
      throw new GymError(
        'VALIDATION_FAILED',
        `namespace "${context.namespace}" must be 1-31 characters of a-z, 0-9 or "-"`,
      );
    }
    this.#namespace =
      this.#options.namespace ??
      kubeConfig.getContextObject(kubeConfig.getCurrentContext())?.namespace ??
      'default';
    this.#core = kubeConfig.makeApiClient(CoreV1Api);
    this.#networking = kubeConfig.makeApiClient(NetworkingV1Api);
    this.capabilities = {
      sessions: true,
      snapshot: false,
      gpus: this.#options.gpus,
      diskLimit: true,
      // Taken, recorded in the Pod's annotation, not enforced: the node's podPidsLimit applies.
      pidsLimit: false,
      networkModes: ['none'],
      gatewayReach: this.#options.gatewayReach && existsSync(this.#options.relayHelperPath),
      timeoutKill: 'tagged',
      // From inside the Pod, by a script of shell builtins (see STOP_SCRIPT): the tagged guarantee.
      stopProcesses: true,
    };
  }

  /** The Kubernetes namespace the Pods go in. */
  get kubernetesNamespace(): string {
    return this.#namespace;
  }

  /** Pod names embed our namespace, so a lookup by name never crosses deployments. */
  podName(id: string): string {
    return `gym-${this.#context.namespace}-${id}`;
  }

  /** The NetworkPolicy that cuts our Pods off (one per deployment namespace). */
  get policyName(): string {
    return `gym-${this.#context.namespace}-deny-all`;
  }

  #target(id: string): PodTarget {
    return { namespace: this.#namespace, pod: this.podName(id), container: SANDBOX_CONTAINER };
  }

  async health(): Promise<ProviderHealth> {
    try {
      await this.#core.listNamespacedPod({
        namespace: this.#namespace,
        labelSelector: `${KUBERNETES_LABEL_PREFIX}${SYSTEM_LABELS.namespace}=${this.#context.namespace}`,
        limit: 1,
      });
    } catch (error) {
      return { ok: false, message: wrapApiError(error, 'pod listing').message };
    }
    if (this.#options.networkPolicy) {
      try {
        const policy = await this.#networking.readNamespacedNetworkPolicy({
          name: this.policyName,
          namespace: this.#namespace,
        });
        const types = policy.spec?.policyTypes ?? [];
        if (
          !types.includes('Ingress') ||
          !types.includes('Egress') ||
          (policy.spec?.ingress?.length ?? 0) > 0 ||
          (policy.spec?.egress?.length ?? 0) > 0
        ) {
          return {
            ok: false,
            message: `NetworkPolicy ${this.#namespace}/${this.policyName} no longer denies all traffic; delete it and the next create restores it`,
          };
        }
      } catch (error) {
        const { code } = apiFailure(error);
        if (code !== 404) return { ok: false, message: wrapApiError(error, 'NetworkPolicy read').message };
        // Created with the first sandbox; before that there is nothing to isolate.
        if (this.#policy !== null) {
          return { ok: false, message: `NetworkPolicy ${this.#namespace}/${this.policyName} is missing` };
        }
      }
    }
    return {
      ok: true,
      message: `Kubernetes API server answers for namespace ${this.#namespace}; timed-out commands are killed from inside the Pod only (tagged)`,
      details: { namespace: this.#namespace, timeoutKill: this.capabilities.timeoutKill },
    };
  }

  /** Creates the deny-all NetworkPolicy for our Pods unless it exists. */
  #ensurePolicy(): Promise<void> {
    if (!this.#options.networkPolicy) return Promise.resolve();
    this.#policy ??= (async () => {
      const body: V1NetworkPolicy = {
        apiVersion: 'networking.k8s.io/v1',
        kind: 'NetworkPolicy',
        metadata: {
          name: this.policyName,
          labels: { [`${KUBERNETES_LABEL_PREFIX}${SYSTEM_LABELS.namespace}`]: this.#context.namespace },
        },
        spec: {
          podSelector: {
            matchLabels: {
              [`${KUBERNETES_LABEL_PREFIX}${SYSTEM_LABELS.namespace}`]: this.#context.namespace,
            },
          },
          policyTypes: ['Ingress', 'Egress'],
        },
      };
      try {
        await this.#networking.createNamespacedNetworkPolicy({ namespace: this.#namespace, body });
      } catch (error) {
        if (apiFailure(error).code !== 409) throw wrapApiError(error, 'NetworkPolicy create');
      }
    })();
    this.#policy.catch(() => {
      this.#policy = null;
    });
    return this.#policy;
  }

  #checkCapabilities(spec: SandboxSpec): void {
    if (spec.resources.gpus !== undefined && spec.resources.gpus > 0 && !this.capabilities.gpus) {
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        'the kubernetes provider is not configured for gpus: set `gpus: true` in its options on a cluster with the NVIDIA device plugin',
        { details: { provider: this.name, capability: 'gpus' } },
      );
    }
    if (spec.network !== 'none') {
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        `the kubernetes provider has only network "none", not "${spec.network}"`,
        {
          details: { provider: this.name, capability: 'network' },
        },
      );
    }
    if (Object.keys(spec.providerOptions).length > 0) {
      throw new GymError(
        'VALIDATION_FAILED',
        `providerOptions for kubernetes: none are accepted per spec (got ${Object.keys(spec.providerOptions).join(', ')})`,
      );
    }
  }

  #podManifest(spec: SandboxSpec, id: string, labels: Record<string, string>): V1Pod {
    const { resources } = spec;
    const user = numericUser(spec.user);
    const limits: Record<string, string> = {};
    if (resources.cpus !== undefined) limits.cpu = `${Math.round(resources.cpus * 1000)}m`;
    if (resources.memoryMiB !== undefined) limits.memory = `${resources.memoryMiB}Mi`;
    if (resources.diskMiB !== undefined) limits['ephemeral-storage'] = `${resources.diskMiB}Mi`;
    if (resources.gpus !== undefined && resources.gpus > 0) limits['nvidia.com/gpu'] = String(resources.gpus);
    const requests = Object.fromEntries(
      Object.entries(limits).filter(([key]) => key === 'cpu' || key === 'memory'),
    );
    const options = this.#options;
    return {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: {
        name: this.podName(id),
        labels,
        annotations: {
          [SPEC_ANNOTATION]: JSON.stringify({
            user: spec.user ?? null,
            network: spec.network,
            workdir: spec.workdir ?? null,
            pidsLimit: resources.pidsLimit ?? null,
          }),
        },
      },
      spec: {
        restartPolicy: 'Never',
        automountServiceAccountToken: false,
        enableServiceLinks: false,
        terminationGracePeriodSeconds: Math.max(1, options.deleteGracePeriodSeconds),
        activeDeadlineSeconds: this.#context.maxLifetimeSeconds,
        securityContext: {
          seccompProfile: { type: 'RuntimeDefault' },
          ...(user === undefined
            ? {}
            : {
                runAsUser: user.uid,
                ...(user.gid === undefined ? {} : { runAsGroup: user.gid }),
                runAsNonRoot: user.uid !== 0,
              }),
        },
        containers: [
          {
            name: SANDBOX_CONTAINER,
            image: spec.image,
            ...(options.imagePullPolicy === undefined ? {} : { imagePullPolicy: options.imagePullPolicy }),
            command: ['sh', '-c', IDLE_SCRIPT],
            env: Object.entries(spec.env).map(([name, value]) => ({ name, value })),
            ...(spec.workdir === undefined ? {} : { workingDir: spec.workdir }),
            resources: { limits, requests },
            securityContext: {
              allowPrivilegeEscalation: false,
              privileged: false,
              capabilities: { drop: ['ALL'], add: DEFAULT_CAPABILITIES },
            },
          },
        ],
        ...(options.runtimeClassName === undefined ? {} : { runtimeClassName: options.runtimeClassName }),
        ...(Object.keys(options.nodeSelector).length === 0 ? {} : { nodeSelector: options.nodeSelector }),
        ...(options.tolerations.length === 0 ? {} : { tolerations: options.tolerations }),
        ...(options.imagePullSecrets.length === 0
          ? {}
          : { imagePullSecrets: options.imagePullSecrets.map((name) => ({ name })) }),
      },
    };
  }

  async create(spec: SandboxSpec, options: CreateOptions = {}): Promise<SandboxInfo> {
    this.#checkCapabilities(spec);
    const id = options.id ?? createId('sbx');
    const createdAtMs = this.#context.clock.now();
    const deadlineAtMs = createdAtMs + this.#context.maxLifetimeSeconds * 1000;
    const leaseExpiresAtMs = Math.min(createdAtMs + spec.ttlSeconds * 1000, deadlineAtMs);
    const pool = options.pool ?? null;
    const labels = encodeLabels(
      KUBERNETES_LABEL_PREFIX,
      {
        namespace: this.#context.namespace,
        daemonId: this.#context.daemonId,
        sandboxId: id,
        pool,
        createdAtMs,
        leaseExpiresAtMs,
        deadlineAtMs,
      },
      spec.labels,
    );
    const manifest = this.#podManifest(spec, id, labels);
    await this.#ensurePolicy();
    let created: V1Pod;
    try {
      // Strict: a field the server does not know is an error, not silently dropped.
      created = await this.#core.createNamespacedPod({
        namespace: this.#namespace,
        body: manifest,
        fieldValidation: 'Strict',
      });
    } catch (error) {
      throw wrapApiError(error, 'Pod create');
    }
    try {
      await this.#waitRunning(id, spec.image);
      this.#oomCounts.start(id);
      for (const file of spec.files) {
        const content = Buffer.from(file.content, file.encoding === 'base64' ? 'base64' : 'utf8');
        await this.writeFile(id, file.path, content, { mode: file.mode });
      }
      if (spec.readiness !== undefined)
        await waitUntilReady(spec.readiness, (request) => this.exec(id, request));
    } catch (error) {
      await this.#deletePod(id, 0).catch((deleteError: unknown) =>
        this.#context.logger.warn(
          { sandboxId: id, error: String(deleteError) },
          'could not delete a Pod whose create failed',
        ),
      );
      this.#oomCounts.forget(id);
      if (
        error instanceof GymError &&
        (error.code === 'IMAGE_NOT_FOUND' || error.code === 'SANDBOX_START_FAILED')
      )
        throw error;
      const cause = error instanceof GymError ? error : wrapApiError(error, 'Pod start', id);
      throw new GymError(
        'SANDBOX_START_FAILED',
        `sandbox ${id} failed to start and was removed: ${cause.message}`,
        {
          details: { sandboxId: id, image: spec.image, reason: cause.message },
          cause,
        },
      );
    }
    this.#context.logger.debug({ sandboxId: id, image: spec.image }, 'sandbox created');
    return {
      id,
      provider: this.name,
      state: 'ready',
      image: spec.image,
      labels: { ...spec.labels },
      namespace: this.#context.namespace,
      daemonId: this.#context.daemonId,
      pool,
      createdAt: new Date(createdAtMs).toISOString(),
      leaseExpiresAt: new Date(leaseExpiresAtMs).toISOString(),
      deadlineAt: new Date(deadlineAtMs).toISOString(),
      providerRef: `${this.#namespace}/${created.metadata?.name ?? this.podName(id)}`,
    };
  }

  /**
   * Polls the Pod until Ready, failing fast on what will not resolve (image, runtime); a Pod the
   * scheduler cannot place fails only at the deadline, with the scheduler's reason.
   */
  async #waitRunning(id: string, image: string): Promise<void> {
    const deadline = performance.now() + this.#options.createTimeoutMs;
    let last = 'no status yet';
    /** The scheduler's message while the Pod is Unschedulable, else null. */
    let unscheduled: string | null = null;
    for (let attempt = 0; performance.now() < deadline; attempt++) {
      let pod: V1Pod;
      try {
        pod = await this.#core.readNamespacedPod({ name: this.podName(id), namespace: this.#namespace });
      } catch (error) {
        throw wrapApiError(error, 'Pod read', id);
      }
      if (isReady(pod)) return;
      const waiting = pod.status?.containerStatuses?.[0]?.state?.waiting;
      const terminated = pod.status?.containerStatuses?.[0]?.state?.terminated;
      const unschedulable = pod.status?.conditions?.find(
        (condition) =>
          condition.type === 'PodScheduled' &&
          condition.status === 'False' &&
          condition.reason === 'Unschedulable',
      );
      if (waiting?.reason !== undefined && IMAGE_REASONS.has(waiting.reason)) {
        throw new GymError(
          'IMAGE_NOT_FOUND',
          `image ${image} cannot be pulled (${waiting.reason}): ${waiting.message ?? ''}`,
          {
            details: { image, reason: waiting.reason },
          },
        );
      }
      if (waiting?.reason !== undefined && FATAL_REASONS.has(waiting.reason)) {
        throw new GymError(
          'SANDBOX_START_FAILED',
          `the Pod's container cannot start (${waiting.reason}): ${waiting.message ?? ''}`,
          {
            details: { sandboxId: id, reason: waiting.reason },
          },
        );
      }
      if (terminated !== undefined || pod.status?.phase === 'Failed' || pod.status?.phase === 'Succeeded') {
        throw new GymError(
          'SANDBOX_START_FAILED',
          `the Pod ended before it was ready (${terminated?.reason ?? pod.status?.reason ?? pod.status?.phase}, exit ${terminated?.exitCode ?? '?'})`,
          { details: { sandboxId: id, reason: terminated?.reason ?? pod.status?.reason ?? null } },
        );
      }
      // Unschedulable now may be schedulable soon (a cluster autoscaler adding a node): wait
      // until the deadline, and say the scheduler's reason if it comes.
      unscheduled = unschedulable?.message ?? (unschedulable === undefined ? null : 'no reason given');
      last = `${pod.status?.phase ?? 'unknown'}${waiting?.reason === undefined ? '' : ` (${waiting.reason})`}`;
      await new Promise((resolve) => setTimeout(resolve, Math.min(50 * 2 ** attempt, 500)));
    }
    if (unscheduled !== null) {
      throw new GymError(
        'SANDBOX_START_FAILED',
        `the Pod could not be scheduled within ${this.#options.createTimeoutMs} ms: ${unscheduled}`,
        { details: { sandboxId: id, reason: 'Unschedulable', message: unscheduled } },
      );
    }
    throw new GymError(
      'SANDBOX_START_FAILED',
      `the Pod was not ready within ${this.#options.createTimeoutMs} ms (last: ${last})`,
      {
        details: { sandboxId: id },
      },
    );
  }

  #toInfo(pod: V1Pod): SandboxInfo | null {
    const decoded = decodeLabels(KUBERNETES_LABEL_PREFIX, pod.metadata?.labels ?? {});
    if (decoded === null || decoded.namespace !== this.#context.namespace) return null;
    return {
      ...decoded,
      provider: this.name,
      state: podState(pod),
      image: pod.spec?.containers.find((container) => container.name === SANDBOX_CONTAINER)?.image ?? '',
      providerRef: `${pod.metadata?.namespace ?? this.#namespace}/${pod.metadata?.name ?? ''}`,
    };
  }

  async get(id: string): Promise<SandboxInfo> {
    let pod: V1Pod;
    try {
      pod = await this.#core.readNamespacedPod({ name: this.podName(id), namespace: this.#namespace });
    } catch (error) {
      throw wrapApiError(error, 'Pod read', id);
    }
    const info = this.#toInfo(pod);
    if (info === null || info.id !== id)
      throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
    return info;
  }

  async list(filter: ListFilter = {}): Promise<SandboxListing> {
    const selector = Object.entries(
      selectorLabels(KUBERNETES_LABEL_PREFIX, this.#context.namespace, filter),
    ).map(([key, value]) => `${key}=${value}`);
    const sandboxes: SandboxInfo[] = [];
    try {
      let continueToken: string | undefined;
      do {
        const page = await this.#core.listNamespacedPod({
          namespace: this.#namespace,
          labelSelector: selector.join(','),
          limit: 500,
          ...(continueToken === undefined ? {} : { _continue: continueToken }),
        });
        for (const pod of page.items) {
          const info = this.#toInfo(pod);
          if (info !== null) sandboxes.push(info);
        }
        continueToken = page.metadata?._continue || undefined;
      } while (continueToken !== undefined);
    } catch (error) {
      return {
        sandboxes: [],
        unreachable: [{ scope: API_SCOPE, reason: wrapApiError(error, 'Pod listing').message }],
      };
    }
    return { sandboxes, unreachable: [] };
  }

  /**
   * Says why a command ended without a normal exit: the OOM killer struck (the Pod's container
   * ended `OOMKilled`, or the OOM counter in its cgroup went up), the Pod is gone (deleted,
   * evicted, ended otherwise), or something else killed it.
   *
   * A kubelet 1.28+ on cgroup v2 sets `memory.oom.group`: an OOM kill then ends every process of
   * the container, which terminates with reason `OOMKilled`. The kubelet reports that end a
   * moment after the exec stream breaks, so a Pod that still looks running but cannot be probed
   * is read again for a few seconds before it is called gone.
   */
  async #classifyAbnormalEnd(id: string): Promise<AbnormalEnd> {
    let pod = await this.#readPod(id);
    if (pod === null) return 'sandbox_gone';
    if (endedOutOfMemory(pod)) return POD_OOM_LOSS;
    if (podState(pod) === 'ready') {
      const probe = await runPodCommand(
        this.#kubeConfig,
        this.#target(id),
        ['sh', '-c', OOM_COUNTER_COMMAND],
        {
          maxBytes: 4096,
          timeoutMs: 10_000,
        },
      ).catch(() => null);
      if (probe !== null && probe.end.kind === 'exited' && probe.end.exitCode === 0)
        return this.#oomCounts.classify(id, parseOomKillCount(probe.stdout.toString('utf8')));
    }
    for (const delayMs of OOM_REPORT_WAITS_MS) {
      // Deleted, or its container's end already reported (evicted, exited): nothing more will come.
      if (podState(pod) === 'destroying' || sandboxContainer(pod)?.state?.terminated !== undefined) break;
      await new Promise((resolve) => setTimeout(resolve, delayMs));
      pod = await this.#readPod(id);
      if (pod === null) return 'sandbox_gone';
      if (endedOutOfMemory(pod)) return POD_OOM_LOSS;
    }
    return 'sandbox_gone';
  }

  /** The Pod, or null when it cannot be read (gone, or the API does not answer). */
  async #readPod(id: string): Promise<V1Pod | null> {
    try {
      return await this.#core.readNamespacedPod({ name: this.podName(id), namespace: this.#namespace });
    } catch {
      return null;
    }
  }

  /**
   * Runs the kill script for one exec id in the Pod, bounded (opening its exec too); whether it
   * exited 0 in time.
   */
  async #runKillScript(id: string, execId: string, reach: KillReach): Promise<boolean> {
    const ran = await withTimeout(
      runPodCommand(this.#kubeConfig, this.#target(id), killScriptArgv(execId, reach), {
        maxBytes: 1024,
        timeoutMs: KILL_SCRIPT_WAIT_MS,
      }).catch(() => null),
      KILL_SCRIPT_WAIT_MS + 5_000,
    );
    return ran !== null && ran.end.kind === 'exited' && ran.end.exitCode === 0;
  }

  /**
   * A timeout's kill: the kill script in the Pod, and when it did not take effect (see
   * `KillOutcome`: the agent, as the Pod's user, can stop or kill it, or fork faster than it
   * kills), the Pod itself, killed by the kubelet, which nothing in it can resist. Throws only
   * when even that fails (the API does not answer).
   */
  async #killTagged(id: string, execId: string, reach: KillReach): Promise<KillOutcome> {
    if (await this.#runKillScript(id, execId, reach)) return 'killed';
    this.#context.logger.warn(
      { sandboxId: id, execId },
      'the timeout kill script did not take effect in the Pod; deleting the Pod',
    );
    const isGone = await withTimeout(
      this.#deletePodAndWait(id, KILLED_POD_GRACE_SECONDS).then(
        () => true,
        () => false,
      ),
      KILLED_POD_WAIT_MS,
    );
    if (isGone) return 'sandbox_killed';
    // Never "timeout" with the command perhaps still running: the caller gets this error.
    throw new GymError(
      'PROVIDER_ERROR',
      `the timeout kill of a command in sandbox ${id} did not take effect, and its Pod could not be seen deleted in time: the sandbox is unusable`,
      { details: { sandboxId: id } },
    );
  }

  #execHooks(id: string): ExecHooks {
    return { classifyAbnormalEnd: () => this.#classifyAbnormalEnd(id) };
  }

  async #session(id: string, name: string, user: string | undefined): Promise<ShellSession> {
    let byName = this.#sessions.get(id);
    if (byName === undefined) {
      byName = new Map();
      this.#sessions.set(id, byName);
    }
    const key = `${name}\0${user ?? ''}`;
    const existing = byName.get(key);
    if (existing !== undefined) {
      const session = await existing.catch(() => null);
      if (session?.isAlive) return session;
    }
    const wrapper = ['sh', '-c', wrapperScript({}), 'gym-session', createId('exec'), '', user ?? ''];
    // Only the command's processes: the session's shell shares the exec's session.
    const opening = openPodSession(this.#kubeConfig, this.#target(id), wrapper, (execId) =>
      this.#killTagged(id, execId, 'tagged-only'),
    );
    byName.set(key, opening);
    opening.catch(() => byName.delete(key));
    return opening;
  }

  #closeSessions(id: string): void {
    const byName = this.#sessions.get(id);
    this.#sessions.delete(id);
    for (const opening of byName?.values() ?? []) opening.then((session) => session.close()).catch(() => {});
  }

  async exec(id: string, request: ExecRequest, options: ExecOptions = {}): Promise<ExecResult> {
    try {
      if (request.session !== undefined) {
        const session = await this.#session(id, request.session, request.user);
        return await session.run(request, options, this.#execHooks(id));
      }
      return await this.#execOnce(id, request, options);
    } catch (error) {
      if (error instanceof PodExecRefused) {
        // 404: no such Pod; 400: the Pod exists but does not run (ended, or being deleted).
        if (error.httpStatus === 404 || error.httpStatus === 400) {
          await this.get(id); // throws SANDBOX_NOT_FOUND when the Pod is not there at all
          // A Pod whose container the OOM killer ended is the commands' loss, not the cluster's.
          const pod = await this.#readPod(id);
          if (pod !== null && endedOutOfMemory(pod))
            return markSandboxLost(emptyResult('sandbox_gone'), POD_OOM_LOSS.lost, POD_OOM_LOSS.reason);
          return emptyResult('sandbox_gone');
        }
        throw new GymError(
          error.httpStatus === null ? 'PROVIDER_UNAVAILABLE' : 'PROVIDER_ERROR',
          `exec in sandbox ${id} failed: ${error.message}`,
          { details: { sandboxId: id, httpStatus: error.httpStatus }, cause: error },
        );
      }
      throw error;
    }
  }

  async #execOnce(id: string, request: ExecRequest, options: ExecOptions): Promise<ExecResult> {
    const execId = createId('exec');
    const argv = request.argv ?? ['sh', '-c', request.command!];
    const output = new ExecOutput(request, options);
    const wrapped = [
      'sh',
      '-c',
      wrapperScript(request.env),
      'gym-exec',
      execId,
      request.cwd ?? '',
      request.user ?? '',
      ...argv,
    ];
    const stdin = stdinBytes(request);
    // stdin is never ended (v4 cannot without losing the status): the command reads it through
    // `head -c`, which stops at its length and gives the command end-of-file.
    const command = stdin === null ? wrapped : [...boundedStdin(stdin.length), ...wrapped];
    const running = await startPodExec(this.#kubeConfig, this.#target(id), command, {
      stdin,
      keepStdinOpen: true,
      onStdout: (chunk) => output.push('stdout', chunk),
      onStderr: (chunk) => output.push('stderr', chunk),
    });

    let killing: Promise<KillOutcome> | null = null;
    let isCancelled = false;
    const kill = () => {
      if (killing !== null) return;
      killing = this.#killTagged(id, execId, 'tagged-and-their-sessions');
      killing
        .then(
          (outcome) =>
            outcome === 'killed' && new Promise((resolve) => setTimeout(resolve, KILL_GRACE_MS).unref()),
          () => {},
        )
        .then(() => running.abandon());
    };
    const timer = setTimeout(kill, request.timeoutMs);
    const cancel = () => {
      isCancelled = true;
      kill();
    };
    if (options.signal?.aborted) cancel();
    else options.signal?.addEventListener('abort', cancel, { once: true });
    let end: PodExecEnd;
    try {
      end = await running.done;
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', cancel);
    }
    if (killing !== null) {
      // The result says "timeout" only once the kill has finished: nothing it started runs on.
      // When the kill had to take the Pod, the command ran on until then, and resisting its kill
      // cost it the sandbox: its own doing.
      if ((await killing) === 'sandbox_killed') {
        output.push('stderr', KILL_FAILED_NOTE);
        return output.lost(isCancelled ? 'killed' : 'timeout', KILL_FAILED_REASON);
      }
      return output.result(isCancelled ? 'killed' : 'timeout', null);
    }
    if (end.kind === 'exited' && end.exitCode !== SIGKILL_EXIT_CODE) return output.result('ok', end.exitCode);
    return abnormalEndResult(
      output,
      await this.#classifyAbnormalEnd(id),
      end.kind === 'exited' ? end.exitCode : null,
    );
  }

  /**
   * Runs a tar (or other helper) command in the Pod as root, to its end; throws on a refused exec.
   * Its stdout goes into `output`, with backpressure: while `output` is full the exec stream is
   * not read (so the Pod's command waits, not the daemon's memory), and an `output` destroyed
   * before its end drops the stream.
   */
  async #runHelper(
    id: string,
    argv: string[],
    stdin: Buffer | Readable | null,
    output?: Writable,
  ): Promise<{ exitCode: number; stderr: string }> {
    const errors: Buffer[] = [];
    let running: Awaited<ReturnType<typeof startPodExec>> | undefined;
    let isFull = false;
    const onStdout = (chunk: Buffer) => {
      if (output!.destroyed || output!.write(chunk) || isFull) return;
      isFull = true;
      running?.pause();
      output!.once('drain', () => {
        isFull = false;
        running?.resume();
      });
    };
    try {
      running = await startPodExec(this.#kubeConfig, this.#target(id), argv, {
        stdin,
        // Helpers read a known length of stdin (`head -c`): never ended, so v4 works too.
        keepStdinOpen: true,
        ...(output === undefined ? {} : { onStdout }),
        onStderr: (chunk) => {
          if (errors.length < 64) errors.push(chunk);
        },
      });
    } catch (error) {
      if (error instanceof PodExecRefused && (error.httpStatus === 404 || error.httpStatus === 400)) {
        await this.get(id);
        throw new GymError('SANDBOX_NOT_READY', `sandbox ${id} is not running`, {
          details: { sandboxId: id },
        });
      }
      throw error instanceof GymError ? error : wrapApiError(error, 'exec', id);
    }
    // Full before the stream was known: pause it now.
    if (isFull) running.pause();
    const opened = running;
    output?.once('close', () => {
      if (!output.writableFinished) opened.abandon();
    });
    const end = await running.done;
    if (end.kind === 'broken') {
      throw new GymError('PROVIDER_ERROR', `a file transfer in sandbox ${id} broke off: ${end.reason}`, {
        details: { sandboxId: id },
      });
    }
    return { exitCode: end.exitCode, stderr: Buffer.concat(errors).toString('utf8') };
  }

  /**
   * Extracts a tar at `/` after checking, in the same shell, that none of `directories` that
   * exists is a symbolic link or not a directory: tar would follow such a link out of the target.
   */
  async #extractAt(id: string, directories: string[], archive: SizedArchive): Promise<void> {
    const check = [
      'command -v head >/dev/null || { echo "gym-nohead" >&2; exit 94; }',
      'for d in "$@"; do',
      '  if [ -L "$d" ]; then echo "gym-link $d" >&2; exit 90; fi',
      '  if [ -e "$d" ] && [ ! -d "$d" ]; then echo "gym-notdir $d" >&2; exit 91; fi',
      'done',
    ];
    // The command travels in the exec's URL: many directories are checked in batches first,
    // the last batch in the same shell that extracts.
    const batches: string[][] = [];
    for (let start = 0; start < directories.length || batches.length === 0; start += EXTRACT_CHECK_BATCH) {
      batches.push(directories.slice(start, start + EXTRACT_CHECK_BATCH));
    }
    let result: { exitCode: number; stderr: string } = { exitCode: 0, stderr: '' };
    for (const [index, batch] of batches.entries()) {
      const isLast = index === batches.length - 1;
      // -o: files belong to the user extracting them, not to ids from the archive.
      // stdin is never ended (see `boundedStdin`): tar reads exactly the archive's bytes.
      const extract = `head -c ${archive.sizeBytes} | tar -x -o -f - -C /`;
      const script = [...check, ...(isLast ? [extract] : [])].join('\n');
      result = await this.#runHelper(
        id,
        ['sh', '-c', script, 'gym-extract', ...batch],
        isLast ? archive.stream : null,
      );
      if (result.exitCode !== 0) break;
    }
    const { exitCode, stderr } = result;
    if (exitCode === 94) {
      throw new GymError('PROVIDER_ERROR', `sandbox ${id}'s image has no \`head\`, which uploads need`, {
        details: { sandboxId: id },
      });
    }
    if (exitCode === 90 || exitCode === 91) {
      const path = stderr.split(' ').slice(1).join(' ').trim();
      throw new GymError(
        'PATH_KIND_MISMATCH',
        exitCode === 90
          ? `${path} is a symbolic link in sandbox ${id}; uploads never pass through links, write to the real path instead`
          : `${path} is not a directory in sandbox ${id}`,
        { details: { sandboxId: id, path } },
      );
    }
    if (exitCode !== 0) {
      if (/directory|not a dir|cannot (create|open)|exists/i.test(stderr)) {
        throw new GymError('PATH_KIND_MISMATCH', `cannot write in sandbox ${id}: ${stderr.trim()}`, {
          details: { sandboxId: id },
        });
      }
      throw new GymError(
        'PROVIDER_ERROR',
        `tar failed in sandbox ${id} (exit ${exitCode}): ${stderr.trim()}`,
        {
          details: { sandboxId: id },
        },
      );
    }
  }

  async writeFile(
    id: string,
    path: string,
    content: FileContent,
    options: WriteFileOptions = {},
  ): Promise<void> {
    const normalized = posix.normalize(path);
    if (normalized === '/') throw new GymError('PATH_KIND_MISMATCH', 'cannot write a file at /');
    const parents: string[] = [];
    for (let dir = posix.dirname(normalized); dir !== '/'; dir = posix.dirname(dir)) parents.unshift(dir);
    // The file itself must not be a directory (tar would fail) nor a link (tar would replace it, which is fine).
    const script = `if [ -d ${shellQuote(normalized)} ] && [ ! -L ${shellQuote(normalized)} ]; then echo "gym-notfile" >&2; exit 92; fi`;
    const check = await this.#runHelper(id, ['sh', '-c', script], null);
    if (check.exitCode === 92)
      throw new GymError('PATH_KIND_MISMATCH', `${path} is a directory in sandbox ${id}`);
    const packed = packSingleFile(normalized.slice(1), content, options.mode ?? 0o644);
    if (content instanceof Uint8Array) {
      // In memory already: so is its tar, whose size is then known.
      const archive = Buffer.concat(await packed.toArray());
      await this.#extractAt(id, parents, { stream: archive, sizeBytes: archive.length });
      return;
    }
    // A stream: its tar is spooled to learn its size, by the spooler archive uploads use (the
    // one entry is re-packed unchanged at `/`).
    const spooled = await spoolSafeArchive(packed, '/');
    try {
      await this.#extractAt(id, parents, { stream: spooled.open(), sizeBytes: spooled.sizeBytes });
    } finally {
      await spooled.dispose();
    }
  }

  /** A tar of `path` as `tar -c` in the Pod makes it, streamed; FILE_NOT_FOUND when it is not there. */
  async #tarOf(id: string, path: string, follow: boolean): Promise<Readable> {
    const normalized = posix.normalize(path);
    const parent = posix.dirname(normalized);
    const base = normalized === '/' ? '.' : posix.basename(normalized);
    const script = [
      `[ -e ${shellQuote(normalized)} ] || [ -L ${shellQuote(normalized)} ] || { echo gym-missing >&2; exit 93; }`,
      `exec tar -c ${follow ? '-h ' : ''}-f - -C ${shellQuote(normalized === '/' ? '/' : parent)} ${shellQuote(base)}`,
    ].join('\n');
    const stream = new PassThrough();
    const ended = this.#runHelper(id, ['sh', '-c', script], null, stream);
    // Wait for the first bytes or the end, so a missing file is an error, not an empty stream.
    const first = await Promise.race([
      new Promise<'data'>((resolve) => stream.once('readable', () => resolve('data'))),
      ended.then((result) => result),
    ]);
    if (first !== 'data' && first.exitCode === 93) {
      throw new GymError('FILE_NOT_FOUND', `${path} does not exist in sandbox ${id}`, {
        details: { sandboxId: id, path },
      });
    }
    ended.then(
      (result) => {
        if (result.exitCode === 0) stream.end();
        else
          stream.destroy(
            new GymError('PROVIDER_ERROR', `tar failed in sandbox ${id}: ${result.stderr.trim()}`),
          );
      },
      (error: unknown) => stream.destroy(error as Error),
    );
    return stream;
  }

  async readFile(id: string, path: string): Promise<Readable> {
    // tar -h follows symbolic links, the file's own and those on its path.
    const { header, content } = await firstEntry(await this.#tarOf(id, path, true));
    if (content !== null) return content;
    if (header.type === 'directory')
      throw new GymError('PATH_KIND_MISMATCH', `${path} is a directory, not a file`);
    throw new GymError('PATH_KIND_MISMATCH', `${path} is a ${header.type}, not a regular file`);
  }

  async writeArchive(id: string, directory: string, archive: Readable): Promise<void> {
    // Check the sandbox first, so an upload to a missing one does not spool for nothing.
    await this.get(id);
    const spooled = await spoolSafeArchive(archive, directory);
    try {
      await this.#extractAt(id, [...spooled.directories], {
        stream: spooled.open(),
        sizeBytes: spooled.sizeBytes,
      });
    } finally {
      await spooled.dispose();
    }
  }

  async readArchive(id: string, directory: string): Promise<Readable> {
    return rebaseArchive(await this.#tarOf(id, directory, false));
  }

  async #deletePod(id: string, gracePeriodSeconds: number): Promise<void> {
    try {
      await this.#core.deleteNamespacedPod({
        name: this.podName(id),
        namespace: this.#namespace,
        gracePeriodSeconds,
      });
    } catch (error) {
      if (apiFailure(error).code === 404) return;
      throw wrapApiError(error, 'Pod delete', id);
    }
  }

  /**
   * Relays `http://127.0.0.1:<port>` inside the Pod to the gateway socket over an exec stream
   * (see `gateway-relay.ts`): any free port the first time, the recorded URL's port after a
   * restart. Each Pod has its own loopback, so ports never collide.
   */
  async exposeGateway(id: string, options: { socketPath: string; url?: string }): Promise<{ url: string }> {
    if (!this.capabilities.gatewayReach) {
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        `gateway reach is off for this kubernetes provider (option gatewayReach, or no relay at ${this.#options.relayHelperPath}: run scripts/setup.sh)`,
        { details: { provider: this.name, capability: 'gatewayReach' } },
      );
    }
    const open = await this.#relays.get(id)?.catch(() => null);
    if (open?.relay.isOpen) return { url: `http://127.0.0.1:${open.relay.port}` };
    let port = 0;
    if (options.url !== undefined) {
      const match = /^http:\/\/127\.0\.0\.1:(\d{1,5})$/.exec(options.url);
      port = Number(match?.[1]);
      if (match === null || port < 1 || port > 65535) {
        throw new GymError(
          'PROVIDER_ERROR',
          `cannot restore gateway reach at ${options.url}: not a URL this provider gives`,
          {
            details: { url: options.url },
          },
        );
      }
    }
    const starting = (async () => {
      if ((await this.get(id)).state !== 'ready') {
        throw new GymError('SANDBOX_NOT_READY', `sandbox ${id} is not running`, {
          details: { sandboxId: id },
        });
      }
      const binary = await loadRelayBinary(this.#options.relayHelperPath);
      if (binary === null)
        throw new GymError('PROVIDER_ERROR', `the relay ${this.#options.relayHelperPath} cannot be read`);
      await this.writeFile(id, RELAY_PATH_IN_POD, binary, { mode: 0o755 });
      const execId = createId('exec');
      const wrapper = ['sh', '-c', wrapperScript({}), 'gym-relay', execId, '', ''];
      const relay = await PodRelay.start(
        this.#kubeConfig,
        this.#target(id),
        wrapper,
        port,
        options.socketPath,
        this.#options.relayMaxConnections,
        this.#relayCounters,
      );
      this.#relayList.add(relay);
      return { relay, execId };
    })();
    this.#relays.set(id, starting);
    starting.catch(() => {
      if (this.#relays.get(id) === starting) this.#relays.delete(id);
    });
    return { url: `http://127.0.0.1:${(await starting).relay.port}` };
  }

  relayStats(): RelayStats {
    return relayStatsOf(this.#relayList, this.#relayCounters.refusedTotal);
  }

  /** Drops a sandbox's relay; with `kill`, also kills the relay process in the Pod (by its tag). */
  async #releaseRelay(id: string, kill: boolean): Promise<void> {
    const starting = this.#relays.get(id);
    this.#relays.delete(id);
    const started = await starting?.catch(() => null);
    if (started === null || started === undefined) return;
    started.relay.close();
    this.#relayList.delete(started.relay);
    // Not a timeout: a relay that outlives this is harmless, and the sandbox must live on.
    if (kill) await this.#runKillScript(id, started.execId, 'tagged-only');
  }

  /**
   * Kills every process of the Pod but its keeper, from inside (`STOP_SCRIPT`), and drops its
   * sessions and gateway relay (a later `exposeGateway` starts the relay again).
   */
  async stopProcesses(id: string): Promise<StopProcessesResult> {
    this.#closeSessions(id);
    await this.#releaseRelay(id, false);
    if ((await this.get(id)).state !== 'ready') {
      throw new GymError('SANDBOX_NOT_READY', `sandbox ${id} is not running`, { details: { sandboxId: id } });
    }
    // The stop runs inside the Pod, where the agent's processes can stop or outrun it: bounded,
    // and when it does not finish the Pod goes, which nothing in it resists (as a timeout kill).
    // An exec the API refused (it never reached the Pod) is the cluster's fault, not the agent's
    // (under load an honest rollout was once graded the agent's failure here: a refused exec or a
    // start slower than the bound, not pinned down; both are handled). Whatever happened in
    // the Pod (the script stopped, outrun, or not started because the agent broke its shell)
    // counts as resisting.
    let result: Awaited<ReturnType<typeof runPodCommand>> | null;
    try {
      result = await withTimeout(
        runPodCommand(this.#kubeConfig, this.#target(id), ['sh', '-c', STOP_SCRIPT], {
          maxBytes: 1024,
          timeoutMs: STOP_SCRIPT_WAIT_MS,
        }),
        STOP_SCRIPT_WAIT_MS + 5_000,
      );
    } catch (error) {
      throw new GymError(
        'PROVIDER_ERROR',
        `could not run the stop in the Pod of sandbox ${id}: ${String(error)}`,
        {
          details: { sandboxId: id },
          cause: error,
        },
      );
    }
    if (result === null || result.end.kind !== 'exited' || result.end.exitCode !== 0) {
      this.#context.logger.warn(
        { sandboxId: id },
        'stopping the processes did not finish in the Pod; deleting the Pod',
      );
      const isGone = await withTimeout(
        this.#deletePodAndWait(id, KILLED_POD_GRACE_SECONDS).then(
          () => true,
          () => false,
        ),
        KILLED_POD_WAIT_MS,
      );
      if (isGone === true)
        return {
          killed: 0,
          sandboxLost: true,
          reason:
            "the sandbox's processes resisted being stopped (the stop inside the Pod was stopped or outrun), so the Pod was deleted",
        };
      throw new GymError(
        'PROVIDER_ERROR',
        `could not stop the processes of sandbox ${id}, nor delete its Pod`,
        {
          details: { sandboxId: id },
        },
      );
    }
    const killed = Number.parseInt(result.stdout.toString('utf8').trim(), 10);
    if (!Number.isInteger(killed)) {
      throw new GymError(
        'PROVIDER_ERROR',
        `could not stop the processes of sandbox ${id}: ${JSON.stringify(result.end)} ${result.stderr}`,
        {
          details: { sandboxId: id },
        },
      );
    }
    return { killed };
  }

  /** Deletes the Pod and waits (bounded) until the API no longer shows it. Idempotent. */
  async destroy(id: string): Promise<void> {
    await this.#releaseRelay(id, false);
    this.#closeSessions(id);
    this.#oomCounts.forget(id);
    await this.#deletePodAndWait(id, this.#options.deleteGracePeriodSeconds);
  }

  /**
   * Deletes the Pod with `grace` and waits (bounded) until the API no longer shows it, that is
   * until the kubelet has ended its containers; forced out of the API past the bound.
   */
  async #deletePodAndWait(id: string, grace: number): Promise<void> {
    await this.#deletePod(id, grace);
    const deadline = performance.now() + (grace + 10) * 1000;
    for (let attempt = 0; performance.now() < deadline; attempt++) {
      try {
        await this.#core.readNamespacedPod({ name: this.podName(id), namespace: this.#namespace });
      } catch (error) {
        if (apiFailure(error).code === 404) return;
        throw wrapApiError(error, 'Pod read', id);
      }
      await new Promise((resolve) => setTimeout(resolve, Math.min(50 * 2 ** attempt, 500)));
    }
    // Still terminating (a node that does not answer): force it out of the API.
    await this.#deletePod(id, 0);
  }

  async close(): Promise<void> {
    // The sandboxes live on without reach until a daemon restores it at the same URL.
    await Promise.all([...this.#relays.keys()].map((id) => this.#releaseRelay(id, true)));
    for (const id of [...this.#sessions.keys()]) this.#closeSessions(id);
    this.#oomCounts.clear();
  }
}
