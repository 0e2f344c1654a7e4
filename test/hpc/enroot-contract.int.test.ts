/**
 * The provider contract against the enroot provider over real SSH: a real OpenSSH server on its
 * own loopback address stands for a compute node, and the enroot stand-in
 * (test/stand-ins/enroot.ts) for Enroot, which cannot be installed here. Enroot has no cgroups
 * and maps one user into a container: the memory-limit and other-user cases are not registered.
 * Sessions and gateway reach (the relay in the keeper's network namespace) run as on apptainer.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../core/logger.ts';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { describeSandboxProviderContract, expectGymError } from '../../providers/contract/index.ts';
import { EnrootProvider } from '../../providers/enroot/enroot-provider.ts';
import { BUSYBOX_REFERENCE } from '../fixtures/busybox-root.ts';
import { testContext } from '../fixtures/provider-context.ts';
import { enrootNode } from './enroot-node.ts';

const node = await enrootNode('127.0.0.12', 29000 + (process.pid % 1000));
const stateDirectory = await mkdtemp(join(tmpdir(), 'gym-enroot-contract-'));
afterAll(async () => {
  await node.cleanup();
  await rm(stateDirectory, { recursive: true, force: true });
});

describeSandboxProviderContract({
  name: 'enroot over ssh (stand-in)',
  image: BUSYBOX_REFERENCE,
  capabilities: {
    sessions: true,
    snapshot: false,
    gatewayReach: true,
    timeoutKill: 'tagged',
    pidsLimit: false,
    memoryLimit: false,
    otherUsers: false,
    imageFormats: ['rootfs', 'derived'],
  },
  testTimeoutMs: 120_000,
  createProvider: () =>
    new EnrootProvider(
      { hosts: [node.host], keepaliveIntervalMs: 1000 },
      testContext({ logger: silentLogger, stateDirectory }),
    ),
});

/** Reach is per sandbox: another sandbox on the same node cannot use one's relay port, and a provider without the relay binds none. */
describe('enroot gateway reach, only where given', () => {
  const providers: EnrootProvider[] = [];
  const made: Array<{ provider: EnrootProvider; id: string }> = [];
  let directory = '';
  let gateway: Server | undefined;
  afterAll(async () => {
    await Promise.all(made.map(({ provider, id }) => provider.destroy(id).catch(() => {})));
    for (const provider of providers) await provider.close();
    gateway?.close();
    if (directory !== '') await rm(directory, { recursive: true, force: true });
  });

  it('a sandbox not given reach cannot use another sandbox reach; without the relay nothing is bound', async () => {
    directory = await mkdtemp(join(tmpdir(), 'gym-enroot-reach-'));
    const socketPath = join(directory, 'gateway.sock');
    gateway = createServer((_request, response) => response.end('gateway answered'));
    await new Promise<void>((resolve) => gateway!.listen(socketPath, resolve));
    const context = () => testContext({ logger: silentLogger, stateDirectory, namespace: 'reach' });
    const provider = new EnrootProvider({ hosts: [node.host] }, context());
    const off = new EnrootProvider({ hosts: [node.host], gatewayReach: false }, context());
    providers.push(provider, off);
    const spec = SandboxSpecSchema.parse({ image: BUSYBOX_REFERENCE });
    const create = async (from: EnrootProvider) => {
      const info = await from.create(spec);
      made.push({ provider: from, id: info.id });
      return info.id;
    };
    const [given, other, without] = await Promise.all([create(provider), create(provider), create(off)]);
    const get = (from: EnrootProvider, id: string, url: string) =>
      from.exec(id, ExecRequestSchema.parse({ argv: ['wget', '-q', '-O', '-', url] }));
    const { url } = await provider.exposeGateway(given, { socketPath });
    const answered = await get(provider, given, url);
    expect(answered.stdout, JSON.stringify(answered)).toBe('gateway answered');
    const refused = await get(provider, other, url);
    expect(refused.exitCode).not.toBe(0);
    expect(refused.stdout).toBe('');

    expect(off.capabilities.gatewayReach).toBe(false);
    await expectGymError(off.exposeGateway(without, { socketPath }), 'CAPABILITY_UNSUPPORTED');
    const bound = await off.exec(without, ExecRequestSchema.parse({ argv: ['ls', '/.gym-tools'] }));
    expect(bound.stdout.split('\n')).not.toContain('gym-relay');
  }, 120_000);
});
