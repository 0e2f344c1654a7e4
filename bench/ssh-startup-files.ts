/**
 * What a heavy shell start-up file on a compute node costs the SSH providers: the enroot provider
 * (its stand-in) on nodes that are each a real OpenSSH server whose sessions' home is its own, one
 * with no ~/.bashrc and one whose ~/.bashrc sleeps 2 s (a slow module system, conda, a stale
 * lock). sshd runs every command through the user's shell, and Debian's bash reads ~/.bashrc
 * even for a command. The provider's command runner pays that once per connection; a clean node
 * and a slow one are each measured with it and with `commandRunner: false` (one channel, one
 * shell, per command: the transport before the runner), four nodes side by side, their samples
 * interleaved so they share the machine's load. Each provider's connection is warmed by a health
 * check first (a daemon's steady state); that cold check, which pays the rc file once, is
 * printed apart. Prints one JSON line: the cold health check, then create, one-shot exec and
 * session exec p50 in ms, and the slow node's ratios to the clean one with and without the runner.
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
import { percentile, round } from './stats.ts';

const RC_SLEEP_SECONDS = 2;
const CREATES = 5;
const EXECS = 21;
const SESSION_EXECS = 21;

interface Setup {
  label: string;
  provider: EnrootProvider;
  created: string[];
  coldHealthMs: number;
  samples: { create: number[]; exec: number[]; sessionExec: number[] };
  cleanup(): Promise<void>;
}

/** A node (its ~/.bashrc `rcFile`, none when null) and a provider on it, its connection warmed. */
async function setUp(
  label: string,
  address: string,
  port: number,
  rcFile: string | null,
  commandRunner: boolean,
): Promise<Setup> {
  const node = await enrootNode(address, port);
  if (rcFile !== null) await writeFile(join(node.sshd.home, '.bashrc'), rcFile);
  const provider = new EnrootProvider({ hosts: [node.host], commandRunner }, testContext());
  const started = performance.now();
  await provider.health();
  const coldHealthMs = performance.now() - started;
  const created: string[] = [];
  return {
    label,
    provider,
    created,
    coldHealthMs,
    samples: { create: [], exec: [], sessionExec: [] },
    async cleanup() {
      for (const id of created) await provider.destroy(id).catch(() => {});
      await provider.close();
      await node.cleanup();
    },
  };
}

async function timed(body: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await body();
  return performance.now() - started;
}

/**
 * Runs `step` on every setup in turn, `rounds` times: the four setups share the machine's load
 * (other test runs on a shared 2-core machine) sample by sample, so their ratios mean something.
 */
async function interleaved(setups: Setup[], rounds: number, step: (setup: Setup) => Promise<void>) {
  for (let round = 0; round < rounds; round += 1) for (const setup of setups) await step(setup);
}

const port = (base: number) => base + (process.pid % 1000);
const rcFile = `sleep ${RC_SLEEP_SECONDS}\n`;
const setups = [
  await setUp('clean', '127.0.0.38', port(38000), null, true),
  await setUp('cleanPerCommand', '127.0.0.40', port(40000), null, false),
  await setUp('slowBashrc', '127.0.0.39', port(39000), rcFile, true),
  await setUp('slowBashrcPerCommand', '127.0.0.41', port(41000), rcFile, false),
];
try {
  const exec = (setup: Setup, session?: string) =>
    setup.provider.exec(
      setup.created[0]!,
      ExecRequestSchema.parse({ argv: ['true'], ...(session === undefined ? {} : { session }) }),
    );
  await interleaved(setups, CREATES, async (setup) => {
    setup.samples.create.push(
      await timed(async () => {
        const { id } = await setup.provider.create(SandboxSpecSchema.parse({ image: BUSYBOX_REFERENCE }));
        setup.created.push(id);
      }),
    );
  });
  // Warm-up: the session opens (once per session, paying the start-up file on the per-command path).
  for (const setup of setups) {
    await exec(setup);
    await exec(setup, 'bench');
  }
  await interleaved(setups, EXECS, async (setup) => {
    setup.samples.exec.push(await timed(() => exec(setup)));
  });
  await interleaved(setups, SESSION_EXECS, async (setup) => {
    setup.samples.sessionExec.push(await timed(() => exec(setup, 'bench')));
  });
  const figures = Object.fromEntries(
    setups.map((setup) => [
      setup.label,
      {
        coldHealthMs: round(setup.coldHealthMs),
        createMs: round(percentile(setup.samples.create, 0.5)),
        execMs: round(percentile(setup.samples.exec, 0.5)),
        sessionExecMs: round(percentile(setup.samples.sessionExec, 0.5)),
      },
    ]),
  );
  const clean = figures.clean!;
  const ratio = (label: string) => ({
    create: round(figures[label]!.createMs / clean.createMs),
    exec: round(figures[label]!.execMs / clean.execMs),
    sessionExec: round(figures[label]!.sessionExecMs / clean.sessionExecMs),
  });
  console.log(
    JSON.stringify({
      ...figures,
      ratio: ratio('slowBashrc'),
      ratioPerCommand: ratio('slowBashrcPerCommand'),
    }),
  );
} finally {
  for (const setup of setups) await setup.cleanup();
}
