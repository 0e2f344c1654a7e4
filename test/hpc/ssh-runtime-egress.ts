/**
 * The egress contract (test/security/egress-cases.ts) on an SSH runtime's row: a daemon whose
 * only provider is the runtime over real SSH (an sshd on a loopback address of the row's own, the
 * runtime's stand-in), the busybox root as the image. The proxy is reached through the SSH relay
 * in the sandbox's own network namespace. One test file per runtime, so the rows run in parallel.
 */
import { BUSYBOX_REFERENCE } from '../fixtures/busybox-root.ts';
import { defineEgressCases } from '../security/egress-cases.ts';
import { SSH_RUNTIMES, type SshRuntimeRow } from './ssh-runtimes.ts';

/** Addresses and port bases of these files' nodes, apart from every other HPC test's. */
const NODES: Record<SshRuntimeRow['runtime'], { address: string; portBase: number }> = {
  apptainer: { address: '127.0.0.41', portBase: 33000 },
  enroot: { address: '127.0.0.42', portBase: 34000 },
};

export function describeSshRuntimeEgress(runtime: SshRuntimeRow['runtime']): void {
  const row = SSH_RUNTIMES.find((entry) => entry.runtime === runtime)!;
  defineEgressCases({
    name: `${runtime} over ssh (stand-in)`,
    timeoutMs: 180_000,
    setUp: async () => {
      const { address, portBase } = NODES[runtime];
      const node = await row.node(address, portBase + (process.pid % 1000));
      return {
        image: BUSYBOX_REFERENCE,
        providers: [{ name: runtime, options: { hosts: [node.host] } }],
        tearDown: () => node.cleanup(),
      };
    },
  });
}
