/**
 * Issue 19, finding 2: an agent that kills its own sandbox must not turn its rollout into an
 * infrastructure fault (retried, then dropped). As root in the container it raised its keeper's
 * OOM score to 1000 and filled the memory: the OOM killer took PID 1, the exec answered
 * `sandbox_gone`. Judged by what the attacker gets: never `sandbox_gone`; either the keeper lives
 * (the command's own processes are what the OOM killer takes) or the result says the command
 * lost its sandbox (`sandboxLost`, with the reason).
 *
 * A row per tier for the memory attacks. Under gVisor a command over the memory limit takes the
 * whole sandbox (declared: `limitOverrun: 'sandbox'`), so there the keeper does not live: the
 * row asserts the declared outcome, a result that says the command lost its sandbox.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { type ExecRequestInput, ExecRequestSchema, type ExecResult } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { DockerProvider, type DockerProviderOptions } from '../../providers/docker/docker-provider.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';
import { type DockerTier, dockerTier } from '../docker-tiers.ts';
import { testContext } from '../fixtures/provider-context.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';
const tiers: DockerTier[] =
  skipReason === undefined ? [await dockerTier('runc'), await dockerTier('runsc')] : [];

/** Raises PID 1's OOM score every way there is, then starts medium memory hogs past the limit. */
const OOM_KEEPER_ATTACK = [
  'for f in /proc/1/oom_score_adj /proc/1/task/1/oom_score_adj; do echo 1000 > $f; done 2>/dev/null',
  'echo 15 > /proc/1/oom_adj 2>/dev/null',
  'for i in 1 2 3 4 5 6; do (x=$(head -c 15000000 /dev/zero | tr "\\0" a); sleep 3) & done',
  'wait',
].join('; ');

for (const tier of tiers) {
  describe.skipIf(tier.skipReason !== undefined)(`an agent that kills its own sandbox (${tier.name})`, () => {
    const providers: DockerProvider[] = [];
    const created: Array<[DockerProvider, string]> = [];
    const takesSandbox = tier.capabilities.limitOverrun === 'sandbox';
    const provider = (options: DockerProviderOptions = {}) => {
      const made = new DockerProvider(
        tier.docker,
        testContext({ namespace: `kill-own-${randomBytes(3).toString('hex')}`, maxLifetimeSeconds: 600 }),
        { ...tier.providerOptions, ...options },
      );
      providers.push(made);
      return made;
    };

    afterAll(async () => {
      for (const [owner, id] of created) await owner.destroy(id).catch(() => {});
      for (const owner of providers) await owner.close();
    });

    const sandbox = async (owner: DockerProvider, memoryMiB: number) => {
      const info = await owner.create(SandboxSpecSchema.parse({ image: busybox, resources: { memoryMiB } }));
      created.push([owner, info.id]);
      return info.id;
    };
    const run = (owner: DockerProvider, id: string, request: ExecRequestInput) =>
      owner.exec(id, ExecRequestSchema.parse({ timeoutMs: 20_000, ...request }));

    /** The attacker's goal is `sandbox_gone`; the sandbox either lives on or is the command's loss. */
    const expectNotInfrastructure = async (owner: DockerProvider, id: string, result: ExecResult) => {
      expect(
        result.status,
        JSON.stringify({ ...result, stdout: '', stderr: result.stderr.slice(-300) }),
      ).not.toBe('sandbox_gone');
      if (result.sandboxLost === true) {
        expect(['oom', 'killed', 'timeout']).toContain(result.status);
        expect(result.reason).toMatch(/\w/);
        return;
      }
      // Alive: the next command is a result too (never an error, never `sandbox_gone`).
      const next = await run(owner, id, { argv: ['true'] });
      expect(next.status).not.toBe('sandbox_gone');
      return next;
    };

    for (const session of [undefined, 'agent']) {
      it(`${takesSandbox ? 'answers results, never sandbox_gone,' : 'keeps its keeper'} when it raises PID 1's OOM score and fills memory (${session ?? 'one-shot'})`, {
        timeout: 90_000,
      }, async () => {
        const owner = provider();
        const id = await sandbox(owner, 64);
        const raised = await run(owner, id, {
          command: 'echo 1000 > /proc/1/oom_score_adj; cat /proc/1/oom_score_adj',
          session,
        });
        // PID 1's score is out of the agent's reach (read-only where it is written). Under gVisor it
        // is writable and means nothing: no OOM killer of the guest reads it, the host's takes all.
        if (!takesSandbox) expect(raised.stdout.trim()).toBe('0');
        const result = await run(owner, id, { command: OOM_KEEPER_ATTACK, session });
        const next = await expectNotInfrastructure(owner, id, result);
        if (takesSandbox) {
          // The declared outcome: the hogs fail on their own (the guest refused them memory) and
          // the sandbox works on, or they took the whole sandbox (while the attack ran, or a
          // straggler just after) and the result of the command that met its end says so.
          const lost = result.sandboxLost === true ? result : next?.sandboxLost === true ? next : null;
          if (lost !== null) {
            expect(lost.status).toBe('oom');
            expect(lost.reason).toMatch(/memory/);
          } else expect(next).toMatchObject({ status: 'ok', exitCode: 0 });
          return;
        }
        // Here the keeper lives: the hogs are what the OOM killer took, and the sandbox works on.
        expect(result.sandboxLost).toBeUndefined();
        expect(next).toMatchObject({ status: 'ok', exitCode: 0 });
        const keeper = await run(owner, id, { command: 'cat /proc/1/cmdline | tr "\\0" " "' });
        expect(keeper.stdout).toContain('--keeper');
      });
    }

    it('answers results, never sandbox_gone or an error, when memory no kill frees fills it (/dev/shm)', {
      timeout: 90_000,
    }, async () => {
      const owner = provider();
      const id = await sandbox(owner, 48);
      // Files in /dev/shm are charged to the sandbox and freed by no kill: the OOM killer takes the
      // hogs, then whatever starts next (the keeper, smallest, last); every later command is `oom`.
      const result = await run(owner, id, {
        command:
          'head -c 60000000 /dev/zero > /dev/shm/fill; for i in 1 2 3; do head -c 20000000 /dev/zero | tr "\\0" a >/dev/null & done; wait; sleep 5',
      });
      expect(['oom', 'killed', 'ok']).toContain(result.status);
      const next = await expectNotInfrastructure(owner, id, result);
      if (next !== undefined) expect(['oom', 'ok']).toContain(next.status);
    });

    // Registered for runc only (the fallback path has no helper, and runsc needs it): a skipped
    // case would fail a strict CI.
    if (tier.name === 'runc')
      it('says the command lost its sandbox when it kills a shell-loop keeper (no exec helper; runc only: the fallback path)', {
        timeout: 90_000,
      }, async () => {
        // Without the exec helper the keeper is tini and a shell loop, which root in the sandbox can kill.
        const owner = provider({ execHelperPath: '/nonexistent/gym-exec' });
        const id = await sandbox(owner, 256);
        const result = await run(owner, id, {
          command:
            'for p in /proc/[0-9]*; do [ "$(cat $p/stat | cut -d" " -f4)" = 1 ] && kill -9 ${p#/proc/}; done; sleep 5',
        });
        await expectNotInfrastructure(owner, id, result);
        expect(result).toMatchObject({ status: 'killed', sandboxLost: true });
      });
  });
}

describe.skipIf(skipReason !== undefined)(
  'a command its sandbox does not let start, without the exec helper',
  () => {
    // Issue 19, finding 6, on the fallback path (the runtime, not the helper, refuses to start it):
    // a result with a shell's exit code, never a provider error an eval would retry as infra.
    const owner = new DockerProvider(
      docker,
      testContext({ namespace: `no-start-${randomBytes(3).toString('hex')}`, maxLifetimeSeconds: 600 }),
      { execHelperPath: '/nonexistent/gym-exec' },
    );
    let id = '';
    afterAll(async () => {
      if (id !== '') await owner.destroy(id).catch(() => {});
      await owner.close();
    });

    const cases: Array<[string, ExecRequestInput]> = [
      ['a missing working directory', { command: 'pwd', cwd: '/no/such/testbed' }],
      ['a missing program', { argv: ['no-such-program-in-path'] }],
      ['a missing user', { command: 'id', user: 'no-such-user-here' }],
    ];
    for (const session of [undefined, 'agent']) {
      for (const [what, request] of cases) {
        it(`answers ${what} with 126 or 127 (${session ?? 'one-shot'})`, async () => {
          if (id === '') id = (await owner.create(SandboxSpecSchema.parse({ image: busybox }))).id;
          const result = await owner.exec(id, ExecRequestSchema.parse({ ...request, session }));
          expect(result, JSON.stringify(result)).toMatchObject({ status: 'ok' });
          expect([126, 127]).toContain(result.exitCode);
          expect(`${result.stdout}${result.stderr}`.trim()).not.toBe('');
        });
      }
    }
  },
);
