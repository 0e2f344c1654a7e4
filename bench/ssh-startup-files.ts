/**
 * What a heavy shell start-up file on a compute node costs the SSH providers: the enroot provider
 * (its stand-in) on two nodes, each a real OpenSSH server whose sessions' home is its own, one
 * with no ~/.bashrc and one whose ~/.bashrc sleeps 2 s (a slow module system, conda, a stale
 * lock). sshd runs every command through the user's shell, and Debian's bash reads ~/.bashrc
 * even for a command, so each SSH channel the provider opens pays it. Prints one JSON line:
 * create, one-shot exec and session exec, p50 in ms on each node, and the slow node's ratio.
 *
 *   npm run bench:ssh-startup
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ExecRequestSchema } from '../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../core/schemas/sandbox.ts';
import { EnrootProvider } from '../providers/enroot/enroot-provider.ts';
import { BUSYBOX_REFERENCE } from '../test/fixtures/busybox-root.ts';
import { testContext } from '../test/fixtures/provider-context.ts';
import { enrootNode } from '../test/hpc/enroot-node.ts';
import { percentile, round, timeSequential } from './stats.ts';

const RC_SLEEP_SECONDS = 2;

async function measure(address: string, port: number, rcFile: string | null) {
  const node = await enrootNode(address, port);
  if (rcFile !== null) await writeFile(join(node.sshd.home, '.bashrc'), rcFile);
  const provider = new EnrootProvider({ hosts: [node.host] }, testContext());
  const created: string[] = [];
  try {
    const create = await timeSequential(3, 0, async () => {
      created.push((await provider.create(SandboxSpecSchema.parse({ image: BUSYBOX_REFERENCE }))).id);
    });
    const oneShot = await timeSequential(5, 1, () =>
      provider.exec(created[0]!, ExecRequestSchema.parse({ argv: ['true'] })),
    );
    const session = await timeSequential(20, 2, () =>
      provider.exec(created[0]!, ExecRequestSchema.parse({ argv: ['true'], session: 'bench' })),
    );
    return {
      createMs: round(percentile(create, 0.5)),
      execMs: round(percentile(oneShot, 0.5)),
      sessionExecMs: round(percentile(session, 0.5)),
    };
  } finally {
    for (const id of created) await provider.destroy(id).catch(() => {});
    await provider.close();
    await node.cleanup();
  }
}

const clean = await measure('127.0.0.38', 38000 + (process.pid % 1000), null);
const slow = await measure('127.0.0.39', 39000 + (process.pid % 1000), `sleep ${RC_SLEEP_SECONDS}\n`);
console.log(
  JSON.stringify({
    clean,
    slowBashrc: slow,
    ratio: {
      create: round(slow.createMs / clean.createMs),
      exec: round(slow.execMs / clean.execMs),
      sessionExec: round(slow.sessionExecMs / clean.sessionExecMs),
    },
  }),
);
