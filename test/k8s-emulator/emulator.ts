/**
 * A Kubernetes API emulator for tests, backed by the Docker engine. TEST-ONLY: never shipped.
 *
 * No API server can run on our machines, so this speaks, over real HTTP and WebSocket, the subset
 * of the API the Kubernetes provider uses, closely enough that the unmodified
 * `@kubernetes/client-node` works against it: Pods (create, get, list and watch by label
 * selector, delete, exec over `v4`/`v5.channel.k8s.io`, with a terminal and its resize channel),
 * NetworkPolicies and Services (accepted,
 * validated and recorded, never enforced). A Pod is one container of the engine, labelled
 * `gym-k8s-emulator=<id>` so `close()` (or a person) can find and remove every one. A Pod's native
 * sidecars (init containers with `restartPolicy: Always`, the only init containers it takes) are
 * more containers joined to that one's network namespace, with `hostAliases` in the hosts file
 * they share and exec startup probes: `sidecars.ts` says what of the kubelet it reproduces.
 *
 * It refuses what a real server refuses (see `validation.ts`): a bearer token is required, every
 * object is checked against Kubernetes' own OpenAPI schema, unknown fields are an error, names
 * and labels follow the server's syntax. What it does not reproduce: scheduling (every Pod runs
 * at once on this host, but one asking for GPUs stays Unschedulable until `addGpuNode()`), image pulls (an image the engine lacks stays `ErrImagePull`),
 * NetworkPolicy enforcement (every Pod has no network but loopback, whatever the policies),
 * restarts (a container that exits stays terminated), kubelet eviction on its own (a test
 * evicts with `evict()`), ephemeral-storage limits,
 * admission, RBAC, field selectors, pagination and the watch cache's history (a watch starts now).
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex, Readable } from 'node:stream';
import type Docker from 'dockerode';
import { type WebSocket, WebSocketServer } from 'ws';
import { DockerStreamDemuxer } from '../../providers/docker/demux.ts';
import { cgroup2Mount } from '../../providers/docker/host-checks.ts';
import { viewThroughHostPid } from '../../providers/shared/host-process.ts';
import {
  removeSidecars,
  type Sidecar,
  sidecarStatuses,
  sidecarsOf,
  sidecarsStarted,
  startSidecars,
} from './sidecars.ts';
import { type Cause, type Kind, validateObject } from './validation.ts';

/** Bytes of an exec's output sent to the client and not yet flushed before the output is not read. */
const EXEC_MAX_UNSENT_BYTES = 256 * 1024;

/** The label on every container the emulator makes; its value is the emulator's id. */
export const EMULATOR_LABEL = 'gym-k8s-emulator';
const POD_LABEL = 'gym-k8s-emulator.pod';

// biome-ignore lint/suspicious/noExplicitAny: the emulator stores whatever JSON the validators accepted.
type Json = Record<string, any>;

interface StoredPod {
  object: Json;
  containerId: string | null;
  /** The host pid of the container's first process, once started. */
  hostPid?: number;
  /** Why the container could not be made, as a waiting reason and message. */
  waiting: { reason: string; message: string } | null;
  /** The last status written, without timestamps, to tell a change from a re-read. */
  fingerprint: string;
  /** Set by `evict`: the kubelet's message. */
  evicted?: string;
  /** With `oomKillsContainer`: the kill of the whole container after an OOM kill in it. */
  oomKill?: Promise<void>;
  /** Its native sidecars (`sidecars.ts`), in start order. */
  sidecars: Sidecar[];
}

interface Watcher {
  namespace: string;
  selector: Selector;
  response: ServerResponse;
}

/** The host's cgroup2 mount, where a container's `memory.events` is (cgroup v1 hosts use `memory.oom_control`). */
const HOST_CGROUP2_MOUNT =
  cgroup2Mount(readFileSync('/proc/self/mountinfo', 'utf8'))?.path ?? '/sys/fs/cgroup';

/** How many processes the kernel's OOM killer ended in a running container, seen from the host; 0 when unknown. */
async function oomKillsInContainer(docker: Docker, containerId: string): Promise<number> {
  const pid = await docker
    .getContainer(containerId)
    .inspect()
    .then(
      (info) => info.State.Pid,
      () => 0,
    );
  return pid > 0 ? ((await viewThroughHostPid(pid, HOST_CGROUP2_MOUNT)).oomKills ?? 0) : 0;
}

/**
 * Kills a container's first process from the host (when this process may), which ends its pid
 * namespace and everything in it, as a kubelet's runtime kills a deleted Pod whatever its
 * processes do. The engine alone cannot while an exec in the container is stuck half-started (its
 * `runc init` stopped by the agent): it holds the container, and a stop or remove waits until
 * that exec goes on.
 */
function killFromHost(containerId: string, hostPid: number | undefined): void {
  if (hostPid === undefined || hostPid <= 0) return;
  try {
    // Only that container's process: the pid may have been reused since.
    if (!readFileSync(`/proc/${hostPid}/cgroup`, 'utf8').includes(containerId)) return;
    process.kill(hostPid, 'SIGKILL');
  } catch {
    // Gone already, or not ours to kill: the engine's stop and remove follow anyway.
  }
}

/** Whether `promise` settles (either way) within `ms`. */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const settled = await Promise.race([
    promise.then(
      () => true,
      () => true,
    ),
    new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    }),
  ]);
  clearTimeout(timer);
  return settled;
}

/** A parsed label selector: every requirement must hold. */
type Requirement =
  | { op: 'eq' | 'neq'; key: string; value: string }
  | { op: 'in' | 'notin'; key: string; values: string[] }
  | { op: 'exists' | 'absent'; key: string };
type Selector = Requirement[];

export function parseLabelSelector(text: string | null): Selector {
  if (text === null || text.trim() === '') return [];
  const parts: string[] = [];
  let depth = 0;
  let current = '';
  for (const char of text) {
    if (char === '(') depth++;
    if (char === ')') depth--;
    if (char === ',' && depth === 0) {
      parts.push(current);
      current = '';
    } else current += char;
  }
  parts.push(current);
  return parts.map((raw) => {
    const part = raw.trim();
    let match = /^(\S+)\s+(in|notin)\s+\(([^)]*)\)$/.exec(part);
    if (match !== null) {
      const values = match[3]!.split(',').map((value) => value.trim());
      return { op: match[2] as 'in' | 'notin', key: match[1]!, values };
    }
    match = /^([^!=\s]+)\s*(==|=|!=)\s*(\S*)$/.exec(part);
    if (match !== null) return { op: match[2] === '!=' ? 'neq' : 'eq', key: match[1]!, value: match[3]! };
    match = /^!\s*(\S+)$/.exec(part);
    if (match !== null) return { op: 'absent', key: match[1]! };
    if (/^\S+$/.test(part)) return { op: 'exists', key: part };
    throw new Error(`unable to parse requirement: "${part}"`);
  });
}

export function selectorMatches(selector: Selector, labels: Record<string, string> | undefined): boolean {
  const present = labels ?? {};
  return selector.every((requirement) => {
    const value = present[requirement.key];
    switch (requirement.op) {
      case 'eq':
        return value === requirement.value;
      case 'neq':
        return value !== requirement.value;
      case 'in':
        return value !== undefined && requirement.values.includes(value);
      case 'notin':
        return value === undefined || !requirement.values.includes(value);
      case 'exists':
        return value !== undefined;
      case 'absent':
        return value === undefined;
      default:
        return false;
    }
  });
}

/** Bytes of a resource quantity (`128Mi`, `1G`, `500m`), as the engine wants memory. */
export function quantityValue(quantity: string | number): number {
  if (typeof quantity === 'number') return quantity;
  const match = /^([+-]?[0-9.]+)([a-zA-Z]*)$/.exec(quantity);
  if (match === null) return Number.NaN;
  const binary: Record<string, number> = {
    Ki: 2 ** 10,
    Mi: 2 ** 20,
    Gi: 2 ** 30,
    Ti: 2 ** 40,
    Pi: 2 ** 50,
    Ei: 2 ** 60,
  };
  const decimal: Record<string, number> = {
    n: 1e-9,
    u: 1e-6,
    m: 1e-3,
    '': 1,
    k: 1e3,
    M: 1e6,
    G: 1e9,
    T: 1e12,
    P: 1e15,
    E: 1e18,
  };
  const scale = binary[match[2]!] ?? decimal[match[2]!];
  return scale === undefined ? Number.NaN : Number(match[1]) * scale;
}

function statusBody(code: number, reason: string, message: string, details?: Json): Json {
  return {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message,
    reason,
    code,
    ...(details ? { details } : {}),
  };
}

function sendJson(response: ServerResponse, code: number, body: unknown): void {
  const text = JSON.stringify(body);
  response.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  response.end(text);
}

class ApiError extends Error {
  readonly code: number;
  readonly reason: string;
  readonly details: Json | undefined;

  constructor(code: number, reason: string, message: string, details?: Json) {
    super(message);
    this.code = code;
    this.reason = reason;
    this.details = details;
  }
}

const RESOURCES: Record<string, { kind: Kind; plural: string; listKind: string; apiVersion: string }> = {
  services: { kind: 'Service', plural: 'services', listKind: 'ServiceList', apiVersion: 'v1' },
  networkpolicies: {
    kind: 'NetworkPolicy',
    plural: 'networkpolicies',
    listKind: 'NetworkPolicyList',
    apiVersion: 'networking.k8s.io/v1',
  },
};

export interface EmulatorStats {
  /** Exec streams opened, by negotiated subprotocol. */
  execs: Record<string, number>;
  /** Requests refused with 422 or 400 (validation). */
  refused: number;
}

export class KubernetesEmulator {
  readonly id = `emu${randomUUID().slice(0, 8)}`;
  readonly token = randomUUID();
  readonly stats: EmulatorStats = { execs: {}, refused: 0 };
  readonly #docker: Docker;
  readonly #server: Server;
  readonly #wss: WebSocketServer;
  readonly #pods = new Map<string, StoredPod>();
  /** Services and NetworkPolicies, by `<plural>/<namespace>/<name>`. */
  readonly #others = new Map<string, Json>();
  readonly #watchers = new Set<Watcher>();
  readonly #openSockets = new Set<WebSocket>();
  #resourceVersion = 1000;
  /** GPUs of the largest node (none until `addGpuNode`): a Pod asking for more is Unschedulable. */
  #gpusPerNode = 0;
  #poller: NodeJS.Timeout | null = null;
  /** The engine's event stream, with `oomKillsContainer`. */
  #oomEvents: Readable | null = null;
  #port = 0;

  readonly #protocols: readonly string[];

  private constructor(docker: Docker, protocols: readonly string[]) {
    this.#docker = docker;
    this.#protocols = protocols;
    this.#wss = new WebSocketServer({
      noServer: true,
      // The newest protocol both sides speak, as the apiserver chooses.
      handleProtocols: (offered) => protocols.find((protocol) => offered.has(protocol)) ?? false,
    });
    this.#server = createServer((request, response) => {
      this.#handle(request, response).catch((error: unknown) => {
        if (response.headersSent) response.destroy();
        else if (error instanceof ApiError)
          sendJson(response, error.code, statusBody(error.code, error.reason, error.message, error.details));
        else
          sendJson(
            response,
            500,
            statusBody(500, 'InternalError', `Internal error occurred: ${(error as Error).message}`),
          );
      });
    });
    this.#server.on('upgrade', (request, socket, head) => {
      this.#upgrade(request, socket, head).catch((error: unknown) => {
        const code = error instanceof ApiError ? error.code : 500;
        const body = JSON.stringify(
          statusBody(
            code,
            error instanceof ApiError ? error.reason : 'InternalError',
            (error as Error).message,
          ),
        );
        socket.end(
          `HTTP/1.1 ${code} Error\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
        );
      });
    });
  }

  /**
   * `protocols`: the exec subprotocols served, newest first; `['v4.channel.k8s.io']` stands for
   * a server before Kubernetes 1.30 (no v5, so no stdin CLOSE signal).
   * `oomKillsContainer`: an OOM kill of any process in a Pod's container kills the whole
   * container, which ends `OOMKilled` (exit 137), as a kubelet 1.28+ on cgroup v2 does by setting
   * `memory.oom.group` (unless its `singleProcessOOMKill` is set). Without it, only the process
   * the kernel chose dies, as on cgroup v1 (this host) and in a plain Docker container.
   */
  static async start(
    docker: Docker,
    options: { protocols?: readonly string[]; oomKillsContainer?: boolean } = {},
  ): Promise<KubernetesEmulator> {
    const emulator = new KubernetesEmulator(
      docker,
      options.protocols ?? ['v5.channel.k8s.io', 'v4.channel.k8s.io'],
    );
    if (options.oomKillsContainer === true) await emulator.#watchOomKills();
    await new Promise<void>((resolve) => emulator.#server.listen(0, '127.0.0.1', resolve));
    emulator.#port = (emulator.#server.address() as AddressInfo).port;
    emulator.#poller = setInterval(() => void emulator.#refreshAll(), 300);
    emulator.#poller.unref();
    return emulator;
  }

  get url(): string {
    return `http://127.0.0.1:${this.#port}`;
  }

  /** A kubeconfig for this emulator (plain HTTP needs `insecure-skip-tls-verify` in client-node). */
  kubeconfig(namespace = 'default'): string {
    return [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      '- name: emulator',
      '  cluster:',
      `    server: ${this.url}`,
      '    insecure-skip-tls-verify: true',
      'users:',
      '- name: emulator-user',
      '  user:',
      `    token: ${this.token}`,
      'contexts:',
      '- name: emulator',
      '  context:',
      '    cluster: emulator',
      '    user: emulator-user',
      `    namespace: ${namespace}`,
      'current-context: emulator',
      '',
    ].join('\n');
  }

  /** What was stored for a Service or NetworkPolicy (`plural` as in the URL), for assertions. */
  recorded(plural: 'services' | 'networkpolicies', namespace: string): Json[] {
    const prefix = `${plural}/${namespace}/`;
    return [...this.#others.entries()].filter(([key]) => key.startsWith(prefix)).map(([, value]) => value);
  }

  /** The engine's container behind a Pod, for tests that act behind the API's back. */
  containerOf(namespace: string, name: string): string | null {
    return this.#pods.get(`${namespace}/${name}`)?.containerId ?? null;
  }

  /**
   * Does what a kubelet under node pressure does: kills the Pod's container and marks the Pod
   * Failed with reason Evicted (the object stays until someone deletes it).
   */
  async evict(namespace: string, name: string): Promise<void> {
    const pod = this.#pod(namespace, name);
    pod.evicted = 'The node was low on resource: memory.';
    if (pod.containerId !== null)
      await this.#docker
        .getContainer(pod.containerId)
        .kill()
        .catch(() => {});
    await this.#refresh(pod);
  }

  /**
   * Does what a cluster autoscaler does for Pods that wait for GPUs: a node with `gpus` of them
   * joins, and every Unschedulable Pod asking for at most that many is scheduled and starts.
   * (The emulator does not count the GPUs Pods use, nor give the container any.)
   */
  async addGpuNode(gpus: number): Promise<void> {
    this.#gpusPerNode = Math.max(this.#gpusPerNode, gpus);
    const waiting = [...this.#pods.values()].filter((pod) => pod.waiting?.reason === 'Unschedulable');
    for (const pod of waiting) {
      if (pod.object.metadata.deletionTimestamp !== undefined) continue;
      pod.waiting = null;
      await this.#startContainer(pod);
      await this.#refresh(pod);
    }
  }

  /** Follows the engine's `oom` events for our containers: each kills its whole container. */
  async #watchOomKills(): Promise<void> {
    const events = (await this.#docker.getEvents({
      filters: { type: ['container'], event: ['oom'], label: [`${EMULATOR_LABEL}=${this.id}`] },
    })) as unknown as Readable;
    this.#oomEvents = events;
    events.on('error', () => {});
    let pending = '';
    events.on('data', (chunk: Buffer) => {
      pending += chunk.toString('utf8');
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const line of lines) {
        let containerId: string | undefined;
        try {
          containerId = (JSON.parse(line) as { id?: string }).id;
        } catch {
          continue;
        }
        const pod = [...this.#pods.values()].find((each) => each.containerId === containerId);
        if (pod === undefined) continue;
        this.#killForOom(pod);
      }
    });
  }

  /** Kills a Pod's container once after an OOM kill in it, as `memory.oom.group` does (see `oomKillsContainer`). */
  #killForOom(pod: StoredPod): void {
    pod.oomKill ??= this.#docker
      .getContainer(pod.containerId!)
      .kill()
      .catch(() => {})
      .then(() => this.#refresh(pod));
  }

  async close(): Promise<void> {
    this.#oomEvents?.destroy();
    if (this.#poller !== null) clearInterval(this.#poller);
    for (const watcher of this.#watchers) watcher.response.end();
    this.#watchers.clear();
    for (const socket of this.#openSockets) socket.terminate();
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
    const containers = await this.#docker.listContainers({
      all: true,
      filters: { label: [`${EMULATOR_LABEL}=${this.id}`] },
    });
    await Promise.all(
      containers.map((container) =>
        this.#docker
          .getContainer(container.Id)
          .remove({ force: true })
          .catch(() => {}),
      ),
    );
  }

  #nextVersion(): string {
    this.#resourceVersion += 1;
    return String(this.#resourceVersion);
  }

  #authorize(request: IncomingMessage): void {
    if (request.headers.authorization !== `Bearer ${this.token}`) {
      throw new ApiError(401, 'Unauthorized', 'Unauthorized');
    }
  }

  async #handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    this.#authorize(request);
    const url = new URL(request.url ?? '/', 'http://emulator');
    const method = request.method ?? 'GET';
    const path = url.pathname;
    if (path === '/version' && method === 'GET') {
      sendJson(response, 200, {
        major: '1',
        minor: '31',
        gitVersion: 'v1.31.0-gym-emulator',
        platform: 'linux/amd64',
      });
      return;
    }
    let match = /^\/api\/v1\/namespaces\/([^/]+)$/.exec(path);
    if (match !== null && method === 'GET') {
      sendJson(response, 200, {
        kind: 'Namespace',
        apiVersion: 'v1',
        metadata: { name: match[1] },
        status: { phase: 'Active' },
      });
      return;
    }
    match = /^\/api\/v1\/namespaces\/([^/]+)\/pods(?:\/([^/]+))?$/.exec(path);
    if (match !== null) {
      const namespace = decodeURIComponent(match[1]!);
      const name = match[2] === undefined ? undefined : decodeURIComponent(match[2]);
      if (name === undefined && method === 'POST')
        return this.#createPod(namespace, url, await readBody(request), response);
      if (name === undefined && method === 'GET') {
        const selector = this.#selector(url);
        if (isTrue(url.searchParams.get('watch'))) return this.#watch(namespace, selector, url, response);
        await this.#refreshAll();
        const items = [...this.#pods.values()]
          .map((pod) => pod.object)
          .filter(
            (pod) => pod.metadata.namespace === namespace && selectorMatches(selector, pod.metadata.labels),
          );
        sendJson(response, 200, {
          kind: 'PodList',
          apiVersion: 'v1',
          metadata: { resourceVersion: String(this.#resourceVersion) },
          items,
        });
        return;
      }
      if (name !== undefined && method === 'GET') {
        const pod = this.#pod(namespace, name);
        await this.#refresh(pod);
        sendJson(response, 200, pod.object);
        return;
      }
      if (name !== undefined && method === 'DELETE') {
        await readBody(request);
        return this.#deletePod(namespace, name, url, response);
      }
    }
    match =
      /^\/(?:api\/v1|apis\/networking\.k8s\.io\/v1)\/namespaces\/([^/]+)\/(services|networkpolicies)(?:\/([^/]+))?$/.exec(
        path,
      );
    if (match !== null && (match[2] === 'services') === path.startsWith('/api/v1/')) {
      return this.#other(
        RESOURCES[match[2]!]!,
        decodeURIComponent(match[1]!),
        match[3],
        method,
        url,
        request,
        response,
      );
    }
    throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
  }

  #selector(url: URL): Selector {
    try {
      return parseLabelSelector(url.searchParams.get('labelSelector'));
    } catch (error) {
      throw new ApiError(400, 'BadRequest', (error as Error).message);
    }
  }

  #pod(namespace: string, name: string): StoredPod {
    const pod = this.#pods.get(`${namespace}/${name}`);
    if (pod === undefined)
      throw new ApiError(404, 'NotFound', `pods "${name}" not found`, { name, kind: 'pods' });
    return pod;
  }

  /** Validates an object as the server would; unknown fields are refused unless the client asked to ignore them. */
  #validate(kind: Kind, body: Json, url: URL): void {
    const fieldValidation = url.searchParams.get('fieldValidation');
    const causes = validateObject(kind, body).filter(
      (cause) =>
        cause.reason !== 'UnknownField' || (fieldValidation !== 'Ignore' && fieldValidation !== 'Warn'),
    );
    if (causes.length === 0) return;
    this.stats.refused++;
    const unknown = causes.filter((cause) => cause.reason === 'UnknownField');
    if (unknown.length > 0) {
      // A strict decoder fails before validation runs: 400, not 422.
      throw new ApiError(
        400,
        'BadRequest',
        `strict decoding error: ${unknown.map((cause) => cause.message).join(', ')}`,
      );
    }
    const name = String(body.metadata?.name ?? body.metadata?.generateName ?? '');
    throw new ApiError(
      422,
      'Invalid',
      `${kind} "${name}" is invalid: ${causes.map((cause: Cause) => `${cause.field}: ${cause.message}`).join(', ')}`,
      { name, kind: kind === 'NetworkPolicy' ? 'NetworkPolicy' : kind, causes },
    );
  }

  #fillMetadata(body: Json, namespace: string, url: URL): void {
    body.metadata ??= {};
    if (body.metadata.namespace !== undefined && body.metadata.namespace !== namespace) {
      throw new ApiError(
        400,
        'BadRequest',
        'the namespace of the provided object does not match the namespace sent on the request',
      );
    }
    if (body.metadata.name === undefined && typeof body.metadata.generateName === 'string') {
      body.metadata.name = `${body.metadata.generateName}${randomUUID().slice(0, 5)}`;
    }
    void url;
    Object.assign(body.metadata, {
      namespace,
      uid: randomUUID(),
      resourceVersion: this.#nextVersion(),
      creationTimestamp: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    });
  }

  async #createPod(namespace: string, url: URL, raw: Buffer, response: ServerResponse): Promise<void> {
    const body = parseJson(raw);
    if (body.kind !== undefined && body.kind !== 'Pod')
      throw new ApiError(400, 'BadRequest', `wrong kind ${body.kind}`);
    body.apiVersion ??= 'v1';
    body.kind ??= 'Pod';
    this.#validate('Pod', body, url);
    const name = String(body.metadata?.name ?? '');
    if (name !== '' && this.#pods.has(`${namespace}/${name}`)) {
      throw new ApiError(409, 'AlreadyExists', `pods "${name}" already exists`, { name, kind: 'pods' });
    }
    if (isTrue(url.searchParams.get('dryRun'))) {
      sendJson(response, 201, body);
      return;
    }
    this.#fillMetadata(body, namespace, url);
    body.spec.restartPolicy ??= 'Always';
    body.spec.terminationGracePeriodSeconds ??= 30;
    body.spec.dnsPolicy ??= 'ClusterFirst';
    body.spec.schedulerName ??= 'default-scheduler';
    body.status = { phase: 'Pending', qosClass: 'BestEffort' };
    const sidecars = sidecarsOf(body.spec);
    if (typeof sidecars === 'string') throw new ApiError(422, 'Invalid', sidecars);
    const stored: StoredPod = { object: body, containerId: null, waiting: null, fingerprint: '', sidecars };
    this.#pods.set(`${namespace}/${body.metadata.name}`, stored);
    this.#emit('ADDED', body);
    sendJson(response, 201, body);
    // The kubelet's part happens after the API answered, as on a cluster.
    void this.#startContainer(stored).then(async () => {
      await this.#refresh(stored);
      if (stored.containerId === null || stored.waiting !== null || sidecars.length === 0) return;
      await startSidecars(
        this.#docker,
        body.spec,
        sidecars,
        stored.containerId,
        (sidecar) => `${this.id}-${namespace}-${body.metadata.name}-${sidecar}`.slice(0, 200),
        { [EMULATOR_LABEL]: this.id, [POD_LABEL]: `${namespace}/${body.metadata.name}` },
        () => body.metadata.deletionTimestamp !== undefined,
      );
      await this.#refresh(stored);
    });
  }

  async #startContainer(pod: StoredPod): Promise<void> {
    const spec = pod.object.spec;
    const container = spec.containers[0];
    const limits: Json = container.resources?.limits ?? {};
    const gpus = quantityValue(limits['nvidia.com/gpu'] ?? 0);
    if (gpus > this.#gpusPerNode) {
      pod.waiting = {
        reason: 'Unschedulable',
        message: `0/1 nodes are available: 1 Insufficient nvidia.com/gpu.`,
      };
      return;
    }
    try {
      await this.#docker.getImage(container.image).inspect();
    } catch {
      pod.waiting = {
        reason: 'ErrImagePull',
        message: `failed to pull and unpack image "${container.image}": not found (the emulator pulls nothing)`,
      };
      return;
    }
    const security: Json = { ...(spec.securityContext ?? {}), ...(container.securityContext ?? {}) };
    const user =
      security.runAsUser === undefined
        ? undefined
        : `${security.runAsUser}${security.runAsGroup === undefined ? '' : `:${security.runAsGroup}`}`;
    const memory = limits.memory === undefined ? undefined : Math.floor(quantityValue(limits.memory));
    const cpu = limits.cpu === undefined ? undefined : Math.round(quantityValue(limits.cpu) * 1e9);
    try {
      const created = await this.#docker.createContainer({
        name: `${this.id}-${pod.object.metadata.namespace}-${pod.object.metadata.name}`.slice(0, 200),
        Image: container.image,
        ...(container.command === undefined ? {} : { Entrypoint: container.command }),
        ...(container.args === undefined ? {} : { Cmd: container.args }),
        Env: (container.env ?? []).map((variable: Json) => `${variable.name}=${variable.value ?? ''}`),
        ...(container.workingDir === undefined ? {} : { WorkingDir: container.workingDir }),
        ...(user === undefined ? {} : { User: user }),
        Labels: {
          [EMULATOR_LABEL]: this.id,
          [POD_LABEL]: `${pod.object.metadata.namespace}/${pod.object.metadata.name}`,
        },
        HostConfig: {
          NetworkMode: 'none',
          // The kubelet writes hostAliases into each container's hosts file; sidecars share this one.
          ExtraHosts: (spec.hostAliases ?? []).flatMap((alias: Json) =>
            (alias.hostnames ?? []).map((hostname: string) => `${hostname}:${alias.ip}`),
          ),
          ...(memory === undefined ? {} : { Memory: memory, MemorySwap: memory }),
          ...(cpu === undefined ? {} : { NanoCpus: cpu }),
          CapDrop: security.capabilities?.drop ?? [],
          CapAdd: security.capabilities?.add ?? [],
          SecurityOpt: security.allowPrivilegeEscalation === false ? ['no-new-privileges'] : [],
          ReadonlyRootfs: security.readOnlyRootFilesystem === true,
          Privileged: security.privileged === true,
        },
      });
      pod.containerId = created.id;
      await created.start();
      pod.hostPid = (await created.inspect()).State.Pid;
    } catch (error) {
      pod.waiting = { reason: 'CreateContainerError', message: (error as Error).message };
    }
  }

  /** Reads the container's state into the Pod's status; emits MODIFIED when it changed. */
  async #refresh(pod: StoredPod): Promise<void> {
    const containerName = pod.object.spec.containers[0].name;
    const image = pod.object.spec.containers[0].image;
    let containerStatus: Json = {
      name: containerName,
      image,
      ready: false,
      restartCount: 0,
      started: false,
      state: {},
    };
    let phase = 'Pending';
    const conditions: Json[] = [];
    const now = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    if (pod.waiting?.reason === 'Unschedulable') {
      conditions.push({
        type: 'PodScheduled',
        status: 'False',
        reason: 'Unschedulable',
        message: pod.waiting.message,
      });
      containerStatus = null as unknown as Json;
    } else if (pod.waiting !== null) {
      containerStatus.state = { waiting: pod.waiting };
    } else if (pod.containerId === null) {
      containerStatus.state = { waiting: { reason: 'ContainerCreating' } };
    } else {
      const inspected = await this.#docker
        .getContainer(pod.containerId)
        .inspect()
        .catch(() => null);
      if (inspected === null) {
        phase = 'Failed';
        containerStatus.state = { terminated: { exitCode: 137, reason: 'ContainerStatusUnknown' } };
      } else if (inspected.State.Running && !sidecarsStarted(pod.sidecars)) {
        // Here it holds the namespace from the start; a kubelet starts it after the sidecars.
        containerStatus.state = { waiting: { reason: 'PodInitializing' } };
      } else if (inspected.State.Running) {
        phase = 'Running';
        containerStatus = {
          ...containerStatus,
          ready: true,
          started: true,
          state: { running: { startedAt: inspected.State.StartedAt } },
        };
      } else if (inspected.State.Status === 'created') {
        containerStatus.state = { waiting: { reason: 'ContainerCreating' } };
      } else {
        const exitCode = inspected.State.ExitCode;
        phase = pod.object.spec.restartPolicy === 'Always' || exitCode !== 0 ? 'Failed' : 'Succeeded';
        const reason =
          inspected.State.OOMKilled || pod.oomKill !== undefined
            ? 'OOMKilled'
            : exitCode === 0
              ? 'Completed'
              : 'Error';
        containerStatus.state = { terminated: { exitCode, reason, finishedAt: inspected.State.FinishedAt } };
      }
    }
    if (pod.waiting?.reason !== 'Unschedulable') conditions.push({ type: 'PodScheduled', status: 'True' });
    const ready = phase === 'Running' ? 'True' : 'False';
    conditions.push({ type: 'ContainersReady', status: ready }, { type: 'Ready', status: ready });
    if (pod.evicted !== undefined) phase = 'Failed';
    const status: Json = {
      phase,
      conditions,
      qosClass: 'BestEffort',
      ...(pod.evicted === undefined ? {} : { reason: 'Evicted', message: pod.evicted }),
    };
    if (containerStatus !== null) status.containerStatuses = [containerStatus];
    if (pod.sidecars.length > 0)
      status.initContainerStatuses = await sidecarStatuses(this.#docker, pod.sidecars);
    if (phase === 'Running') status.podIP = '127.0.0.1';
    const fingerprint = JSON.stringify(status);
    if (fingerprint === pod.fingerprint) return;
    pod.fingerprint = fingerprint;
    // Timestamps only move when something else did, so an unchanged Pod keeps its version.
    for (const condition of conditions) condition.lastTransitionTime = now;
    pod.object.status = status;
    pod.object.metadata.resourceVersion = this.#nextVersion();
    this.#emit('MODIFIED', pod.object);
  }

  async #refreshAll(): Promise<void> {
    await Promise.all([...this.#pods.values()].map((pod) => this.#refresh(pod).catch(() => {})));
  }

  async #deletePod(namespace: string, name: string, url: URL, response: ServerResponse): Promise<void> {
    const pod = this.#pod(namespace, name);
    const requested = url.searchParams.get('gracePeriodSeconds');
    const grace =
      requested === null ? Number(pod.object.spec.terminationGracePeriodSeconds ?? 30) : Number(requested);
    const remove = async () => {
      await removeSidecars(this.#docker, pod.sidecars);
      if (pod.containerId !== null) {
        const { containerId, hostPid } = pod;
        const container = this.#docker.getContainer(containerId);
        // As a kubelet: TERM, the grace, KILL. An engine that does not get there in time is held
        // by a stuck exec: the runtime's kill from the node does it then.
        if (grace > 0 && !(await settlesWithin(container.stop({ t: grace }), (grace + 5) * 1000)))
          killFromHost(containerId, hostPid);
        const removing = container.remove({ force: true }).catch(() => {});
        if (!(await settlesWithin(removing, 5_000))) killFromHost(containerId, hostPid);
        await removing;
      }
      if (this.#pods.get(`${namespace}/${name}`) === pod) {
        this.#pods.delete(`${namespace}/${name}`);
        pod.object.metadata.resourceVersion = this.#nextVersion();
        this.#emit('DELETED', pod.object);
      }
    };
    if (pod.object.metadata.deletionTimestamp === undefined) {
      pod.object.metadata.deletionTimestamp = new Date(Date.now() + grace * 1000)
        .toISOString()
        .replace(/\.\d+Z$/, 'Z');
      pod.object.metadata.deletionGracePeriodSeconds = grace;
      pod.object.metadata.resourceVersion = this.#nextVersion();
      this.#emit('MODIFIED', pod.object);
    }
    // Grace 0 removes the object before answering; otherwise it stays visible while it stops.
    if (grace === 0) await remove();
    else void remove();
    sendJson(response, 200, pod.object);
  }

  #watch(namespace: string, selector: Selector, url: URL, response: ServerResponse): void {
    response.writeHead(200, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' });
    // A client waits for the headers before it reads events: send them now.
    response.flushHeaders();
    const watcher: Watcher = { namespace, selector, response };
    this.#watchers.add(watcher);
    for (const pod of this.#pods.values()) {
      if (
        pod.object.metadata.namespace === namespace &&
        selectorMatches(selector, pod.object.metadata.labels)
      ) {
        response.write(`${JSON.stringify({ type: 'ADDED', object: pod.object })}\n`);
      }
    }
    const timeoutSeconds = Number(url.searchParams.get('timeoutSeconds') ?? 1800);
    const timer = setTimeout(() => response.end(), timeoutSeconds * 1000);
    timer.unref();
    response.on('close', () => {
      clearTimeout(timer);
      this.#watchers.delete(watcher);
    });
  }

  #emit(type: 'ADDED' | 'MODIFIED' | 'DELETED', object: Json): void {
    const line = `${JSON.stringify({ type, object })}\n`;
    for (const watcher of this.#watchers) {
      if (
        watcher.namespace === object.metadata.namespace &&
        selectorMatches(watcher.selector, object.metadata.labels)
      ) {
        watcher.response.write(line);
      }
    }
  }

  async #other(
    resource: (typeof RESOURCES)[string],
    namespace: string,
    encodedName: string | undefined,
    method: string,
    url: URL,
    request: IncomingMessage,
    response: ServerResponse,
  ): Promise<void> {
    const name = encodedName === undefined ? undefined : decodeURIComponent(encodedName);
    const key = (objectName: string) => `${resource.plural}/${namespace}/${objectName}`;
    const notFound = (objectName: string) =>
      new ApiError(404, 'NotFound', `${resource.plural} "${objectName}" not found`, {
        name: objectName,
        kind: resource.plural,
      });
    if (name === undefined && method === 'POST') {
      const body = parseJson(await readBody(request));
      body.apiVersion ??= resource.apiVersion;
      body.kind ??= resource.kind;
      this.#validate(resource.kind, body, url);
      const objectName = String(body.metadata?.name ?? '');
      if (this.#others.has(key(objectName))) {
        throw new ApiError(409, 'AlreadyExists', `${resource.plural} "${objectName}" already exists`, {
          name: objectName,
          kind: resource.plural,
        });
      }
      this.#fillMetadata(body, namespace, url);
      this.#others.set(key(body.metadata.name), body);
      sendJson(response, 201, body);
      return;
    }
    if (name === undefined && method === 'GET') {
      const selector = this.#selector(url);
      const items = this.recorded(resource.plural as 'services', namespace).filter((item) =>
        selectorMatches(selector, item.metadata.labels),
      );
      sendJson(response, 200, {
        kind: resource.listKind,
        apiVersion: resource.apiVersion,
        metadata: { resourceVersion: String(this.#resourceVersion) },
        items,
      });
      return;
    }
    if (name !== undefined && method === 'GET') {
      const found = this.#others.get(key(name));
      if (found === undefined) throw notFound(name);
      sendJson(response, 200, found);
      return;
    }
    if (name !== undefined && method === 'DELETE') {
      await readBody(request);
      const found = this.#others.get(key(name));
      if (found === undefined) throw notFound(name);
      this.#others.delete(key(name));
      sendJson(response, 200, {
        kind: 'Status',
        apiVersion: 'v1',
        metadata: {},
        status: 'Success',
        details: { name, kind: resource.plural },
      });
      return;
    }
    throw new ApiError(405, 'MethodNotAllowed', `${method} is not supported on ${resource.plural}`);
  }

  async #upgrade(request: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    this.#authorize(request);
    const url = new URL(request.url ?? '/', 'http://emulator');
    const match = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)\/exec$/.exec(url.pathname);
    if (match === null)
      throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    const pod = this.#pod(decodeURIComponent(match[1]!), decodeURIComponent(match[2]!));
    const command = url.searchParams.getAll('command');
    if (command.length === 0)
      throw new ApiError(400, 'BadRequest', 'you must specify at least one command for the container');
    const container = url.searchParams.get('container');
    const names: string[] = pod.object.spec.containers.map((each: Json) => each.name);
    if (container !== null && container !== '' && !names.includes(container)) {
      throw new ApiError(
        400,
        'BadRequest',
        `container ${container} is not valid for pod ${pod.object.metadata.name}`,
      );
    }
    await this.#refresh(pod);
    if (pod.object.status.phase !== 'Running' || pod.containerId === null) {
      throw new ApiError(400, 'BadRequest', `pod ${pod.object.metadata.name} is not running`);
    }
    const streams = {
      stdin: isTrue(url.searchParams.get('stdin')),
      stdout: isTrue(url.searchParams.get('stdout')),
      stderr: isTrue(url.searchParams.get('stderr')),
      tty: isTrue(url.searchParams.get('tty')),
    };
    if (!streams.stdin && !streams.stdout && !streams.stderr) {
      throw new ApiError(400, 'BadRequest', 'you must specify at least 1 of stdin, stdout, stderr');
    }
    const offered = (request.headers['sec-websocket-protocol'] ?? '').split(',').map((each) => each.trim());
    if (!this.#protocols.some((protocol) => offered.includes(protocol))) {
      throw new ApiError(400, 'BadRequest', `the emulator speaks only ${this.#protocols.join(' and ')}`);
    }
    const engineContainer = this.#docker.getContainer(pod.containerId);
    const exec = await engineContainer.exec({
      Cmd: command,
      AttachStdin: streams.stdin,
      AttachStdout: streams.stdout,
      AttachStderr: streams.stderr && !streams.tty,
      Tty: streams.tty,
    });
    // `Tty` at the start too: without it the engine frames a terminal's raw stream as if it had none.
    const stream = (await exec.start({ hijack: true, stdin: streams.stdin, Tty: streams.tty })) as Duplex;
    this.#wss.handleUpgrade(request, socket, head, (ws) => this.#runExec(ws, pod, exec, stream, streams.tty));
  }

  #runExec(ws: WebSocket, pod: StoredPod, exec: Docker.Exec, stream: Duplex, tty: boolean): void {
    this.#openSockets.add(ws);
    const protocol = ws.protocol;
    this.stats.execs[protocol] = (this.stats.execs[protocol] ?? 0) + 1;
    // Flow control, as the server's streams have: the command's output is not read while the
    // client has not taken what was sent (a client that stops reading makes the command wait).
    let unsent = 0;
    const send = (channel: number, payload: Buffer) => {
      if (ws.readyState !== ws.OPEN) return;
      unsent += payload.length;
      if (unsent > EXEC_MAX_UNSENT_BYTES && !stream.isPaused()) stream.pause();
      ws.send(Buffer.concat([Buffer.from([channel]), payload]), () => {
        unsent -= payload.length;
        if (unsent <= EXEC_MAX_UNSENT_BYTES / 2 && stream.isPaused()) stream.resume();
      });
    };
    // The kubelet's readiness signal: an empty frame on the lowest writable channel.
    send(1, Buffer.alloc(0));
    const demuxer = new DockerStreamDemuxer((name, payload) => send(name === 'stdout' ? 1 : 2, payload));
    stream.on('data', (chunk: Buffer) => (tty ? send(1, chunk) : demuxer.push(chunk)));
    stream.on('error', () => {});
    ws.on('message', (data: Buffer) => {
      if (data.length === 0) return;
      const channel = data[0];
      if (channel === 0) stream.write(data.subarray(1));
      else if (channel === 4 && tty) resizeExec(exec, data.subarray(1));
      else if (channel === 255 && protocol === 'v5.channel.k8s.io' && data[1] === 0) stream.end();
    });
    ws.on('close', () => {
      this.#openSockets.delete(ws);
      stream.destroy();
    });
    ws.on('error', () => {});
    let finished = false;
    const finish = async () => {
      if (finished) return;
      finished = true;
      // The engine may show the exec running for a moment after its stream ended (seconds, under load).
      let inspected = await exec.inspect().catch(() => null);
      for (let tries = 0; inspected?.Running === true && tries < 500; tries++) {
        await new Promise((resolve) => setTimeout(resolve, 10));
        inspected = await exec.inspect().catch(() => null);
      }
      // A command the OOM killer ended: with `oomKillsContainer` its whole container goes too,
      // as the kernel kills the group at once (the engine's event comes a moment later).
      // The host's count of OOM kills in the container decides at once; the event is waited for
      // only when the count cannot be read (under load it came more than a second late).
      if (this.#oomEvents !== null && inspected?.ExitCode === 137) {
        if ((await oomKillsInContainer(this.#docker, pod.containerId!)) > 0) this.#killForOom(pod);
        for (let tries = 0; pod.oomKill === undefined && tries < 250; tries++)
          await new Promise((resolve) => setTimeout(resolve, 20));
        await pod.oomKill;
      }
      const running = await this.#docker
        .getContainer(pod.containerId!)
        .inspect()
        .then((info) => info.State.Running)
        .catch(() => false);
      // The container went away under the command: the stream breaks without a status.
      if (inspected === null || inspected.Running || inspected.ExitCode === null || !running) {
        ws.terminate();
        return;
      }
      const exitCode = inspected.ExitCode;
      const status =
        exitCode === 0
          ? { metadata: {}, status: 'Success' }
          : {
              metadata: {},
              status: 'Failure',
              message: `command terminated with non-zero exit code: exit status ${exitCode}`,
              reason: 'NonZeroExitCode',
              details: { causes: [{ reason: 'ExitCode', message: String(exitCode) }] },
            };
      send(3, Buffer.from(JSON.stringify(status)));
      ws.close(1000);
    };
    stream.on('end', () => void finish());
    stream.on('close', () => void finish());
  }
}

function isTrue(value: string | null): boolean {
  return value !== null && value !== 'false' && value !== '0';
}

function parseJson(raw: Buffer): Json {
  try {
    const parsed = JSON.parse(raw.toString('utf8')) as unknown;
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
      throw new Error('not an object');
    return parsed as Json;
  } catch (error) {
    throw new ApiError(
      400,
      'BadRequest',
      `the body of the request was in an unknown format: ${(error as Error).message}`,
    );
  }
}

function readBody(request: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => resolve(Buffer.concat(chunks)));
    request.on('error', reject);
  });
}

/**
 * The resize channel (4) of a terminal exec: one JSON `{"Width", "Height"}` per message, field
 * names matched without case as the kubelet's Go decoder does (client-node sends `width`,
 * `height`), applied to the engine's exec as the kubelet applies it to the runtime's.
 */
function resizeExec(exec: Docker.Exec, payload: Buffer): void {
  let size: Record<string, unknown>;
  try {
    size = Object.fromEntries(
      Object.entries(JSON.parse(payload.toString('utf8')) as Record<string, unknown>).map(([key, value]) => [
        key.toLowerCase(),
        value,
      ]),
    );
  } catch {
    return;
  }
  const { width, height } = size;
  if (typeof width !== 'number' || typeof height !== 'number' || width < 1 || height < 1) return;
  exec.resize({ w: width, h: height }).catch(() => {});
}
