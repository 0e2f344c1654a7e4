/**
 * What a heavy shell start-up file on a compute node costs the SSH providers: the enroot provider
 * (its stand-in) on nodes that are each a real OpenSSH server whose sessions' home is its own, one
 * with no ~/.bashrc and one whose ~/.bashrc sleeps 2 s (a slow module system, conda, a stale
 * lock). sshd runs every command through the user's shell, and Debian's bash reads ~/.bashrc
 * even for a command. The provider's command runner pays that once per connection; the slow node
 * is measured with it and again with `commandRunner: false` (one channel, one shell, per command:
 * the transport before the runner). Each provider's connection is warmed by a health check first
 * (the steady state of a daemon): the cold health check, which pays the rc file once, is printed apart.
 * Prints one JSON line: the cold health check, create, one-shot exec and session exec, p50 in ms, and the
 * slow node's ratios to the clean one.
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

async function measure(address: string, port: number, rcFile: string | null, commandRunner = true) {
  const node = await enrootNode(address, port);
  if (rcFile !== null) await writeFile(join(node.sshd.home, '.bashrc'), rcFile);
  const provider = new EnrootProvider({ hosts: [node.host], commandRunner }, testContext());
  const created: string[] = [];
  try {
    const started = performance.now();
    await provider.health();
    const coldHealthMs = performance.now() - started;
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
      coldHealthMs: round(coldHealthMs),
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
const rcFile = `sleep ${RC_SLEEP_SECONDS}\n`;
const slow = await measure('127.0.0.39', 39000 + (process.pid % 1000), rcFile);
const perCommand = await measure('127.0.0.39', 39000 + (process.pid % 1000), rcFile, false);
const ratio = (of: typeof clean) => ({
  create: round(of.createMs / clean.createMs),
  exec: round(of.execMs / clean.execMs),
  sessionExec: round(of.sessionExecMs / clean.sessionExecMs),
});
console.log(
  JSON.stringify({
    clean,
    slowBashrc: slow,
    slowBashrcPerCommand: perCommand,
    ratio: ratio(slow),
    ratioPerCommand: ratio(perCommand),
  }),
);
