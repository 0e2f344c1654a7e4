/**
 * The mini-swe harness with the scripted model against a daemon whose provider is apptainer over
 * SSH (a real sshd, the apptainer stand-in, the busybox image): its commands run in an apptainer
 * session, its model calls go through the daemon's gateway, and it submits what the sandbox
 * printed. Needs no Docker (apptainer-eval.int.test.ts runs the terminal task end to end).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { silentLogger } from '../../core/logger.ts';
import type { ExecRequest } from '../../core/schemas/exec.ts';
import { DEFAULT_LIMITS } from '../../harnesses/harness.ts';
import { HarnessRegistry } from '../../harnesses/registry.ts';
import { clientSandboxHandle } from '../../harnesses/sandbox-handle.ts';
import { ModelScriptSchema } from '../../harnesses/scripted-model/script.ts';
import { type ScriptedModelServer, startScriptedModelServer } from '../../harnesses/scripted-model/server.ts';
import { ApptainerProvider } from '../../providers/apptainer/apptainer-provider.ts';
import type { ExecOptions, ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { BUSYBOX_REFERENCE } from '../fixtures/busybox-root.ts';
import { computeNode } from './node.ts';

/** The provider, counting the commands that ran in a session. */
class CountingProvider extends ApptainerProvider {
  sessionCommands = 0;

  override exec(id: string, request: ExecRequest, options?: ExecOptions) {
    if (request.session !== undefined) this.sessionCommands += 1;
    return super.exec(id, request, options);
  }
}

const bash = (command: string) => ({ content: `Next step.\n\`\`\`bash\n${command}\n\`\`\`` });

describe('the mini-swe harness on apptainer over ssh', () => {
  let node: Awaited<ReturnType<typeof computeNode>>;
  let model: ScriptedModelServer;
  let daemon: TestDaemon;
  let provider: CountingProvider;

  beforeAll(async () => {
    node = await computeNode('127.0.0.13', 30000 + (process.pid % 1000));
    model = await startScriptedModelServer(
      ModelScriptSchema.parse({
        conversations: [
          {
            match: 'count the errors',
            replies: [
              bash('grep -c ERROR server.log > count.txt'),
              bash('echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; cat count.txt'),
            ],
          },
        ],
      }),
    );
    daemon = await startTestDaemon(
      {
        providers: [{ name: 'apptainer', options: { hosts: [node.host] } }],
        gateway: { upstream: { baseUrl: model.baseUrl }, maxRetries: 0 },
      },
      {
        factories: {
          apptainer: (options: unknown, context: ProviderContext) => {
            provider = new CountingProvider(options, context);
            return provider;
          },
        },
        listen: true,
      },
    );
  }, 120_000);

  afterAll(async () => {
    await daemon?.cleanup();
    await model?.close();
    await node?.cleanup();
  });

  it('runs its commands in a session, calls the model through the gateway, and submits', async () => {
    const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
    const sandbox = await client.createSandbox({
      image: BUSYBOX_REFERENCE,
      workdir: '/work',
      files: [{ path: '/work/server.log', content: 'ERROR one\nok\nERROR two\nERROR three\n' }],
    });
    try {
      const rollout = await client.openRollout();
      const result = await (await new HarnessRegistry().create('mini-swe')).run({
        sandbox: clientSandboxHandle(client, sandbox.id),
        task: { id: 'count', instruction: 'Please count the errors in server.log.', workdir: '/work' },
        model: {
          baseUrl: `${client.url}${rollout.basePath}`,
          basePath: rollout.basePath,
          apiKey: rollout.key,
          model: 'any',
        },
        limits: DEFAULT_LIMITS,
        logger: silentLogger,
      });
      expect(result.outcome, result.message).toBe('submitted');
      expect(result.submission?.trim()).toBe('3');
      expect(provider.sessionCommands).toBe(2);
      expect(model.requests.length).toBe(2);
    } finally {
      await client.destroySandbox(sandbox.id);
    }
  }, 120_000);
});
