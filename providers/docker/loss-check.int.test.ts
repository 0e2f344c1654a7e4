/**
 * The loss check against the engine's race: while the engine kills a container it still reports
 * it running, and a command it could not start then answers 126 ("cannot exec in a stopped
 * state"). Seen in CI's chaos test as a verifier's command graded the agent's failure (reward 0)
 * when the engine destroyed its sandbox. The check asks the engine again through the host's
 * helper; a command that exits 126 by itself in a live sandbox stays its own result. The other
 * way round, a container the engine still runs once a kill would have finished is alive, even
 * when no look into it works (its memory full, its shell deleted): CI saw that as `sandbox_gone`.
 */
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../core/logger.ts';
import { ExecRequestSchema, type ExecResult } from '../../core/schemas/exec.ts';
import type { SandboxInfo } from '../../core/schemas/sandbox.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import { dockerTestEnvironment, testImage } from '../../test/docker-available.ts';
import { TEST_EXEC_HELPER } from '../../test/docker-tiers.ts';
import { testContext } from '../../test/fixtures/provider-context.ts';
import { OomKillCounts } from '../shared/abnormal-end.ts';
import { DockerProvider } from './docker-provider.ts';
import { LossCheck } from './loss-check.ts';
import { DockerProviderOptionsSchema } from './options.ts';
import { detectHostControl, ProcessControl } from './process-control.ts';
import { runtimeTier } from './runtime-tier.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';

const cannotStart: ExecResult = {
  status: 'ok',
  exitCode: 126,
  stdout: 'cannot exec in a stopped state: unknown\n',
  stderr: '',
  stdoutTruncated: false,
  stderrTruncated: false,
  stdoutBytes: 40,
  stderrBytes: 0,
  durationMs: 5,
};

describe.skipIf(skipReason !== undefined)(
  'the Docker loss check, while the engine kills a container or a look into a live one fails',
  () => {
    const provider = new DockerProvider(docker, testContext(), TEST_EXEC_HELPER);
    const { execHelperPath } = DockerProviderOptionsSchema.parse(TEST_EXEC_HELPER);
    const processes = new ProcessControl(
      detectHostControl({ helperPath: execHelperPath, isEngineLocal: true }),
      silentLogger,
    );
    /** A check whose view of the sandbox is the engine's in the race: still running. */
    const racing = () =>
      new LossCheck(processes, new OomKillCounts(), async () => ({ state: 'ready' }) as SandboxInfo, {
        docker,
        tier: runtimeTier(undefined),
      });

    it('takes a 126 of a container the engine is taking away for the sandbox gone, not the command', async () => {
      const sandbox = await provider.create(parseOrThrow(SandboxSpecSchema, { image: busybox }, 'spec'));
      const container = docker.getContainer(provider.containerName(sandbox.id));
      await container.remove({ force: true });
      const result = await racing().confirmAlive(sandbox.id, container, cannotStart);
      expect(result.status).toBe('sandbox_gone');
      expect(result.exitCode).toBeNull();
    });

    it("keeps a command's own 126 in a live sandbox, whatever it printed", async () => {
      const sandbox = await provider.create(parseOrThrow(SandboxSpecSchema, { image: busybox }, 'spec'));
      try {
        const container = docker.getContainer(provider.containerName(sandbox.id));
        expect(await racing().confirmAlive(sandbox.id, container, cannotStart)).toEqual(cannotStart);
        // Through the provider: the agent's fake of the engine's words is its own failure.
        const faked = await provider.exec(
          sandbox.id,
          parseOrThrow(
            ExecRequestSchema,
            { command: "echo 'cannot exec in a stopped state: unknown'; exit 126" },
            'exec',
          ),
        );
        expect(faked).toMatchObject({ status: 'ok', exitCode: 126 });
      } finally {
        await provider.destroy(sandbox.id);
      }
    });

    it('keeps the 126 of a container that runs on when the helper cannot start in it either', async () => {
      // As when the agent filled the sandbox's memory (/dev/shm, freed by no kill): the helper's
      // exec fails like the command's, yet the container lives on and the result is the agent's.
      // Stood in for here by a container without the helper mounted. CI saw `sandbox_gone`.
      const bare = new DockerProvider(docker, testContext(), { execHelperPath: '/nonexistent/gym-exec' });
      const sandbox = await bare.create(parseOrThrow(SandboxSpecSchema, { image: busybox }, 'spec'));
      try {
        const container = docker.getContainer(bare.containerName(sandbox.id));
        expect(await racing().confirmAlive(sandbox.id, container, cannotStart)).toEqual(cannotStart);
      } finally {
        await bare.destroy(sandbox.id);
        await bare.close();
      }
    });

    it("calls a command's abnormal end in a sandbox whose shell the agent deleted a kill, not the sandbox gone", async () => {
      // Without a view of the sandbox from the host (a remote engine: the processes tagged), the
      // check's probe runs the sandbox's own `sh`. An agent that deleted it made the probe fail and
      // every kill of its commands an infra fault; the engine, asked again, still runs the container.
      const tagged = new ProcessControl(
        detectHostControl({ helperPath: execHelperPath, isEngineLocal: false }),
        silentLogger,
      );
      const sandbox = await provider.create(parseOrThrow(SandboxSpecSchema, { image: busybox }, 'spec'));
      try {
        const container = docker.getContainer(provider.containerName(sandbox.id));
        const removed = await provider.exec(
          sandbox.id,
          parseOrThrow(ExecRequestSchema, { argv: ['rm', '/bin/sh'] }, 'exec'),
        );
        expect(removed).toMatchObject({ status: 'ok', exitCode: 0 });
        const check = new LossCheck(tagged, new OomKillCounts(), provider.get.bind(provider), {
          docker,
          tier: runtimeTier(undefined),
        });
        expect(await check.hooks(sandbox.id, container).classifyAbnormalEnd()).toBe('killed');
      } finally {
        await provider.destroy(sandbox.id);
      }
    });
  },
);
