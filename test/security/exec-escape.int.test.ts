import type Docker from 'dockerode';
import { afterAll, describe, expect, it } from 'vitest';
import { type ExecRequestInput, ExecRequestSchema } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import { DockerProvider } from '../../providers/docker/docker-provider.ts';
import { EXEC_HELPER_MOUNT } from '../../providers/docker/one-shot-exec.ts';
import { guestCommandLines } from '../../providers/docker/runtime-tier.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';
import { type DockerTier, dockerTier, TEST_EXEC_HELPER } from '../docker-tiers.ts';
import { testContext } from '../fixtures/provider-context.ts';
import { runStopperAttack } from '../fixtures/stopper-attack.ts';

const { docker, skipReason } = await dockerTestEnvironment();
/** Each tier's row: runc (a cgroup per command, killed from the host) and gVisor (a tracer per command, inside). */
const tiers: DockerTier[] =
  skipReason === undefined ? [await dockerTier('runc'), await dockerTier('runsc')] : [];
const images =
  skipReason === undefined
    ? { busybox: await testImage(docker, 'busybox'), debian: await testImage(docker, 'debian-base') }
    : { busybox: 'missing', debian: 'missing' };

/** Replaces every `tr` on PATH with a script that does nothing. */
const REPLACE_TR =
  "for d in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do if [ -e $d/tr ]; then rm -f $d/tr; printf '#!/bin/sh\\nexit 0\\n' > $d/tr; chmod 755 $d/tr; fi; done";
/** Replaces /bin/sh with a program that does nothing (busybox dispatches on argv[0], so a shebang). */
const REPLACE_SH =
  "if [ -x /bin/busybox ]; then rm /bin/sh; printf '#!/bin/busybox true\\n' > /bin/sh; chmod 755 /bin/sh; else cp /bin/true /bin/sh.new; mv /bin/sh.new /bin/sh; fi";

const sessionName = (attack: Attack) => `attack-${attacks.indexOf(attack)}`;

interface Attack {
  name: string;
  /** Run (one-shot, as root) before the attack, in the attack's own fresh sandbox. */
  prepare?: string;
  request: (seconds: number) => ExecRequestInput;
}

const attacks: Attack[] = [
  { name: 'env -i sleep', request: (s) => ({ command: `env -i sleep ${s}` }) },
  { name: 'env -i setsid sleep &', request: (s) => ({ command: `env -i setsid sleep ${s} & sleep ${s}` }) },
  {
    name: 'a setsid double fork with a cleared environment',
    request: (s) => ({ command: `setsid sh -c 'env -i sh -c "sleep ${s} &" &'; sleep ${s}` }),
  },
  { name: 'a replaced tr', prepare: REPLACE_TR, request: (s) => ({ command: `sleep ${s}` }) },
  { name: 'a replaced /bin/sh', prepare: REPLACE_SH, request: (s) => ({ argv: ['sleep', String(s)] }) },
];

/**
 * What runs in a container, every command line: the host's `docker top` under runc; under gVisor,
 * whose host sees only its kernel, the exec helper's own listing inside the guest.
 */
async function commandLines(tier: Pick<DockerTier, 'name'>, container: Docker.Container): Promise<string[]> {
  if (tier.name === 'runsc') return guestCommandLines(container, EXEC_HELPER_MOUNT);
  const top = (await container.top({ ps_args: '-eo pid,args' })) as {
    Titles: string[];
    Processes: string[][];
  };
  const column = top.Titles.findIndex((title) => /CMD|COMMAND|ARGS/i.test(title));
  return top.Processes.map((row) => row[column] ?? row.join(' '));
}

for (const tier of tiers) {
  describe.skipIf(tier.skipReason !== undefined)(
    `a timed-out command leaves no process behind (${tier.name})`,
    () => {
      const provider = new DockerProvider(tier.docker, testContext(), tier.providerOptions);
      const created: string[] = [];
      let seconds = 3000 + Math.floor(Math.random() * 1000) * 10;
      const isGvisor = tier.name === 'runsc';

      it(`has the strong guarantee here (${tier.capabilities.timeoutKill}: the exec helper is built${isGvisor ? ', each command traced inside the guest' : ' and the host has cgroup v2'})`, () => {
        expect(provider.capabilities.timeoutKill).toBe(tier.capabilities.timeoutKill);
        expect(provider.capabilities.timeoutKill).not.toBe('tagged');
      });

      afterAll(async () => {
        await Promise.all(created.map((id) => provider.destroy(id).catch(() => {})));
        await provider.close();
      });

      /** A new sandbox of `image`: its id, container and a way to run commands in it. */
      async function sandbox(image: string) {
        const info = await provider.create(parseOrThrow(SandboxSpecSchema, { image }, 'spec'));
        created.push(info.id);
        const container = tier.docker.getContainer(provider.containerName(info.id));
        const exec = (request: ExecRequestInput) =>
          provider.exec(info.id, parseOrThrow(ExecRequestSchema, request, 'exec'));
        return { container, exec };
      }

      // gVisor starts a sandbox slowly: its row shares one sandbox per image where the cases allow.
      const shared = new Map<string, ReturnType<typeof sandbox>>();
      const sharedSandbox = (image: string) => {
        if (!shared.has(image)) shared.set(image, sandbox(image));
        return shared.get(image)!;
      };

      for (const mode of ['one-shot', 'session'] as const) {
        it(`${mode}: a background job of a command that ended keeps running through a later timeout`, {
          timeout: 60_000,
        }, async () => {
          const { container, exec } = await (isGvisor
            ? sharedSandbox(images.busybox)
            : sandbox(images.busybox));
          const session = mode === 'session' ? { session: 'jobs' } : {};
          seconds += 1;
          const job = `sleep ${seconds}`;
          const started = await exec({ command: `${job} >/dev/null 2>&1 &`, ...session });
          expect(started).toMatchObject({ status: 'ok', exitCode: 0 });
          const timedOut = await exec({ command: 'sleep 999', ...session, timeoutMs: 500 });
          expect(timedOut.status).toBe('timeout');
          expect((await commandLines(tier, container)).filter((line) => line.includes(job))).toHaveLength(1);
          // A session killed by a timeout is opened again for the next command.
          expect(await exec({ argv: ['echo', 'again'], ...session })).toMatchObject({
            status: 'ok',
            stdout: 'again\n',
          });
        });
      }

      for (const [imageName, image] of Object.entries(images)) {
        for (const mode of ['one-shot', 'session'] as const) {
          for (const attack of attacks) {
            it(`${imageName}, ${mode}: ${attack.name}`, { timeout: 60_000 }, async () => {
              // What replaces a binary gets a sandbox of its own; under gVisor, one for both of those.
              const { container, exec } = !isGvisor
                ? await sandbox(image)
                : attack.prepare === undefined
                  ? await sharedSandbox(image)
                  : await preparedSandbox(image);
              // A session of its own per attack: a timeout drops it, and a shared sandbox's binaries may be gone.
              const session = mode === 'session' ? { session: sessionName(attack) } : {};
              // Open the session first, so a replaced binary cannot stop it from starting.
              if (mode === 'session') expect((await exec({ argv: ['true'], ...session })).status).toBe('ok');
              if (attack.prepare !== undefined && !isGvisor) {
                expect(await exec({ command: attack.prepare, user: '0' })).toMatchObject({
                  status: 'ok',
                  exitCode: 0,
                });
              }
              seconds += 1;
              const marker = `sleep ${seconds}`;
              const request =
                isGvisor && attack.prepare !== undefined
                  ? { argv: ['sleep', String(seconds)] }
                  : attack.request(seconds);
              const result = await exec({ ...request, ...session, timeoutMs: 1500 });
              expect(result.status).toBe('timeout');
              const left = (await commandLines(tier, container)).filter((line) => line.includes(marker));
              expect(left, 'processes still running after the timeout').toEqual([]);
            });
          }
        }
      }

      /**
       * Under gVisor, one sandbox per image with both `tr` and `/bin/sh` replaced, its session
       * opened first (the attacks that replace a binary run there, by argv: no shell is left).
       */
      const prepared = new Map<string, Promise<Awaited<ReturnType<typeof sandbox>>>>();
      function preparedSandbox(image: string) {
        if (!prepared.has(image))
          prepared.set(
            image,
            (async () => {
              const made = await sandbox(image);
              for (const attack of attacks)
                expect((await made.exec({ argv: ['true'], session: sessionName(attack) })).status).toBe('ok');
              for (const attack of attacks)
                if (attack.prepare !== undefined)
                  expect(await made.exec({ command: attack.prepare, user: '0' })).toMatchObject({
                    status: 'ok',
                    exitCode: 0,
                  });
              return made;
            })(),
          );
        return prepared.get(image)!;
      }
    },
  );
}

describe.skipIf(skipReason !== undefined)('without the exec helper (the fallback)', () => {
  const provider = new DockerProvider(docker, testContext(), {
    ...TEST_EXEC_HELPER,
    execHelperPath: '/nonexistent/gym-exec',
  });
  const created: string[] = [];

  afterAll(async () => {
    await Promise.all(created.map((id) => provider.destroy(id).catch(() => {})));
    await provider.close();
  });

  it('says it gives the weaker guarantee, and why', async () => {
    expect(provider.capabilities).toMatchObject({ timeoutKill: 'tagged', stopProcesses: false });
    const health = await provider.health();
    expect(health.message).toContain('weaker guarantee');
    expect(health.details).toMatchObject({ timeoutKill: 'tagged' });
    expect(String(health.details?.timeoutKillReason)).toContain('/nonexistent/gym-exec');
  });

  it('leaves nothing of a timed-out command that stops the kill script: the container is killed, the command lost its sandbox', {
    timeout: 90_000,
  }, async () => {
    // One-shot and through a session at once: the two paths of a timeout kill.
    await Promise.all(
      [undefined, 'agent'].map(async (session) => {
        const info = await provider.create(
          parseOrThrow(SandboxSpecSchema, { image: images.busybox }, 'spec'),
        );
        created.push(info.id);
        const container = docker.getContainer(provider.containerName(info.id));
        // The loop stops the kill script as it starts, so the container has to go.
        if ((await runStopperAttack(provider, info.id, container, session)) !== 'lost') return;
        expect((await container.inspect()).State.Running).toBe(false);
      }),
    );
  });

  it("still kills a timed-out command without the sandbox's tr", { timeout: 60_000 }, async () => {
    const info = await provider.create(parseOrThrow(SandboxSpecSchema, { image: images.debian }, 'spec'));
    created.push(info.id);
    const container = docker.getContainer(provider.containerName(info.id));
    const exec = (request: ExecRequestInput) =>
      provider.exec(info.id, parseOrThrow(ExecRequestSchema, request, 'exec'));
    expect(await exec({ command: REPLACE_TR, user: '0' })).toMatchObject({ status: 'ok', exitCode: 0 });
    const result = await exec({ command: 'sleep 2999 & sleep 2999', timeoutMs: 1000 });
    expect(result.status).toBe('timeout');
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(
      (await commandLines({ name: 'runc' }, container)).filter((line) => line.includes('sleep 2999')),
    ).toEqual([]);
  });
});
