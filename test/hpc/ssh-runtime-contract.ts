/**
 * The provider contract against an SSH runtime (a row of test/hpc/ssh-runtimes.ts) over
 * real SSH: a real OpenSSH server on the row's own loopback address stands for a compute node,
 * and the runtime's stand-in (test/stand-ins/) for the runtime, which cannot be installed here.
 * Sessions and gateway reach (the relay in the sandbox's own network namespace) run on each.
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
import type { SandboxProvider } from '../../providers/sandbox-provider.ts';
import { BUSYBOX_REFERENCE } from '../fixtures/busybox-root.ts';
import { testContext } from '../fixtures/provider-context.ts';
import { relayBinaryForTests } from '../relay-binary.ts';
import { SSH_RUNTIMES, type SshRuntimeRow } from './ssh-runtimes.ts';

/**
 * Registers the suite for one runtime's row. Each row has a test file of its own
 * (`<runtime>-contract.int.test.ts`), so the rows run in parallel as separate files did.
 */
export async function describeSshRuntimeContract(runtime: SshRuntimeRow['runtime']): Promise<void> {
  const rows = await Promise.all(
    SSH_RUNTIMES.filter((row) => row.runtime === runtime).map(async (row) => ({
      row,
      node: await row.node(row.address, row.portBase + (process.pid % 1000)),
      stateDirectory: await mkdtemp(join(tmpdir(), `gym-${row.runtime}-contract-`)),
    })),
  );
  afterAll(async () => {
    for (const { node, stateDirectory } of rows) {
      await node.cleanup();
      await rm(stateDirectory, { recursive: true, force: true });
    }
  });

  for (const { row, node, stateDirectory } of rows) {
    const context = (namespace?: string) =>
      testContext({
        logger: silentLogger,
        stateDirectory,
        ...(namespace === undefined ? {} : { namespace }),
      });

    describeSandboxProviderContract({
      name: `${row.runtime} over ssh (stand-in)`,
      image: BUSYBOX_REFERENCE,
      capabilities: {
        sessions: true,
        snapshot: false,
        gatewayReach: true,
        timeoutKill: 'tagged',
        ...row.capabilities,
        imageFormats: ['rootfs', 'derived'],
      },
      testTimeoutMs: 120_000,
      // A relay as new as its source (the port cases need its connect mode).
      createProvider: () =>
        row.provider(
          { hosts: [node.host], keepaliveIntervalMs: 1000, relayHelperPath: relayBinaryForTests() },
          context(),
        ),
    });

    /** Reach is per sandbox: only one given it reaches the gateway, and a provider without the relay says so. */
    describe(`${row.runtime} gateway reach, only where given`, () => {
      const providers: SandboxProvider[] = [];
      const made: Array<{ provider: SandboxProvider; id: string }> = [];
      let directory = '';
      let gateway: Server | undefined;
      afterAll(async () => {
        await Promise.all(made.map(({ provider, id }) => provider.destroy(id).catch(() => {})));
        for (const provider of providers) await provider.close?.();
        gateway?.close();
        if (directory !== '') await rm(directory, { recursive: true, force: true });
      });

      it('a sandbox not given reach cannot use another sandbox reach; without the relay nothing is bound', async () => {
        directory = await mkdtemp(join(tmpdir(), `gym-${row.runtime}-reach-`));
        const socketPath = join(directory, 'gateway.sock');
        gateway = createServer((_request, response) => response.end('gateway answered'));
        await new Promise<void>((resolve) => gateway!.listen(socketPath, resolve));
        const provider = row.provider({ hosts: [node.host] }, context('reach'));
        const off = row.provider({ hosts: [node.host], gatewayReach: false }, context('reach'));
        providers.push(provider, off);
        const spec = SandboxSpecSchema.parse({ image: BUSYBOX_REFERENCE });
        const create = async (from: SandboxProvider) => {
          const info = await from.create(spec);
          made.push({ provider: from, id: info.id });
          return info.id;
        };
        const [given, other, without] = await Promise.all([create(provider), create(provider), create(off)]);
        const get = (from: SandboxProvider, id: string, url: string) =>
          from.exec(id, ExecRequestSchema.parse({ argv: ['wget', '-q', '-O', '-', url] }));
        const { url } = await provider.exposeGateway!(given, { socketPath });
        const answered = await get(provider, given, url);
        expect(answered.stdout, JSON.stringify(answered)).toBe('gateway answered');
        const refused = await get(provider, other, url);
        expect(refused.exitCode).not.toBe(0);
        expect(refused.stdout).toBe('');

        expect(off.capabilities.gatewayReach).toBe(false);
        await expectGymError(off.exposeGateway!(without, { socketPath }), 'CAPABILITY_UNSUPPORTED');
        const bound = await off.exec(without, ExecRequestSchema.parse({ argv: ['ls', '/.gym-tools'] }));
        expect(bound.stdout.split('\n')).not.toContain('gym-relay');
      }, 120_000);
    });

    if (row.sessionsPastOneConnection) describeSessionsPastOneConnection(row, node.host, context);
  }
}

/** Sessions hold their channels: past one connection's channels the pool opens more, and keeps room for kills. */
function describeSessionsPastOneConnection(
  row: SshRuntimeRow,
  host: unknown,
  context: (namespace?: string) => ReturnType<typeof testContext>,
): void {
  describe(`${row.runtime} sessions past one connection`, () => {
    let provider: ReturnType<SshRuntimeRow['provider']> | undefined;
    let id = '';
    afterAll(async () => {
      if (id !== '') await provider?.destroy(id).catch(() => {});
      await provider?.close();
    });

    it('runs 9 sessions at once over 3 connections of 4 channels, and still times out a command in one', async () => {
      provider = row.provider(
        { hosts: [host], maxChannels: 4, maxConnections: 3, gatewayReach: false },
        context('many'),
      );
      id = (await provider.create(SandboxSpecSchema.parse({ image: BUSYBOX_REFERENCE }))).id;
      const exec = (request: Record<string, unknown>) => provider!.exec(id, ExecRequestSchema.parse(request));
      const names = Array.from({ length: 9 }, (_, index) => `s${index}`);
      const first = await Promise.all(names.map((session) => exec({ command: `echo ${session}`, session })));
      expect(first.map((result) => result.stdout)).toEqual(names.map((session) => `${session}\n`));
      expect(provider.fleet.hosts[0]?.connection.connectionCount).toBe(3);
      // Each connection keeps one channel for short commands: a tenth session has no place.
      await expectGymError(exec({ argv: ['true'], session: 'tenth' }), 'CAPACITY_EXCEEDED');
      // While all nine are held, a one-shot command runs and a session command's timeout kill does too.
      expect((await exec({ argv: ['echo', 'one-shot'] })).stdout).toBe('one-shot\n');
      const timedOut = await exec({ command: 'sleep 1005', session: 's0', timeoutMs: 1000 });
      expect(timedOut.status).toBe('timeout');
      expect((await exec({ command: 'echo after', session: 's0' })).stdout).toBe('after\n');
    });
  });
}
