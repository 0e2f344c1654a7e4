/**
 * The sandbox's keeper (PID 1) runs nothing from the sandbox's filesystem and cannot be killed
 * from inside (issue 9 review: the old keeper was a shell loop that ran the sandbox's own
 * `sleep`, so an agent that replaced `sleep` was respawned after every stop-processes, and one
 * that killed the keeper turned any rollout into sandbox_gone).
 *
 * A row per tier. Under gVisor the host's `docker top` shows its kernel, not the guest: what runs
 * is read by the exec helper's own listing inside the guest, and stop-processes is the keeper's
 * (SIGUSR1 from the engine), not the host's.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { DockerProvider } from '../../providers/docker/docker-provider.ts';
import { EXEC_HELPER_MOUNT } from '../../providers/docker/one-shot-exec.ts';
import { guestCommandLines } from '../../providers/docker/runtime-tier.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';
import { type DockerTier, dockerTier } from '../docker-tiers.ts';
import { testContext } from '../fixtures/provider-context.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';
const tiers: DockerTier[] =
  skipReason === undefined ? [await dockerTier('runc'), await dockerTier('runsc')] : [];

for (const tier of tiers) {
  describe.skipIf(tier.skipReason !== undefined)(`the sandbox keeper (${tier.name})`, () => {
    const created: string[] = [];
    const provider = new DockerProvider(
      tier.docker,
      testContext({ namespace: `keeper-${randomBytes(3).toString('hex')}`, maxLifetimeSeconds: 600 }),
      tier.providerOptions,
    );
    const spec = () => SandboxSpecSchema.parse({ image: busybox });

    afterAll(async () => {
      for (const id of created) await provider.destroy(id).catch(() => {});
      await provider.close();
    });

    const run = (id: string, command: string) =>
      provider.exec(id, ExecRequestSchema.parse({ command, timeoutMs: 20_000 }));
    // gVisor delivers a SIGKILL to PID 1 from inside (declared: `keeperKillable`), so its row
    // leaves `kill -9 1` out of the attacks and asserts what it does on its own.
    const killsKeeper = tier.capabilities.keeperKillable === true;
    const killOne = killsKeeper ? '' : 'kill -9 1; ';
    const attackName = `${killsKeeper ? '' : 'kill -9 1, '}kill -TERM 1 and kill -9 -1`;

    it(`declares whether a command can kill the keeper (${killsKeeper})`, () => {
      expect(provider.capabilities.keeperKillable ?? false).toBe(killsKeeper);
    });

    it('is not respawned from a planted sleep, so stop-processes leaves nothing running', async () => {
      const info = await provider.create(spec());
      created.push(info.id);
      // The attack: a `sleep` first in PATH that rewrites the reward in a loop, then the agent
      // kills whatever sleeps so that a shell loop keeper would run the planted one.
      const planted = await run(
        info.id,
        [
          'mkdir -p /usr/local/sbin /usr/local/bin /logs/verifier',
          "printf '#!/bin/sh\\nwhile :; do echo 1 > /logs/verifier/reward.txt; /bin/busybox sleep 0.05; done\\n' > /usr/local/sbin/sleep",
          'cp /usr/local/sbin/sleep /usr/local/bin/sleep',
          'chmod +x /usr/local/sbin/sleep /usr/local/bin/sleep',
          `pkill -9 -x sleep; ${killOne}true`,
        ].join('; '),
      );
      expect(planted.status).toBe('ok');
      await provider.stopProcesses!(info.id);
      await run(info.id, 'echo 0 > /logs/verifier/reward.txt');
      await new Promise((resolve) => setTimeout(resolve, 500));
      const reward = await run(info.id, 'cat /logs/verifier/reward.txt');
      expect(reward.stdout.trim()).toBe('0');
      const container = tier.docker.getContainer(provider.containerName(info.id));
      if (tier.name === 'runsc') {
        // The guest's own view: nothing runs but the keeper (PID 1, which the listing leaves out).
        expect(await guestCommandLines(container, EXEC_HELPER_MOUNT)).toEqual([]);
        expect((await run(info.id, 'cat /proc/1/cmdline | tr "\\0" " "')).stdout).toContain('--keeper');
        return;
      }
      const top = (await container.top({ ps_args: '-o pid,args' })) as { Processes: string[][] };
      expect(top.Processes.map((row) => row.at(-1))).toEqual(['/dev/.gym-exec --keeper']);
    });

    it(`survives ${attackName} from inside and still reaps orphans`, async () => {
      const info = await provider.create(spec());
      created.push(info.id);
      const attack = await run(info.id, `${killOne}kill -TERM 1; kill -9 -1; true`);
      expect(['ok', 'killed']).toContain(attack.status);
      const alive = await run(info.id, 'cat /proc/1/cmdline | tr "\\0" " "');
      expect(alive).toMatchObject({ status: 'ok' });
      expect(alive.stdout).toContain('--keeper');
      await run(info.id, 'sh -c "sleep 0.2 & exit 0"; sleep 0.6');
      const zombies = await run(info.id, "grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l");
      expect(zombies.stdout.trim()).toBe('0');
      if (!killsKeeper) return;
      // The declared outcome: the sandbox ends, and the command says it lost it by its own doing.
      const ended = await run(info.id, 'kill -9 1; sleep 30');
      expect(ended).toMatchObject({ status: 'oom', sandboxLost: true });
      expect(ended.reason).toContain('killed the sandbox');
    });

    it('tells a command killed from inside from a sandbox gone, even with the sandbox shell deleted', async () => {
      const info = await provider.create(spec());
      created.push(info.id);
      // Deleting /bin/sh used to make the after-kill probe (run by the sandbox's sh) fail, and every
      // kill read as sandbox_gone: an infra error an agent could hide any failing rollout behind.
      const killed = await run(info.id, 'rm -f /bin/sh; kill -9 $$');
      expect(killed.status).toBe('killed');
      const still = await provider.exec(info.id, ExecRequestSchema.parse({ argv: ['/bin/busybox', 'true'] }));
      expect(still).toMatchObject({ status: 'ok', exitCode: 0 });
    });
  });
}
