/**
 * The harnesses on a provider with only the required operations (no sessions, snapshot or process
 * stop): `mini-swe` and `tool-calling` always ask for a session, and must work all the same. The
 * memory provider runs nothing: an exec echoes its command, which is enough to drive each loop.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../client/client.ts';
import { silentLogger } from '../core/logger.ts';
import type { ProviderContext } from '../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../test/daemon-harness.ts';
import { MemoryProvider } from '../test/fixtures/memory-provider.ts';
import { DEFAULT_LIMITS, type Harness } from './harness.ts';
import { HarnessRegistry } from './registry.ts';
import { clientSandboxHandle } from './sandbox-handle.ts';
import { ModelScriptSchema } from './scripted-model/script.ts';
import { type ScriptedModelServer, startScriptedModelServer } from './scripted-model/server.ts';

const bash = (command: string) => ({ content: `Next step.\n\`\`\`bash\n${command}\n\`\`\`` });

describe('harnesses on a provider without sessions', () => {
  let model: ScriptedModelServer;
  let daemon: TestDaemon;
  let client: GymClient;
  let provider: MemoryProvider;
  const registry = new HarnessRegistry();

  beforeAll(async () => {
    model = await startScriptedModelServer(
      ModelScriptSchema.parse({
        conversations: [
          {
            match: 'task mini',
            // The echoed command's first line is the sentinel: the loop takes the rest as the submission.
            replies: [bash('ls /work'), bash('COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\nthe patch')],
          },
          {
            match: 'task tools',
            replies: [
              { toolCalls: [{ name: 'bash', arguments: { command: 'echo tools ran' } }] },
              { content: 'Done.' },
            ],
          },
        ],
      }),
    );
    daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }], gateway: { upstream: { baseUrl: model.baseUrl }, maxRetries: 0 } },
      {
        factories: {
          memory: (_options: unknown, context: ProviderContext) => {
            provider = new MemoryProvider(context, {
              capabilities: { sessions: false, snapshot: false, stopProcesses: false },
            });
            return provider;
          },
        },
        listen: true,
      },
    );
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
  });

  afterAll(async () => {
    await daemon?.cleanup();
    await model?.close();
  });

  async function run(harness: Harness, taskId: string) {
    const sandbox = await client.createSandbox({ image: 'img' });
    const rollout = await client.openRollout();
    const result = await harness.run({
      sandbox: clientSandboxHandle(client, sandbox.id),
      task: { id: taskId, instruction: `Do it (task ${taskId}).`, workdir: '/work' },
      model: {
        baseUrl: `${client.url}${rollout.basePath}`,
        basePath: rollout.basePath,
        apiKey: rollout.key,
        model: 'any',
      },
      limits: DEFAULT_LIMITS,
      logger: silentLogger,
    });
    await client.destroySandbox(sandbox.id);
    return result;
  }

  it('mini-swe runs its session commands one-shot and submits', async () => {
    const before = provider.execs.length;
    const result = await run(await registry.create('mini-swe'), 'mini');
    expect(result.outcome, result.message).toBe('submitted');
    expect(result.submission?.trim()).toBe('the patch');
    expect(result.trajectory[0]?.observation).toContain('ls /work');
    const execs = provider.execs.slice(before);
    expect(execs).toHaveLength(2);
    expect(execs.every((request) => request.session === undefined)).toBe(true);
  });

  it('tool-calling runs its bash tool one-shot and ends on its answer', async () => {
    const before = provider.execs.length;
    const result = await run(await registry.create('tool-calling'), 'tools');
    expect(result.outcome, result.message).toBe('submitted');
    expect(result.submission).toBe('Done.');
    expect(result.trajectory[0]?.observation).toContain('echo tools ran');
    expect(provider.execs.slice(before).map((request) => request.session)).toEqual([undefined]);
  });
});
