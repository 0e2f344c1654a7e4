/**
 * The Kubernetes provider: one Pod per sandbox in a configured namespace, commands over pods/exec.
 * This class holds the sandbox lifecycle and delegates each other job to one file:
 *
 * - `options.ts`: what the operator configures.
 * - `pod-manifest.ts`: the Pod (identity in its labels, what is not identity in an annotation,
 *   the image in its spec; hardened, with `activeDeadlineSeconds` at the hard deadline).
 * - `pods.ts`, `pod-start.ts`, `pod-status.ts`: the API calls on a Pod, its start watched until
 *   Ready, and what its status says.
 * - `exec.ts`: commands in the Pod, each wrapped in `sh -c` to apply env, cwd and user and tagged
 *   with `GYM_EXEC_ID`; a timeout runs the shared kill script in the Pod (`timeoutKill: tagged`).
 * - `kill-scripts.ts`: the kills from inside the Pod, and the Pod deleted when they fail.
 * - `files.ts`: files and archives as tar streams over exec, with the same archive checks as
 *   Docker before a byte reaches the Pod.
 * - `network-policy.ts`: a NetworkPolicy that denies all ingress and egress to our Pods,
 *   created once per namespace and checked by `health()`.
 * - `pod-services.ts`: a multi-container task's other services, as sidecars of the same Pod.
 * - `gateway-relay.ts`: gateway reach over an exec stream; `errors.ts`: the API's refusals as
 *   our errors.
 */
import { existsSync } from 'node:fs';
import type { Readable } from 'node:stream';
import { CoreV1Api, type KubeConfig, NetworkingV1Api, type V1Pod } from '@kubernetes/client-node';
import { GymError } from '../../core/errors.ts';
import { createId } from '../../core/ids.ts';
import type { StopProcessesResult } from '../../core/schemas/api.ts';
import type { ExecRequest, ExecResult } from '../../core/schemas/exec.ts';
import type { SandboxInfo, SandboxSpec } from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import {
  type CreateOptions,
  type ExecOptions,
  type FileContent,
  type ListFilter,
  PROVIDER_SPECIFICATION_VERSION,
  type ProviderCapabilities,
  type ProviderContext,
  type ProviderHealth,
  type RelayStats,
  type SandboxListing,
  type SandboxProvider,
  type WriteFileOptions,
} from '../sandbox-provider.ts';
import { OomKillCounts } from '../shared/abnormal-end.ts';
import { loopbackGatewayUrl, recordedGatewayPort } from '../shared/gateway-url.ts';
import { decodeLabels, encodeLabels, SYSTEM_LABELS, selectorLabels } from '../shared/labels.ts';
import type { PortRelay } from '../shared/port-relay.ts';
import type { PtyChannel, PtyOpenOptions, PtyOpenRequest } from '../shared/pty-channel.ts';
import { waitUntilReady } from '../shared/readiness.ts';
import { RelayTable } from '../shared/relay-table.ts';
import { sandboxIdentity } from '../shared/sandbox-identity.ts';
import { SessionTable } from '../shared/session-table.ts';
import type { ShellSession } from '../shared/shell-session.ts';
import { requireSpecCapabilities } from '../shared/spec-capabilities.ts';
import { wrapApiError } from './errors.ts';
import { PodCommands, wrapperScript } from './exec.ts';
import { PodFiles } from './files.ts';
import {
  loadRelayBinary,
  PodRelay,
  RELAY_PATH_IN_POD,
  relayStatsOf,
  startPodPortRelay,
  type TaggedPodRelay,
  tagRelay,
} from './gateway-relay.ts';
import { PodProcesses } from './kill-scripts.ts';
import { DenyAllPolicy } from './network-policy.ts';
import {
  type KubernetesOptions,
  type KubernetesProviderOptions,
  KubernetesProviderOptionsSchema,
} from './options.ts';
import { PodExecRefused, type PodTarget } from './pod-exec.ts';
import { KUBERNETES_LABEL_PREFIX, podManifest, SANDBOX_CONTAINER } from './pod-manifest.ts';
import { openPodPty } from './pod-pty.ts';
import { servicesProblem } from './pod-services.ts';
import { waitPodRunning } from './pod-start.ts';
import { podState } from './pod-status.ts';
import { Pods } from './pods.ts';

export { type KubernetesProviderOptions, KubernetesProviderOptionsSchema } from './options.ts';
export { DEFAULT_CAPABILITIES, KUBERNETES_LABEL_PREFIX, SANDBOX_CONTAINER } from './pod-manifest.ts';

/** The one scope of a Kubernetes backend: the API server. */
const API_SCOPE = 'api-server';

export class KubernetesProvider implements SandboxProvider {
  readonly specificationVersion = PROVIDER_SPECIFICATION_VERSION;
  readonly name = 'kubernetes';
  readonly capabilityHints = {
    gpus: 'set `gpus: true` in its options on a cluster with the NVIDIA device plugin',
  };
  readonly capabilities: ProviderCapabilities;
  readonly #kubeConfig: KubeConfig;
  readonly #context: ProviderContext;
  readonly #options: KubernetesOptions;
  readonly #namespace: string;
  /** The API calls on our Pods. */
  readonly #pods: Pods;
  /** The deny-all NetworkPolicy of our Pods. */
  readonly #policy: DenyAllPolicy;
  /** Kills from inside a Pod (timeouts, stop-processes), and the Pod when they fail. */
  readonly #processes: PodProcesses;
  /** Commands over pods/exec. */
  readonly #commands: PodCommands;
  /** Files and archives as tar over exec. */
  readonly #files: PodFiles;
  /** Last OOM-kill count seen per sandbox; a fresh Pod starts at 0. */
  readonly #oomCounts = new OomKillCounts();
  /** Gateway relays by sandbox id, with the exec id that tags each for the kill script. */
  readonly #relays = new RelayTable<TaggedPodRelay>();
  readonly #relayCounters = { refusedTotal: 0 };
  /** Sessions by sandbox id, then by session name and user. */
  readonly #sessions = new SessionTable();

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
    const target = (id: string) => this.#target(id);
    const get = (id: string) => this.get(id);
    this.#pods = new Pods(kubeConfig.makeApiClient(CoreV1Api), this.#namespace, (id) => this.podName(id));
    this.#policy = new DenyAllPolicy(
      kubeConfig.makeApiClient(NetworkingV1Api),
      this.#namespace,
      context.namespace,
    );
    this.#processes = new PodProcesses(kubeConfig, target, this.#pods, context.logger);
    this.#commands = new PodCommands(kubeConfig, target, this.#pods, this.#processes, this.#oomCounts, get);
    this.#files = new PodFiles(kubeConfig, target, get);
    this.capabilities = {
      sessions: true,
      snapshot: false,
      gpus: this.#options.gpus,
      diskLimit: true,
      // Taken, recorded in the Pod's annotation, not enforced: the node's podPidsLimit applies.
      pidsLimit: false,
      networkModes: ['none'],
      gatewayReach: this.#options.gatewayReach && existsSync(this.#options.relayHelperPath),
      // The same relay in connect mode, over an exec stream (`openPortRelay`).
      ports: existsSync(this.#options.relayHelperPath),
      timeoutKill: 'tagged',
      // From inside the Pod, by a script of shell builtins (`kill-scripts.ts`): the tagged guarantee.
      stopProcesses: true,
      // pods/exec with `tty` and the resize channel (`pod-pty.ts`).
      pty: true,
      // Sidecars of the sandbox's Pod, sharing its network namespace (`pod-services.ts`).
      services: true,
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
    return this.#policy.name;
  }

  #target(id: string): PodTarget {
    return { namespace: this.#namespace, pod: this.podName(id), container: SANDBOX_CONTAINER };
  }

  async health(): Promise<ProviderHealth> {
    try {
      await this.#pods.listPage(
        `${KUBERNETES_LABEL_PREFIX}${SYSTEM_LABELS.namespace}=${this.#context.namespace}`,
        1,
      );
    } catch (error) {
      return { ok: false, message: wrapApiError(error, 'pod listing').message };
    }
    if (this.#options.networkPolicy) {
      const problem = await this.#policy.problem();
      if (problem !== null) return { ok: false, message: problem };
    }
    // The API cannot tell whether the network plugin enforces NetworkPolicy: say so (gym doctor shows it).
    const isolation = this.#options.networkPolicy
      ? `network none is the NetworkPolicy ${this.#policy.name}, which holds only if the cluster's network plugin enforces NetworkPolicy`
      : 'networkPolicy is off: network none is not enforced by this provider';
    return {
      ok: true,
      message: `Kubernetes API server answers for namespace ${this.#namespace}; ${isolation}; timed-out commands are killed from inside the Pod only (tagged)`,
      details: { namespace: this.#namespace, timeoutKill: this.capabilities.timeoutKill },
    };
  }

  async create(spec: SandboxSpec, options: CreateOptions = {}): Promise<SandboxInfo> {
    requireSpecCapabilities(this.name, this.capabilities, spec, this.capabilityHints);
    if (Object.keys(spec.providerOptions).length > 0) {
      throw new GymError(
        'VALIDATION_FAILED',
        `providerOptions for kubernetes: none are accepted per spec (got ${Object.keys(spec.providerOptions).join(', ')})`,
      );
    }
    const identity = sandboxIdentity(options, this.#context, spec.ttlSeconds);
    const { id } = identity;
    const pool = options.pool ?? null;
    const labels = encodeLabels(
      KUBERNETES_LABEL_PREFIX,
      {
        namespace: this.#context.namespace,
        daemonId: this.#context.daemonId,
        sandboxId: id,
        pool,
        createdAtMs: Date.parse(identity.createdAt),
        leaseExpiresAtMs: Date.parse(identity.leaseExpiresAt),
        deadlineAtMs: Date.parse(identity.deadlineAt),
      },
      spec.labels,
    );
    const manifest = podManifest(
      spec,
      this.podName(id),
      labels,
      this.#options,
      this.#context.maxLifetimeSeconds,
    );
    if (this.#options.networkPolicy) await this.#policy.ensure();
    const created = await this.#pods.create(manifest);
    try {
      await waitPodRunning(this.#pods, id, spec.image, this.#options.createTimeoutMs, (pod) =>
        servicesProblem(id, pod, spec.services ?? []),
      );
      this.#oomCounts.start(id);
      for (const file of spec.files) {
        const content = Buffer.from(file.content, file.encoding === 'base64' ? 'base64' : 'utf8');
        await this.writeFile(id, file.path, content, { mode: file.mode });
      }
      if (spec.readiness !== undefined)
        await waitUntilReady(spec.readiness, (request) => this.exec(id, request));
    } catch (error) {
      await this.#pods
        .delete(id, 0)
        .catch((deleteError: unknown) =>
          this.#context.logger.warn(
            { sandboxId: id, error: String(deleteError) },
            'could not delete a Pod whose create failed',
          ),
        );
      this.#oomCounts.forget(id);
      if (
        error instanceof GymError &&
        (error.code === 'IMAGE_NOT_FOUND' ||
          error.code === 'SANDBOX_START_FAILED' ||
          error.code === 'SERVICE_UNHEALTHY')
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
      createdAt: identity.createdAt,
      leaseExpiresAt: identity.leaseExpiresAt,
      deadlineAt: identity.deadlineAt,
      providerRef: `${this.#namespace}/${created.metadata?.name ?? this.podName(id)}`,
    };
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
    const info = this.#toInfo(await this.#pods.read(id));
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
        const page = await this.#pods.listPage(selector.join(','), 500, continueToken);
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

  async exec(id: string, request: ExecRequest, options: ExecOptions = {}): Promise<ExecResult> {
    try {
      if (request.session !== undefined) {
        const session = await this.#session(id, request.session, request.user);
        return await session.run(request, options, this.#commands.hooks(id));
      }
      return await this.#commands.runOnce(id, request, options);
    } catch (error) {
      if (error instanceof PodExecRefused) return await this.#commands.refused(id, error);
      throw error;
    }
  }

  /** A terminal: pods/exec with `tty` (`pod-pty.ts`); it dies with the Pod. */
  async openPty(id: string, request: PtyOpenRequest, options: PtyOpenOptions): Promise<PtyChannel> {
    try {
      return await openPodPty(this.#kubeConfig, this.#target(id), request, options);
    } catch (error) {
      if (!(error instanceof PodExecRefused)) throw error;
      // The same reading of the refusal as a command's: no Pod, a Pod not running, or the cluster.
      const refused = await this.#commands.refused(id, error);
      throw new GymError('SANDBOX_NOT_READY', `sandbox ${id} cannot open a terminal (${refused.status})`, {
        details: { sandboxId: id },
      });
    }
  }

  #session(id: string, name: string, user: string | undefined): Promise<ShellSession> {
    return this.#sessions.session(id, name, user, () => this.#commands.openSession(id, user));
  }

  writeFile(id: string, path: string, content: FileContent, options: WriteFileOptions = {}): Promise<void> {
    return this.#files.writeFile(id, path, content, options);
  }

  readFile(id: string, path: string): Promise<Readable> {
    return this.#files.readFile(id, path);
  }

  writeArchive(id: string, directory: string, archive: Readable): Promise<void> {
    return this.#files.writeArchive(id, directory, archive);
  }

  readArchive(id: string, directory: string): Promise<Readable> {
    return this.#files.readArchive(id, directory);
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
    const open = await this.#relays.current(id);
    if (open !== undefined) return { url: loopbackGatewayUrl(open.relay.port) };
    const port = recordedGatewayPort(options.url);
    const started = await this.#relays.open(id, () => this.#startRelay(id, port, options.socketPath));
    return { url: loopbackGatewayUrl(started.relay.port) };
  }

  async #startRelay(id: string, port: number, socketPath: string): Promise<TaggedPodRelay> {
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
      socketPath,
      this.#options.relayMaxConnections,
      this.#relayCounters,
    );
    return tagRelay(relay, execId);
  }

  async openPortRelay(id: string): Promise<PortRelay> {
    if ((await this.get(id)).state !== 'ready')
      throw new GymError('SANDBOX_NOT_READY', `sandbox ${id} is not running`, { details: { sandboxId: id } });
    return startPodPortRelay(
      this.#kubeConfig,
      this.#target(id),
      this.#options.relayHelperPath,
      (path, content) => this.writeFile(id, path, content, { mode: 0o755 }),
    );
  }

  relayStats(): RelayStats {
    return relayStatsOf(
      [...this.#relays.openRelays].map((tagged) => tagged.relay),
      this.#relayCounters.refusedTotal,
    );
  }

  /** Drops a sandbox's relay; with `kill`, also kills the relay process in the Pod (by its tag). */
  async #releaseRelay(id: string, kill: boolean): Promise<void> {
    const released = await this.#relays.release(id);
    // Not a timeout: a relay that outlives this is harmless, and the sandbox must live on.
    if (released !== undefined && kill)
      await this.#processes.runKillScript(id, released.execId, 'tagged-only');
  }

  /**
   * Kills every process of the Pod but its keeper, from inside (`kill-scripts.ts`), and drops its
   * sessions and gateway relay (a later `exposeGateway` starts the relay again).
   */
  async stopProcesses(id: string): Promise<StopProcessesResult> {
    this.#sessions.close(id);
    await this.#releaseRelay(id, false);
    if ((await this.get(id)).state !== 'ready') {
      throw new GymError('SANDBOX_NOT_READY', `sandbox ${id} is not running`, { details: { sandboxId: id } });
    }
    return this.#processes.stopAll(id);
  }

  /** Deletes the Pod and waits (bounded) until the API no longer shows it. Idempotent. */
  async destroy(id: string): Promise<void> {
    await this.#releaseRelay(id, false);
    this.#sessions.close(id);
    this.#oomCounts.forget(id);
    await this.#pods.deleteAndWait(id, this.#options.deleteGracePeriodSeconds);
  }

  async close(): Promise<void> {
    // The sandboxes live on without reach until a daemon restores it at the same URL.
    await Promise.all(this.#relays.sandboxIds.map((id) => this.#releaseRelay(id, true)));
    this.#sessions.closeAll();
    this.#oomCounts.clear();
  }
}
