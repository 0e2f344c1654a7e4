/**
 * The emulator against the unmodified `@kubernetes/client-node`, over real HTTP and WebSocket:
 * what the Kubernetes provider's tests rely on, and what a real API server would refuse.
 */
import { PassThrough, Readable } from 'node:stream';
import {
  ApiException,
  CoreV1Api,
  Exec,
  KubeConfig,
  NetworkingV1Api,
  type V1Pod,
  type V1PodSpec,
  type V1Status,
  Watch,
} from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';
import {
  EMULATOR_LABEL,
  KubernetesEmulator,
  parseLabelSelector,
  quantityValue,
  selectorMatches,
} from './emulator.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';
const NS = 'emu-test';

function pod(name: string, overrides: Partial<V1PodSpec> = {}): V1Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels: { app: 'emu-test', which: name } },
    spec: {
      restartPolicy: 'Never',
      containers: [
        {
          name: 'main',
          image: busybox,
          command: ['sleep', '3600'],
          resources: { limits: { memory: '64Mi' } },
        },
      ],
      ...overrides,
    },
  } as V1Pod;
}

/** The Status body of a refused call (client-node hands unknown codes' bodies back as text). */
async function refusal(promise: Promise<unknown>): Promise<{ code: number; status: V1Status }> {
  const error = await promise.then(
    () => null,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(ApiException);
  const { code, body } = error as ApiException<unknown>;
  return { code, status: (typeof body === 'string' ? JSON.parse(body) : body) as V1Status };
}

async function waitRunning(core: CoreV1Api, name: string): Promise<V1Pod> {
  for (let attempt = 0; attempt < 100; attempt++) {
    const read = await core.readNamespacedPod({ name, namespace: NS });
    if (read.status?.phase === 'Running') return read;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`pod ${name} never ran`);
}

interface ExecOutcome {
  stdout: string;
  stderr: string;
  status: V1Status;
}

function runExec(
  kc: KubeConfig,
  name: string,
  command: string[],
  stdin: Buffer | null = null,
): Promise<ExecOutcome> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  stdout.on('data', (chunk: Buffer) => out.push(chunk));
  stderr.on('data', (chunk: Buffer) => err.push(chunk));
  return new Promise((resolve, reject) => {
    new Exec(kc)
      .exec(
        NS,
        name,
        'main',
        command,
        stdout,
        stderr,
        stdin === null ? null : Readable.from([stdin]),
        false,
        (status) =>
          resolve({ stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString(), status }),
      )
      .then(
        (ws) => ws.on('close', () => setTimeout(() => reject(new Error('closed without a status')), 100)),
        reject,
      );
  });
}

describe.skipIf(skipReason !== undefined)('kubernetes API emulator', () => {
  let emulator: KubernetesEmulator;
  let kc: KubeConfig;
  let core: CoreV1Api;

  beforeAll(async () => {
    emulator = await KubernetesEmulator.start(docker);
    kc = new KubeConfig();
    kc.loadFromString(emulator.kubeconfig(NS));
    core = kc.makeApiClient(CoreV1Api);
    await core.createNamespacedPod({ namespace: NS, body: pod('alpha') });
    await core.createNamespacedPod({ namespace: NS, body: pod('beta') });
    await Promise.all([waitRunning(core, 'alpha'), waitRunning(core, 'beta')]);
  }, 60_000);

  afterAll(async () => {
    await emulator?.close();
    const left = await docker.listContainers({
      all: true,
      filters: { label: [`${EMULATOR_LABEL}=${emulator?.id}`] },
    });
    expect(left).toEqual([]);
  });

  it('creates, reads and lists Pods by label selector, with resource versions', async () => {
    const alpha = await core.readNamespacedPod({ name: 'alpha', namespace: NS });
    expect(alpha.status?.conditions?.find((condition) => condition.type === 'Ready')?.status).toBe('True');
    expect(alpha.metadata?.uid).toMatch(/\S/);
    expect(Number(alpha.metadata?.resourceVersion)).toBeGreaterThan(0);
    const both = await core.listNamespacedPod({ namespace: NS, labelSelector: 'app=emu-test' });
    expect(both.items.map((item) => item.metadata?.name).sort()).toEqual(['alpha', 'beta']);
    const one = await core.listNamespacedPod({
      namespace: NS,
      labelSelector: 'app=emu-test,which notin (alpha)',
    });
    expect(one.items.map((item) => item.metadata?.name)).toEqual(['beta']);
    expect((await core.listNamespacedPod({ namespace: 'elsewhere' })).items).toEqual([]);
    // The engine applied the memory limit from the Pod's resources.
    const inspected = await docker.getContainer(emulator.containerOf(NS, 'alpha')!).inspect();
    expect(inspected.HostConfig.Memory).toBe(64 * 1024 * 1024);
  });

  it('refuses what a real server refuses: duplicates, missing objects, invalid and unknown fields, no token', async () => {
    expect(
      (await refusal(core.createNamespacedPod({ namespace: NS, body: pod('alpha') }))).status,
    ).toMatchObject({
      kind: 'Status',
      reason: 'AlreadyExists',
      code: 409,
    });
    expect((await refusal(core.readNamespacedPod({ name: 'nope', namespace: NS }))).code).toBe(404);
    const invalid = await refusal(
      core.createNamespacedPod({
        namespace: NS,
        body: {
          ...pod('Bad_Name'),
          metadata: { name: 'Bad_Name', labels: { 'bad key!': 'x', ok: 'ends-with-dash-' } },
          spec: {
            restartPolicy: 'Sometimes',
            containers: [{ name: 'main', image: busybox, resources: { limits: { memory: '12 parsecs' } } }],
          },
        } as V1Pod,
      }),
    );
    expect(invalid.code).toBe(422);
    expect(invalid.status.reason).toBe('Invalid');
    const fields = invalid.status.details?.causes?.map((cause) => cause.field);
    expect(fields).toEqual(
      expect.arrayContaining([
        'metadata.name',
        'metadata.labels',
        'metadata.labels[ok]',
        'spec.restartPolicy',
        'spec.containers[0].resources.limits.memory',
      ]),
    );
    // client-node drops fields its models do not know, so an unknown one is sent raw.
    const raw = await fetch(`${emulator.url}/api/v1/namespaces/${NS}/pods`, {
      method: 'POST',
      headers: { authorization: `Bearer ${emulator.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ...pod('gamma'), spec: { ...pod('gamma').spec, hostPIDs: true } }),
    });
    expect(raw.status).toBe(400);
    expect(raw.headers.get('content-type')).toBe('application/json');
    expect(((await raw.json()) as V1Status).message).toContain('unknown field "spec.hostPIDs"');
    const anonymous = await fetch(`${emulator.url}/api/v1/namespaces/${NS}/pods`);
    expect(anonymous.status).toBe(401);
  });

  it('runs exec over v5 with stdin closed by the CLOSE signal, keeping the exit code', async () => {
    const echoed = await runExec(
      kc,
      'alpha',
      ['sh', '-c', 'cat; echo err >&2; exit 7'],
      Buffer.from('in\0put'),
    );
    expect(echoed.stdout).toBe('in\0put');
    expect(echoed.stderr).toBe('err\n');
    expect(echoed.status).toMatchObject({
      status: 'Failure',
      reason: 'NonZeroExitCode',
      details: { causes: [{ reason: 'ExitCode', message: '7' }] },
    });
    expect((await runExec(kc, 'alpha', ['true'])).status).toMatchObject({ status: 'Success' });
    expect(emulator.stats.execs['v5.channel.k8s.io']).toBeGreaterThanOrEqual(2);
  });

  it('speaks v4 to a client that offers only v4, and refuses exec into a missing Pod', async () => {
    const query =
      'command=sh&command=-c&command=echo%20four%3B%20exit%203&stdout=true&stderr=true&container=main';
    const ws = new WebSocket(
      `${emulator.url.replace('http', 'ws')}/api/v1/namespaces/${NS}/pods/beta/exec?${query}`,
      ['v4.channel.k8s.io'],
      { headers: { authorization: `Bearer ${emulator.token}` } },
    );
    const frames: Buffer[] = [];
    ws.on('message', (data: Buffer) => frames.push(data));
    await new Promise((resolve) => ws.on('close', resolve));
    expect(ws.protocol).toBe('v4.channel.k8s.io');
    const stdout = Buffer.concat(frames.filter((frame) => frame[0] === 1).map((frame) => frame.subarray(1)));
    expect(stdout.toString()).toBe('four\n');
    const status = JSON.parse(
      frames
        .find((frame) => frame[0] === 3)!
        .subarray(1)
        .toString(),
    );
    expect(status.details.causes[0]).toEqual({ reason: 'ExitCode', message: '3' });
    const missing = await new Exec(kc)
      .exec(NS, 'nope', 'main', ['true'], new PassThrough(), null, null, false)
      .then(
        () => 'opened',
        (error: { message?: string }) => String(error.message),
      );
    expect(missing).toMatch(/404/);
  });

  it('watches Pods, deletes them (404 after), and reports a missing image as ErrImagePull', async () => {
    const events: string[] = [];
    const controller = await new Watch(kc).watch(
      `/api/v1/namespaces/${NS}/pods`,
      { labelSelector: 'which=gamma' },
      (type: string, object: V1Pod) => events.push(`${type}:${object.status?.phase ?? ''}`),
      () => {},
    );
    await core.createNamespacedPod({ namespace: NS, body: pod('gamma') });
    await waitRunning(core, 'gamma');
    await core.deleteNamespacedPod({ name: 'gamma', namespace: NS, gracePeriodSeconds: 0 });
    await expect.poll(() => events.at(-1), { timeout: 5000 }).toMatch(/^DELETED/);
    controller.abort();
    expect(events[0]).toBe('ADDED:Pending');
    expect(events).toContain('MODIFIED:Running');
    expect((await refusal(core.readNamespacedPod({ name: 'gamma', namespace: NS }))).code).toBe(404);
    expect((await refusal(core.deleteNamespacedPod({ name: 'gamma', namespace: NS }))).code).toBe(404);

    await core.createNamespacedPod({
      namespace: NS,
      body: pod('ghost', { containers: [{ name: 'main', image: 'gym/does-not-exist:nope' }] }),
    });
    await expect
      .poll(
        async () =>
          (await core.readNamespacedPod({ name: 'ghost', namespace: NS })).status?.containerStatuses?.[0]
            ?.state?.waiting?.reason,
      )
      .toBe('ErrImagePull');
    await core.deleteNamespacedPod({ name: 'ghost', namespace: NS, gracePeriodSeconds: 0 });
  });

  it("runs native sidecars in order behind their startup probes, on the Pod's loopback, and removes them with it", async () => {
    // The second sidecar fails unless the first answers already: it started after the first's probe passed.
    const sidecar = (name: string, script: string, probe?: string[]) => ({
      name,
      image: busybox,
      restartPolicy: 'Always',
      command: ['sh', '-c', script],
      ...(probe === undefined
        ? {}
        : { startupProbe: { exec: { command: probe }, periodSeconds: 1, failureThreshold: 30 } }),
    });
    await core.createNamespacedPod({
      namespace: NS,
      body: pod('delta', {
        hostAliases: [{ ip: '127.0.0.1', hostnames: ['web', 'reader'] }],
        initContainers: [
          sidecar('web', 'mkdir -p /tmp/w && echo hi > /tmp/w/x && exec httpd -f -p 8080 -h /tmp/w', [
            'wget',
            '-q',
            '-O',
            '/dev/null',
            'http://127.0.0.1:8080/x',
          ]),
          sidecar('reader', 'wget -q -O - http://web:8080/x && exec sleep 3600'),
        ],
      }),
    });
    const running = await waitRunning(core, 'delta');
    expect(running.status?.initContainerStatuses?.map((status) => [status.name, status.started])).toEqual([
      ['web', true],
      ['reader', true],
    ]);
    expect((await runExec(kc, 'delta', ['wget', '-q', '-O', '-', 'http://web:8080/x'])).stdout.trim()).toBe(
      'hi',
    );
    const containers = async () =>
      (await docker.listContainers({ all: true, filters: { label: [`gym-k8s-emulator.pod=${NS}/delta`] } }))
        .length;
    expect(await containers()).toBe(3);
    await core.deleteNamespacedPod({ name: 'delta', namespace: NS, gracePeriodSeconds: 0 });
    expect(await containers()).toBe(0);
    // Only sidecars: an init container that runs to completion is not emulated, so it is refused.
    const plain = pod('epsilon', { initContainers: [{ name: 'setup', image: busybox, command: ['true'] }] });
    expect((await refusal(core.createNamespacedPod({ namespace: NS, body: plain }))).code).toBe(422);
  });

  it('records NetworkPolicies and Services after validating them', async () => {
    const networking = kc.makeApiClient(NetworkingV1Api);
    await networking.createNamespacedNetworkPolicy({
      namespace: NS,
      body: { metadata: { name: 'deny-all' }, spec: { podSelector: {}, policyTypes: ['Ingress', 'Egress'] } },
    });
    expect(emulator.recorded('networkpolicies', NS).map((policy) => policy.metadata.name)).toEqual([
      'deny-all',
    ]);
    const read = await networking.readNamespacedNetworkPolicy({ name: 'deny-all', namespace: NS });
    expect(read.spec?.policyTypes).toEqual(['Ingress', 'Egress']);
    const bad = await refusal(
      networking.createNamespacedNetworkPolicy({
        namespace: NS,
        body: {
          metadata: { name: 'bad' },
          spec: { podSelector: {}, policyTypes: ['Sideways' as 'Ingress'] },
        },
      }),
    );
    expect(bad.code).toBe(422);
    await core.createNamespacedService({
      namespace: NS,
      body: { metadata: { name: 'gateway' }, spec: { ports: [{ port: 80 }], selector: { app: 'gym' } } },
    });
    expect(emulator.recorded('services', NS)).toHaveLength(1);
    expect(
      (
        await refusal(
          core.createNamespacedService({ namespace: NS, body: { metadata: { name: 'a.b' }, spec: {} } }),
        )
      ).code,
    ).toBe(422);
  });
});

describe('label selectors and quantities (pure)', () => {
  it('parses equality and set-based requirements as the server does', () => {
    const labels = { a: '1', b: '2' };
    expect(selectorMatches(parseLabelSelector('a=1,b==2'), labels)).toBe(true);
    expect(selectorMatches(parseLabelSelector('a!=1'), labels)).toBe(false);
    expect(selectorMatches(parseLabelSelector('b in (2, 3),!c'), labels)).toBe(true);
    expect(selectorMatches(parseLabelSelector('c'), labels)).toBe(false);
    expect(() => parseLabelSelector('a b c')).toThrow(/unable to parse/);
  });

  it('reads quantities in binary and decimal units', () => {
    expect(quantityValue('128Mi')).toBe(128 * 2 ** 20);
    expect(quantityValue('500m')).toBe(0.5);
    expect(quantityValue('1G')).toBe(1e9);
    expect(quantityValue('2 bananas')).toBeNaN();
  });
});
