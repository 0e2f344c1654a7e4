/**
 * The chaos test of issue 9: `gym eval run`'s runner (the oracle on swe-mini, 24 rollouts) while a
 * seeded fault injector fails provider calls, destroys sandboxes through the engine and restarts
 * the daemon; two such runs at once on one engine and one namespace. Every line written must be
 * the fault-free reward (the oracle's 1); every fault must show up as an infra error that was
 * retried; and no daemon ever destroys a sandbox of the other.
 *
 * Reproduce a run with CHAOS_SEED=<the printed seed>.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildSweMiniImages } from '../../cli/task-images.ts';
import { GymClient } from '../../client/client.ts';
import { GymError } from '../../core/errors.ts';
import { silentLogger } from '../../core/logger.ts';
import { loadEnvironment, readRows } from '../../environments/environment.ts';
import { runEval } from '../../environments/runner/eval.ts';
import { readJsonl } from '../../environments/runner/files.ts';
import { gymFields } from '../../environments/runner/rollout-line.ts';
import { createOracleHarness } from '../../harnesses/oracle/oracle.ts';
import { createDockerProvider } from '../../providers/docker/index.ts';
import type { ProviderContext, SandboxProvider } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { dockerTestEnvironment, localImages } from '../docker-available.ts';

const { docker, skipReason } = await dockerTestEnvironment();

/** mulberry32: a tiny seeded generator, so a failing run can be replayed. */
function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let value = state;
    value = Math.imul(value ^ (value >>> 15), value | 1);
    value ^= value + Math.imul(value ^ (value >>> 7), value | 61);
    return ((value ^ (value >>> 14)) >>> 0) / 4294967296;
  };
}

/** What the injector did, and what each daemon created and destroyed. */
interface ChaosLog {
  failedCalls: number;
  destroyedByEngine: number;
  restarts: number;
  created: Map<string, string>;
  /** sandbox id -> daemon ids that asked the provider to destroy it. */
  destroyedBy: Map<string, Set<string>>;
}

/** The faults the injector may cause now: on while the chaos lasts, off after (so runs can finish). */
interface FaultSwitch {
  isOn: boolean;
  random: () => number;
  failureRate: number;
}

const FAILING_OPERATIONS = [
  'create',
  'exec',
  'writeFile',
  'readFile',
  'readArchive',
  'writeArchive',
] as const;

/**
 * A provider module around the real Docker provider that fails a share of its calls with
 * PROVIDER_ERROR (before the call, so nothing ran) and records creates and destroys.
 */
function chaosProviderFactory(faults: FaultSwitch, log: ChaosLog) {
  return async (options: unknown, context: ProviderContext): Promise<SandboxProvider> => {
    const inner = await createDockerProvider(options, context);
    const wrapped: SandboxProvider = Object.create(inner) as SandboxProvider;
    for (const operation of FAILING_OPERATIONS) {
      const original = (inner[operation] as (...args: unknown[]) => Promise<unknown>).bind(inner);
      Object.defineProperty(wrapped, operation, {
        value: async (...args: unknown[]) => {
          if (faults.isOn && faults.random() < faults.failureRate) {
            log.failedCalls += 1;
            throw new GymError('PROVIDER_ERROR', `chaos: injected failure of ${operation}`);
          }
          const result = await original(...args);
          if (operation === 'create') log.created.set((result as { id: string }).id, context.daemonId);
          return result;
        },
      });
    }
    Object.defineProperty(wrapped, 'destroy', {
      value: async (id: string) => {
        const by = log.destroyedBy.get(id) ?? new Set<string>();
        log.destroyedBy.set(id, by.add(context.daemonId));
        return inner.destroy(id);
      },
    });
    for (const method of [
      'list',
      'get',
      'health',
      'close',
      'exposeGateway',
      'snapshot',
      'stopProcesses',
    ] as const) {
      const original = inner[method] as ((...args: unknown[]) => unknown) | undefined;
      if (original !== undefined) Object.defineProperty(wrapped, method, { value: original.bind(inner) });
    }
    return wrapped;
  };
}

/** One evaluation's daemon, restartable on the same state directory and port. */
class RestartableDaemon {
  #daemon: TestDaemon | null = null;
  #port = 0;
  readonly #stateDir: string;
  readonly #namespace: string;
  readonly #factory: ReturnType<typeof chaosProviderFactory>;

  constructor(stateDir: string, namespace: string, factory: ReturnType<typeof chaosProviderFactory>) {
    this.#stateDir = stateDir;
    this.#namespace = namespace;
    this.#factory = factory;
  }

  get daemon(): TestDaemon {
    return this.#daemon!;
  }

  async start(): Promise<void> {
    this.#daemon = await startTestDaemon(
      {
        stateDir: this.#stateDir,
        namespace: this.#namespace,
        listen: { host: '127.0.0.1', port: this.#port },
        providers: [{ name: 'chaos', maxConcurrentCreates: 4 }],
        // Scans as often as a busy engine allows: a daemon that took the other's sandboxes for
        // orphans would destroy them within a second.
        orphanScanIntervalMs: 500,
        reaperIntervalMs: 500,
      },
      { factories: { chaos: this.#factory }, listen: true },
    );
    this.#port = Number(new URL(this.#daemon.address.url!).port);
  }

  /** A stop that keeps every sandbox (as a crash would), then a start that adopts them. */
  async restart(downMs: number): Promise<void> {
    await this.#daemon!.stop({ destroy: false });
    await new Promise((resolve) => setTimeout(resolve, downMs));
    await this.start();
  }
}

describe.skipIf(skipReason !== undefined)('chaos: gym eval under injected faults', () => {
  const directories: string[] = [];
  beforeAll(async () => {
    await buildSweMiniImages(localImages(docker));
  }, 300_000);
  afterAll(async () => {
    for (const directory of directories) await rm(directory, { recursive: true, force: true });
  });

  it('writes only fault-free rewards while sandboxes die, calls fail and daemons restart; two runs never disturb each other', async () => {
    const seed = Number(process.env.CHAOS_SEED ?? randomBytes(4).readUInt32LE(0));
    console.log(`chaos seed ${seed} (replay with CHAOS_SEED=${seed})`);
    const random = seededRandom(seed);
    const faults: FaultSwitch = { isOn: true, random, failureRate: 0.03 };
    const log: ChaosLog = {
      failedCalls: 0,
      destroyedByEngine: 0,
      restarts: 0,
      created: new Map(),
      destroyedBy: new Map(),
    };
    const namespace = `chaos-${randomBytes(3).toString('hex')}`;
    const environment = await loadEnvironment('swe-mini');
    const rows = await readRows(environment.dataPath);
    const runs = await Promise.all(
      ['first', 'second'].map(async (name) => {
        const directory = await mkdtemp(join(tmpdir(), `gym-chaos-${name}-`));
        directories.push(directory);
        const daemon = new RestartableDaemon(
          join(directory, 'state'),
          namespace,
          chaosProviderFactory(faults, log),
        );
        await daemon.start();
        return { name, daemon, output: join(directory, 'rollouts.jsonl') };
      }),
    );

    // The injector: bounded in time, then every fault stops so the runs can finish.
    const chaosMs = 45_000;
    const chaosEnds = Date.now() + chaosMs;
    const injector = (async () => {
      while (Date.now() < chaosEnds) {
        await new Promise((resolve) => setTimeout(resolve, 700 + random() * 1300));
        if (Date.now() >= chaosEnds) break;
        const roll = random();
        if (roll < 0.2) {
          const run = runs[Math.floor(random() * runs.length)]!;
          log.restarts += 1;
          await run.daemon.restart(100 + random() * 400);
        } else {
          const containers = await docker.listContainers({
            all: true,
            filters: { label: [`gym.namespace=${namespace}`] },
          });
          const victim = containers[Math.floor(random() * containers.length)];
          if (victim === undefined) continue;
          log.destroyedByEngine += 1;
          await docker
            .getContainer(victim.Id)
            .remove({ force: true })
            .catch(() => {});
        }
      }
      faults.isOn = false;
    })();

    const started = Date.now();
    const summaries = await Promise.all(
      runs.map((run) =>
        runEval({
          // The client reaches whichever daemon is up at the run's address; a restart is a connection error.
          client: new GymClient({ url: run.daemon.daemon.address.url!, token: run.daemon.daemon.token }),
          environment,
          rows,
          harness: createOracleHarness(),
          harnessName: 'oracle',
          modelName: 'none',
          numRepeats: 2,
          concurrency: 3,
          output: run.output,
          resume: false,
          maxInfraAttempts: 8,
          logger: silentLogger,
        }),
      ),
    );
    await injector;
    const elapsedMs = Date.now() - started;

    const figures: Record<string, unknown> = { seed, elapsedMs, ...log, created: log.created.size };
    delete figures.destroyedBy;
    for (const [index, run] of runs.entries()) {
      const rollouts = await readJsonl(run.output);
      const failures = await readJsonl(run.output.replace(/\.jsonl$/, '_failures.jsonl'));
      figures[`${run.name}Infra`] = failures.length;
      expect(summaries[index]!.rollouts).toBe(rows.length * 2);
      // Every line is the fault-free reward: the oracle resolves every task.
      expect(
        rollouts.filter((row) => gymFields(row).outcome !== 'reward' || row.reward !== 1),
        `${run.name}: lines that are not the fault-free reward`,
      ).toEqual([]);
      // Every failure was an infra error that was retried (none was given up on).
      expect(
        failures.every(
          (row) => gymFields(row).outcome === 'infra_error' && row._ng_failure_terminal === false,
        ),
      ).toBe(true);
    }
    console.log(`chaos figures ${JSON.stringify(figures)}`);
    // The faults really happened (a seed that injected nothing proves nothing).
    expect(log.failedCalls + log.destroyedByEngine + log.restarts).toBeGreaterThan(5);
    // No daemon asked for a sandbox of the other daemon to be destroyed.
    const trespasses = [...log.destroyedBy].filter(([id, by]) => {
      const owner = log.created.get(id);
      return owner !== undefined && [...by].some((daemonId) => daemonId !== owner);
    });
    expect(trespasses).toEqual([]);

    for (const run of runs) await run.daemon.daemon.stop({ destroy: true });
    const left = await docker.listContainers({
      all: true,
      filters: { label: [`gym.namespace=${namespace}`] },
    });
    expect(left).toEqual([]);
  }, 480_000);
});
