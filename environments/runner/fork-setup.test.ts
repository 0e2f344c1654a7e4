/**
 * `--fork-setup` against a fake daemon whose sandboxes hold files: a setup command writes the
 * file the verifier needs, a fork copies the parent's files into each child, a child's own writes
 * stay its own. The rewards must be those of a run without it; the setup must run once per task;
 * resume, retries after a lost child, a failed setup and a failed fork must end as they would
 * without it (or as infra errors, retried), and nothing is left behind.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { GymClient } from '../../client/client.ts';
import { GymError } from '../../core/errors.ts';
import { silentLogger } from '../../core/logger.ts';
import type { ExecRequestInput, ExecResult } from '../../core/schemas/exec.ts';
import type { Harness } from '../../harnesses/harness.ts';
import { execResult } from '../../test/fixtures/exec-result.ts';
import type { LoadedEnvironment } from '../environment.ts';
import type { EnvironmentKind } from '../kinds/kind.ts';
import { type EvalOptions, runEval } from './eval.ts';
import { readJsonl } from './files.ts';
import { gymFields } from './rollout-line.ts';

/** The fake's commands: `put PATH VALUE`, `copy FROM TO` (exit 1 when FROM is missing), `cat PATH`, `true`. */
function run(files: Map<string, string>, command: string): ExecResult {
  const [verb, first = '', second = ''] = command.split(' ');
  if (verb === 'put') files.set(first, second);
  else if (verb === 'copy') {
    const value = files.get(first);
    if (value === undefined) return execResult('ok', 1);
    files.set(second, value);
  } else if (verb === 'cat') {
    const value = files.get(first);
    return value === undefined ? execResult('ok', 1) : execResult('ok', 0, { stdout: value });
  } else if (verb === 'fail') return execResult('ok', 1, { stderr: 'setup broke' });
  return execResult('ok', 0);
}

interface FakeOptions {
  /** Fork calls that throw before succeeding. */
  failForks?: number;
  /** The first exec of this command in a forked child loses that child (the next command finds none). */
  loseChildOn?: string;
}

/** The daemon as the runner sees it: sandboxes with files, snapshots, forks; and a log of calls. */
function fakeDaemon(fake: FakeOptions = {}) {
  const sandboxes = new Map<string, { files: Map<string, string>; labels: Record<string, string> }>();
  const snapshots = new Map<string, Map<string, string>>();
  const calls: string[] = [];
  const forkRequests: unknown[] = [];
  let made = 0;
  let forksToFail = fake.failForks ?? 0;
  let isChildLost = false;
  const sandboxInfo = (id: string, lineage: unknown = null) => ({
    id,
    provider: 'fake',
    labels: sandboxes.get(id)!.labels,
    lineage,
  });
  const make = (files: Map<string, string>, labels: Record<string, string>) => {
    made += 1;
    const id = `sbx-${made}`;
    sandboxes.set(id, { files: new Map(files), labels });
    return id;
  };
  const client = {
    url: 'http://127.0.0.1:9',
    listSnapshots: async () => [...snapshots.keys()],
    createSandbox: async (spec: { image?: string; pool?: string; labels?: Record<string, string> }) => {
      calls.push(`create ${spec.image ?? `pool:${spec.pool}`} ${spec.labels?.role}`);
      const image = spec.image ?? '';
      if (image.startsWith('snapshot:')) {
        const files = snapshots.get(image.slice('snapshot:'.length));
        if (files === undefined) throw new GymError('SNAPSHOT_NOT_FOUND', `no snapshot ${image}`);
        return sandboxInfo(make(files, spec.labels ?? {}));
      }
      return sandboxInfo(make(new Map(), spec.labels ?? {}));
    },
    fork: async (id: string, request: { count: number; labels?: Record<string, string> }) => {
      calls.push(`fork ${id} ${request.count}`);
      forkRequests.push(request);
      if (forksToFail > 0) {
        forksToFail -= 1;
        throw new GymError('PROVIDER_ERROR', 'the engine refused the commit');
      }
      const snapshot = `snp_${String(snapshots.size).padStart(16, '0')}`;
      snapshots.set(snapshot, new Map(sandboxes.get(id)!.files));
      const children = Array.from({ length: request.count }, (_, forkIndex) => {
        const child = make(snapshots.get(snapshot)!, { ...sandboxes.get(id)!.labels, ...request.labels });
        return sandboxInfo(child, { parent: id, snapshot, forkIndex });
      });
      return {
        snapshot: { id: snapshot, image: `snapshot:${snapshot}`, method: 'archive' },
        sandboxes: children,
      };
    },
    deleteSnapshot: async (id: string) => {
      calls.push(`delete-snapshot ${id}`);
      snapshots.delete(id);
    },
    destroySandbox: async (id: string) => {
      sandboxes.delete(id);
    },
    exec: async (id: string, request: ExecRequestInput): Promise<ExecResult> => {
      const command = request.command ?? request.argv?.join(' ') ?? '';
      const sandbox = sandboxes.get(id);
      if (sandbox === undefined) throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
      calls.push(`exec ${sandbox.labels.role} ${command}`);
      if (fake.loseChildOn === command && !isChildLost && sandbox.labels.role === 'agent') {
        isChildLost = true;
        sandboxes.delete(id);
        return execResult('sandbox_gone', null);
      }
      return run(sandbox.files, command);
    },
    definePool: async (name: string) => {
      calls.push(`define-pool ${name}`);
      return {};
    },
    removePool: async () => {},
  };
  return { client: client as unknown as GymClient, sandboxes, snapshots, calls, forkRequests };
}

/** A kind whose verifier reads /app/answer and wants the row's `expected` in it. */
const fileKind: EnvironmentKind = {
  name: 'files',
  rowSchema: z.looseObject({ id: z.string() }),
  image: () => 'gym/fake:1',
  task: (row) => ({ id: String(row.id), instruction: String(row.solution), workdir: '/app' }),
  verify: async ({ sandbox, row }) => {
    const read = await sandbox.exec({ command: 'cat /app/answer' });
    const reward = read.exitCode === 0 && read.stdout === row.expected ? 1 : 0;
    return { outcome: 'reward', reward, details: { answer: read.stdout } };
  },
};

/** Runs the task's instruction as its one command: the oracle's solution, or a do-nothing. */
const commandHarness: Harness = {
  name: 'command',
  needsModel: false,
  run: async ({ sandbox, task }) => {
    const done = await sandbox.exec({ command: task.instruction });
    if (done.status === 'sandbox_gone')
      return {
        outcome: 'sandbox_gone',
        submission: null,
        trajectory: [],
        steps: 1,
        costUsd: 0,
        timings: { startedAt: '', durationMs: 0 },
      };
    return {
      outcome: 'submitted',
      submission: null,
      trajectory: [],
      steps: 1,
      costUsd: 0,
      timings: { startedAt: '', durationMs: 0 },
    };
  },
};

const environment: LoadedEnvironment = {
  name: 'files',
  description: 'the setup writes what the verifier needs',
  kind: 'files',
  defaultHarness: 'command',
  data: 'data.jsonl',
  sandbox: { env: { TASK_LANG: 'C' } },
  limits: {},
  directory: tmpdir(),
  dataPath: join(tmpdir(), 'unused.jsonl'),
  options: {},
  implementation: fileKind,
};

/** Three tasks: two solved from the setup's file, one whose agent does nothing (reward 0). */
const ROWS = [
  { id: 'a', setup: 'put /app/input 41', solution: 'copy /app/input /app/answer', expected: '41' },
  { id: 'b', setup: 'put /app/input 7', solution: 'true', expected: '7' },
  { id: 'c', setup: 'put /app/input x', solution: 'copy /app/input /app/answer', expected: 'x' },
];

let directory = '';
beforeAll(async () => {
  directory = await mkdtemp(join(tmpdir(), 'gym-fork-setup-'));
});
afterAll(async () => {
  await rm(directory, { recursive: true, force: true });
});

async function evaluate(client: GymClient, name: string, overrides: Partial<EvalOptions> = {}) {
  const output = join(directory, `${name}.jsonl`);
  await runEval({
    client,
    environment,
    rows: ROWS,
    harness: commandHarness,
    harnessName: 'command',
    modelName: 'm',
    numRepeats: 3,
    concurrency: 4,
    output,
    resume: false,
    maxInfraAttempts: 2,
    logger: silentLogger,
    ...overrides,
  });
  return {
    output,
    rollouts: await readJsonl(output),
    failures: await readJsonl(output.replace(/\.jsonl$/, '_failures.jsonl')),
  };
}

const rewards = (rollouts: Array<Record<string, unknown>>) =>
  rollouts.map((row) => [row.id, row._ng_rollout_index, row.reward]);

describe('gym eval --fork-setup', () => {
  it('gives the rewards of a run without it, running each setup once and leaving nothing', async () => {
    const plain = fakeDaemon();
    const without = await evaluate(plain.client, 'without');
    const forked = fakeDaemon();
    const withFork = await evaluate(forked.client, 'with', { forkSetup: true });
    expect(rewards(without.rollouts)).toEqual([
      ['a', 0, 1],
      ['a', 1, 1],
      ['a', 2, 1],
      ['b', 0, 0],
      ['b', 1, 0],
      ['b', 2, 0],
      ['c', 0, 1],
      ['c', 1, 1],
      ['c', 2, 1],
    ]);
    expect(rewards(withFork.rollouts)).toEqual(rewards(without.rollouts));
    // Without: a setup per rollout; with: one per task, in a setup sandbox, never in a child.
    expect(plain.calls.filter((call) => call.includes(' put '))).toHaveLength(9);
    expect(forked.calls.filter((call) => call.includes(' put '))).toEqual([
      'exec setup put /app/input 41',
      'exec setup put /app/input 7',
      'exec setup put /app/input x',
    ]);
    expect(forked.calls.filter((call) => call.startsWith('fork '))).toHaveLength(3);
    expect(forked.calls.filter((call) => call.startsWith('fork ')).every((call) => call.endsWith(' 3'))).toBe(
      true,
    );
    // Each line says where its sandbox came from: one snapshot per task, fork indices 0..2.
    const byTask = new Map<unknown, Array<Record<string, unknown>>>();
    for (const row of withFork.rollouts)
      byTask.set(row.id, [...(byTask.get(row.id) ?? []), gymFields(row).sandbox as Record<string, unknown>]);
    for (const lines of byTask.values()) {
      expect(lines.every((sandbox) => sandbox.fork_setup === true && sandbox.from === 'fork')).toBe(true);
      expect(new Set(lines.map((sandbox) => (sandbox.lineage as { snapshot: string }).snapshot)).size).toBe(
        1,
      );
      expect(lines.map((sandbox) => (sandbox.lineage as { fork_index: number }).fork_index).sort()).toEqual([
        0, 1, 2,
      ]);
      expect(lines[0]).toMatchObject({
        image: 'gym/fake:1',
        setup_ms: expect.any(Number),
        fork_count: 3,
        snapshot_method: 'archive',
      });
    }
    expect(gymFields(without.rollouts[0]!).sandbox).toEqual({ image: 'gym/fake:1' });
    // Every child's labels and env are given in the request, never left to what the setup sandbox had.
    expect(forked.forkRequests).toEqual(
      ROWS.map(() => ({ count: 3, labels: { role: 'agent' }, env: { TASK_LANG: 'C' } })),
    );
    expect(forked.sandboxes.size).toBe(0);
    expect(forked.snapshots.size).toBe(0);
  });

  it('forks only the repeats a resumed run lacks', async () => {
    const first = await evaluate(fakeDaemon().client, 'resumed', { numRepeats: 1 });
    expect(first.rollouts).toHaveLength(3);
    const daemon = fakeDaemon();
    const resumed = await evaluate(daemon.client, 'resumed', { forkSetup: true, resume: true });
    expect(rewards(resumed.rollouts)).toEqual(
      rewards((await evaluate(fakeDaemon().client, 'full')).rollouts),
    );
    expect(daemon.calls.filter((call) => call.startsWith('fork ')).map((call) => call.split(' ')[2])).toEqual(
      ['2', '2', '2'],
    );
  });

  it('retries a lost child in a sandbox made from the snapshot, without running the setup again', async () => {
    const daemon = fakeDaemon({ loseChildOn: 'copy /app/input /app/answer' });
    const run = await evaluate(daemon.client, 'lost', { forkSetup: true, rows: ROWS.slice(0, 1) });
    expect(rewards(run.rollouts)).toEqual([
      ['a', 0, 1],
      ['a', 1, 1],
      ['a', 2, 1],
    ]);
    expect(run.failures.map((row) => gymFields(row).outcome)).toEqual(['infra_error']);
    expect(daemon.calls.filter((call) => call.includes(' put '))).toHaveLength(1);
    const sandboxOf = (row: Record<string, unknown>) =>
      gymFields(row).sandbox as { from: string; lineage: { fork_index: number | null } };
    expect(run.rollouts.map((row) => sandboxOf(row).from).sort()).toEqual(['fork', 'fork', 'snapshot']);
    expect(run.rollouts.filter((row) => sandboxOf(row).lineage.fork_index === null)).toHaveLength(1);
    expect(daemon.sandboxes.size).toBe(0);
    expect(daemon.snapshots.size).toBe(0);
  });

  it('forks no more children than workers can take; the rest start from the snapshot', async () => {
    const daemon = fakeDaemon();
    const run = await evaluate(daemon.client, 'one-worker', {
      forkSetup: true,
      concurrency: 1,
      rows: ROWS.slice(0, 1),
    });
    expect(run.rollouts.map((row) => row.reward)).toEqual([1, 1, 1]);
    expect(daemon.calls.filter((call) => call.startsWith('fork '))).toEqual(['fork sbx-1 1']);
    expect(run.rollouts.map((row) => (gymFields(row).sandbox as { from: string }).from)).toEqual([
      'fork',
      'snapshot',
      'snapshot',
    ]);
    expect(daemon.calls.filter((call) => call.includes(' put '))).toHaveLength(1);
  });

  it('makes a failed fork an infra error that is retried with a new setup, and a failed setup what it was', async () => {
    const daemon = fakeDaemon({ failForks: 1 });
    const run = await evaluate(daemon.client, 'fork-fails', { forkSetup: true, rows: ROWS.slice(0, 1) });
    expect(rewards(run.rollouts)).toEqual([
      ['a', 0, 1],
      ['a', 1, 1],
      ['a', 2, 1],
    ]);
    expect(run.failures.map((row) => [gymFields(row).outcome, row._ng_failure_terminal])).toEqual([
      ['infra_error', false],
      ['infra_error', false],
      ['infra_error', false],
    ]);
    expect(String((gymFields(run.failures[0]!).verifier as { reason: string }).reason)).toBe(
      "PROVIDER_ERROR: forking the task's setup sandbox: the engine refused the commit",
    );
    expect(daemon.calls.filter((call) => call.includes(' put '))).toHaveLength(2);
    expect(daemon.sandboxes.size).toBe(0);

    const broken = [{ ...ROWS[0]!, setup: 'fail' }];
    const plain = await evaluate(fakeDaemon().client, 'setup-fails-plain', { rows: broken, numRepeats: 2 });
    const failing = fakeDaemon();
    const forked = await evaluate(failing.client, 'setup-fails', {
      forkSetup: true,
      rows: broken,
      numRepeats: 2,
    });
    const ends = (rows: Array<Record<string, unknown>>) =>
      rows
        .map((row) => [
          String(gymFields(row).outcome),
          String(row._ng_failure_terminal),
          (gymFields(row).verifier as { reason: string }).reason,
        ])
        .sort();
    expect(forked.rollouts).toEqual([]);
    expect(ends(forked.failures)).toEqual(ends(plain.failures));
    expect(ends(forked.failures)[0]![2]).toContain("the task's setup failed");
    expect(failing.sandboxes.size).toBe(0);
  });

  it('serves the setup sandboxes from the pools, one per task', async () => {
    const daemon = fakeDaemon();
    const run = await evaluate(daemon.client, 'pooled', { forkSetup: true, usePools: true });
    expect(run.rollouts.map((row) => row.reward)).toEqual([1, 1, 1, 0, 0, 0, 1, 1, 1]);
    expect(daemon.calls.filter((call) => call.startsWith('define-pool'))).toHaveLength(1);
    expect(daemon.calls.filter((call) => call.startsWith('create pool:'))).toEqual([
      expect.stringMatching(/ setup$/),
      expect.stringMatching(/ setup$/),
      expect.stringMatching(/ setup$/),
    ]);
  });

  it("sets the next task up while this one's agents run", async () => {
    const daemon = fakeDaemon();
    const run = await evaluate(daemon.client, 'ahead', {
      concurrency: 3,
      forkSetup: true,
      rows: ROWS.slice(0, 2),
    });
    expect(rewards(run.rollouts)).toEqual([
      ['a', 0, 1],
      ['a', 1, 1],
      ['a', 2, 1],
      ['b', 0, 0],
      ['b', 1, 0],
      ['b', 2, 0],
    ]);
    const setups = daemon.calls.flatMap((call, index) => (call.endsWith(' setup') ? [index] : []));
    expect(setups).toHaveLength(2);
    expect(setups[1]).toBeLessThan(daemon.calls.findIndex((call) => call.startsWith('exec agent')));
    expect(daemon.calls.filter((call) => call.startsWith('fork '))).toEqual(['fork sbx-1 3', 'fork sbx-5 3']);
    expect(daemon.sandboxes.size).toBe(0);
  });

  it('creates the sandboxes of a row without a setup command as without it: there is nothing to share', async () => {
    const daemon = fakeDaemon();
    const bare = [{ id: 'd', solution: 'put /app/answer y', expected: 'y' }];
    const run = await evaluate(daemon.client, 'bare', { forkSetup: true, rows: bare, numRepeats: 2 });
    expect(run.rollouts.map((row) => [row.reward, gymFields(row).sandbox])).toEqual([
      [1, { image: 'gym/fake:1' }],
      [1, { image: 'gym/fake:1' }],
    ]);
    expect(daemon.calls.filter((call) => call.startsWith('fork '))).toEqual([]);
  });

  it('refuses to start on a daemon without the snapshot routes', async () => {
    const daemon = fakeDaemon();
    (daemon.client as unknown as { listSnapshots: () => Promise<never> }).listSnapshots = async () => {
      throw new GymError('ROUTE_NOT_FOUND', 'no such route');
    };
    await expect(evaluate(daemon.client, 'old-daemon', { forkSetup: true })).rejects.toMatchObject({
      code: 'CAPABILITY_UNSUPPORTED',
    });
    expect(daemon.calls).toEqual([]);
  });
});
