import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { GymClient } from '../../client/client.ts';
import { RolloutNetworkRecords } from './network-records.ts';

const directory = await mkdtemp(join(tmpdir(), 'gym-network-records-'));
afterAll(() => rm(directory, { recursive: true, force: true }));

const attempt = (at: string, host: string, verdict: 'allowed' | 'refused', reason?: string) => ({
  at,
  kind: 'connect' as const,
  host,
  port: 443,
  verdict,
  ...(reason === undefined ? {} : { reason }),
  bytesUp: 10,
  bytesDown: 100,
  durationMs: 1,
});

describe("a rollout's egress records", () => {
  it('tags each attempt with the phase in force when it started, sums them up and keeps the full log beside the rollouts', async () => {
    const logs: Record<string, unknown> = {};
    const client = { networkLog: async (id: string) => logs[id] } as unknown as GymClient;
    const records = new RolloutNetworkRecords(client);
    records.mark('agent-box', 'environment');
    const afterStart = new Date(Date.now() + 1).toISOString();
    await new Promise((resolve) => setTimeout(resolve, 20));
    records.mark('agent-box', 'agent');
    await new Promise((resolve) => setTimeout(resolve, 20));
    const duringAgent = new Date().toISOString();
    await new Promise((resolve) => setTimeout(resolve, 20));
    records.mark('agent-box', 'verifier');
    const duringVerifier = new Date(Date.now() + 5).toISOString();
    logs['agent-box'] = {
      attempts: [
        attempt(afterStart, 'mirror.test', 'allowed'),
        attempt(
          duringAgent,
          'answers.test',
          'refused',
          "answers.test:443 is not in the sandbox's allowed hosts",
        ),
        attempt(duringAgent, 'answers.test', 'refused', 'again'),
        attempt(duringVerifier, 'pkg.test', 'allowed'),
      ],
      dropped: 2,
    };
    await records.read('agent-box', 'agent');
    // A sandbox no phase was marked on is not read.
    await records.read('unknown', 'verifier');
    expect(records.refusedIn('agent')).toEqual([
      { target: 'answers.test:443', reason: "answers.test:443 is not in the sandbox's allowed hosts" },
      { target: 'answers.test:443', reason: 'again' },
    ]);
    const summary = await records.keep(join(directory, 'run_network_logs'), 'eval-1/0');
    expect(summary).toEqual({
      attempts: 4,
      allowed: 2,
      refused: 2,
      dropped: 2,
      bytes_up: 40,
      bytes_down: 400,
      phases: {
        environment: { attempts: 1, refused: 0 },
        agent: { attempts: 2, refused: 2 },
        verifier: { attempts: 1, refused: 0 },
      },
      refused_targets: [
        {
          target: 'answers.test:443',
          phase: 'agent',
          reason: "answers.test:443 is not in the sandbox's allowed hosts",
        },
      ],
      log: 'run_network_logs/eval-1_0.json',
    });
    const kept = JSON.parse(await readFile(join(directory, summary!.log!), 'utf8'));
    expect(kept.sandboxes[0].attempts.map((entry: { phase: string }) => entry.phase)).toEqual([
      'environment',
      'agent',
      'agent',
      'verifier',
    ]);
  });

  it('keeps nothing for a rollout without network, and says so when a log cannot be read', async () => {
    const failing = {
      networkLog: async () => Promise.reject(new Error('sandbox gone')),
    } as unknown as GymClient;
    expect(await new RolloutNetworkRecords(failing).keep(directory, 'none')).toBeUndefined();
    const records = new RolloutNetworkRecords(failing);
    records.mark('box', 'environment');
    await records.read('box', 'agent');
    const summary = await records.keep(join(directory, 'logs'), 'lost');
    expect(summary).toMatchObject({ attempts: 0, log_error: 'agent: Error: sandbox gone' });
  });
});
