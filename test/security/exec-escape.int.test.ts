import type Docker from 'dockerode';
import { afterAll, describe, expect, it } from 'vitest';
import { type ExecRequestInput, ExecRequestSchema } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import { DockerProvider } from '../../providers/docker/docker-provider.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';
import { testContext } from '../fixtures/provider-context.ts';
import { runStopperAttack } from '../fixtures/stopper-attack.ts';

const { docker, skipReason } = await dockerTestEnvironment();
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

/** The host's view of what runs in a container: every command line `docker top` lists. */
async function commandLines(container: Docker.Container): Promise<string[]> {
  const top = (await container.top({ ps_args: '-eo pid,args' })) as {
    Titles: string[];
    Processes: string[][];
  };
  const column = top.Titles.findIndex((title) => /CMD|COMMAND|ARGS/i.test(title));
  return top.Processes.map((row) => row[column] ?? row.join(' '));
}

describe.skipIf(skipReason !== undefined)('a timed-out command leaves no process behind', () => {
  const provider = new DockerProvider(docker, testContext());
  const created: string[] = [];
  let seconds = 3000 + Math.floor(Math.random() * 1000) * 10;

  it('has the strong guarantee here (the exec helper is built and the host has cgroup v2)', () => {
    expect(provider.capabilities.timeoutKill).toBe('cgroup');
  });

  afterAll(async () => {
    await Promise.all(created.map((id) => provider.destroy(id).catch(() => {})));
    await provider.close();
  });

  for (const mode of ['one-shot', 'session'] as const) {
    it(`${mode}: a background job of a command that ended keeps running through a later timeout`, {
      timeout: 60_000,
    }, async () => {
      const info = await provider.create(parseOrThrow(SandboxSpecSchema, { image: images.busybox }, 'spec'));
      created.push(info.id);
      const container = docker.getContainer(provider.containerName(info.id));
      const session = mode === 'session' ? { session: 'jobs' } : {};
      const exec = (request: ExecRequestInput) =>
        provider.exec(info.id, parseOrThrow(ExecRequestSchema, request, 'exec'));
      seconds += 1;
      const job = `sleep ${seconds}`;
      const started = await exec({ command: `${job} >/dev/null 2>&1 &`, ...session });
      expect(started).toMatchObject({ status: 'ok', exitCode: 0 });
      const timedOut = await exec({ command: 'sleep 999', ...session, timeoutMs: 500 });
      expect(timedOut.status).toBe('timeout');
      expect((await commandLines(container)).filter((line) => line.includes(job))).toHaveLength(1);
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
          const info = await provider.create(parseOrThrow(SandboxSpecSchema, { image }, 'spec'));
          created.push(info.id);
          const container = docker.getContainer(provider.containerName(info.id));
          const session = mode === 'session' ? { session: 'attack' } : {};
          const exec = (request: ExecRequestInput) =>
            provider.exec(info.id, parseOrThrow(ExecRequestSchema, request, 'exec'));
          // Open the session first, so a replaced binary cannot stop it from starting.
          if (mode === 'session') expect((await exec({ argv: ['true'], ...session })).status).toBe('ok');
          if (attack.prepare !== undefined) {
            expect(await exec({ command: attack.prepare, user: '0' })).toMatchObject({
              status: 'ok',
              exitCode: 0,
            });
          }
          seconds += 1;
          const marker = `sleep ${seconds}`;
          const result = await exec({ ...attack.request(seconds), ...session, timeoutMs: 1500 });
          expect(result.status).toBe('timeout');
          const left = (await commandLines(container)).filter((line) => line.includes(marker));
          expect(left, 'processes still running after the timeout').toEqual([]);
        });
      }
    }
  }
});

describe.skipIf(skipReason !== undefined)('without the exec helper (the fallback)', () => {
  const provider = new DockerProvider(docker, testContext(), { execHelperPath: '/nonexistent/gym-exec' });
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
    expect((await commandLines(container)).filter((line) => line.includes('sleep 2999'))).toEqual([]);
  });
});
