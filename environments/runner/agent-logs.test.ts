/**
 * The agent's own files kept with its rollout: written under `X_agent_logs/<rollout id>/`, each
 * cut at its size limit with the rollout line saying so (the agent wrote them, and must not fill
 * the host's disk through them), with names that cannot leave that folder.
 */
import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { silentLogger } from '../../core/logger.ts';
import type { Harness } from '../../harnesses/harness.ts';
import type { ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../../test/daemon-harness.ts';
import { MemoryProvider } from '../../test/fixtures/memory-provider.ts';
import { loadEnvironment, readRows } from '../environment.ts';
import { AGENT_FILE_MAX_BYTES, keepAgentFiles } from './agent-logs.ts';
import { runEval } from './eval.ts';
import { readJsonl } from './files.ts';
import { gymFields } from './rollout-line.ts';

let directory = '';
beforeAll(async () => {
  directory = await mkdtemp(join(tmpdir(), 'gym-agent-logs-'));
});
afterAll(async () => {
  await rm(directory, { recursive: true, force: true });
});

describe('keeping the agent files of a rollout', () => {
  it('writes each under the rollout, cut at the limit and saying where', async () => {
    const folder = join(directory, 'unit', 'out_agent_logs');
    const kept = await keepAgentFiles(
      folder,
      'run-1-0-0-0-abc',
      [
        { name: 'stdout.txt', content: Buffer.from('{"type":"event"}\n') },
        { name: 'trajectory.json', content: Buffer.from('x'.repeat(100)) },
      ],
      64,
    );
    expect(kept).toEqual([
      { path: 'out_agent_logs/run-1-0-0-0-abc/stdout.txt', bytes: 17 },
      { path: 'out_agent_logs/run-1-0-0-0-abc/trajectory.json', bytes: 100, truncatedAt: 64 },
    ]);
    const base = dirname(folder);
    expect(await readFile(join(base, kept[0]!.path), 'utf8')).toBe('{"type":"event"}\n');
    expect((await stat(join(base, kept[1]!.path))).size).toBe(64);
  });

  it('keeps every file inside its folder whatever its name, and writes nothing without files', async () => {
    const folder = join(directory, 'names', 'out_agent_logs');
    const kept = await keepAgentFiles(
      folder,
      '../escape',
      ['../../outside.txt', '..', '/etc/passwd', 'passwd', 'a b$c'].map((name) => ({
        name,
        content: Buffer.from(name),
      })),
    );
    expect(kept.map((file) => file.path)).toEqual([
      'out_agent_logs/escape/outside.txt',
      'out_agent_logs/escape/file',
      'out_agent_logs/escape/passwd',
      'out_agent_logs/escape/2-passwd',
      'out_agent_logs/escape/a_b_c',
    ]);
    expect(await readdir(dirname(folder))).toEqual(['out_agent_logs']);
    expect(await keepAgentFiles(join(directory, 'none'), 'r', [])).toEqual([]);
    await expect(readdir(join(directory, 'none'))).rejects.toMatchObject({ code: 'ENOENT' });
  });
});

describe("gym eval keeps a harness's agent files beside the rollouts (they were once dropped)", () => {
  let daemon: TestDaemon;
  beforeAll(async () => {
    daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }] },
      {
        factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
        listen: true,
      },
    );
  });
  afterAll(async () => {
    await daemon.cleanup();
  });

  it('writes them under X_agent_logs/<rollout id>/, an oversized one cut at the limit', async () => {
    // An agent that wrote a trajectory past the limit: the host keeps its head only.
    const harness: Harness = {
      name: 'fake-agent',
      needsModel: false,
      run: async () => ({
        outcome: 'submitted',
        submission: 'Answer: B',
        trajectory: [],
        steps: 0,
        costUsd: 0,
        timings: { startedAt: new Date().toISOString(), durationMs: 1 },
        agentFiles: [
          { name: 'stdout.txt', content: Buffer.from('{"type":"done"}\n') },
          { name: 'trajectory.json', content: Buffer.alloc(AGENT_FILE_MAX_BYTES + 1000, 'a') },
        ],
      }),
    };
    const environment = await loadEnvironment('mcqa');
    const rows = (await readRows(environment.dataPath)).slice(0, 1);
    const output = join(directory, 'run', 'rollouts.jsonl');
    await runEval({
      client: new GymClient({ url: daemon.address.url!, token: daemon.token }),
      environment,
      rows,
      harness,
      harnessName: 'fake-agent',
      modelName: 'm',
      numRepeats: 1,
      concurrency: 1,
      output,
      resume: false,
      maxInfraAttempts: 1,
      logger: silentLogger,
    });
    const [rollout] = await readJsonl(output);
    const id = String(rollout!._ng_rollout_id);
    expect(gymFields(rollout!).agent_logs).toEqual([
      { path: `rollouts_agent_logs/${id}/stdout.txt`, bytes: 16 },
      {
        path: `rollouts_agent_logs/${id}/trajectory.json`,
        bytes: AGENT_FILE_MAX_BYTES + 1000,
        truncatedAt: AGENT_FILE_MAX_BYTES,
      },
    ]);
    const folder = join(directory, 'run', 'rollouts_agent_logs', id);
    expect(await readFile(join(folder, 'stdout.txt'), 'utf8')).toBe('{"type":"done"}\n');
    expect((await stat(join(folder, 'trajectory.json'))).size).toBe(AGENT_FILE_MAX_BYTES);
  });
});
