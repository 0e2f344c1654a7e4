/**
 * A sandbox's service and health check on real Docker, through the daemon's HTTP API: create
 * returns once the health check passes, with the service running and its output readable; a
 * service that never gets healthy, or exits first, fails the create with SERVICE_UNHEALTHY and
 * leaves nothing behind; the output kept is bounded whatever the service prints; and a service
 * that ignores SIGTERM neither holds up the destroy nor outlives its sandbox.
 */
import { randomBytes } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../client/client.ts';
import { GymError } from '../core/errors.ts';
import { SERVICE_OUTPUT_KEEP_BYTES } from '../core/schemas/service.ts';
import { startTestDaemon, type TestDaemon } from '../test/daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../test/docker-available.ts';
import { relayBinaryForTests } from '../test/relay-binary.ts';

const { docker, skipReason } = await dockerTestEnvironment();

/** Pids of the host's processes whose command line holds `marker`. */
async function hostProcessesWith(marker: string): Promise<string[]> {
  const pids = (await readdir('/proc')).filter((name) => /^[0-9]+$/.test(name));
  const found: string[] = [];
  for (const pid of pids) {
    const commandLine = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (commandLine.includes(marker)) found.push(pid);
  }
  return found;
}

describe.skipIf(skipReason !== undefined)('sandbox services and health checks (docker)', () => {
  let daemon: TestDaemon;
  let client: GymClient;
  let image: string;
  let namespace: string;

  beforeAll(async () => {
    image = await testImage(docker, 'busybox');
    namespace = `services-${randomBytes(3).toString('hex')}`;
    daemon = await startTestDaemon(
      { namespace, providers: [{ name: 'docker', options: { relayHelperPath: relayBinaryForTests() } }] },
      { listen: true },
    );
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
  }, 120_000);

  afterAll(async () => {
    await daemon?.cleanup();
  });

  const output = (id: string) => client.serviceOutput(id);

  const containersOfNamespace = async () =>
    (await docker.listContainers({ all: true })).filter((container) =>
      container.Names.some((name) => name.includes(namespace)),
    );

  it('returns from create once the service is healthy, and serves it on its declared port', async () => {
    const sandbox = await client.createSandbox({
      image,
      ports: [8080],
      files: [{ path: '/www/index.html', content: 'served by the entrypoint\n' }],
      entrypoint: ['sh', '-c', 'echo starting; echo warming up >&2; sleep 1; exec httpd -f -p 8080 -h /www'],
      healthcheck: {
        test: ['CMD', 'wget', '-q', '-O', '/dev/null', 'http://127.0.0.1:8080/'],
        intervalMs: 200,
        retries: 3,
        startPeriodMs: 5_000,
        startIntervalMs: 200,
      },
    });
    expect(sandbox.service).toMatchObject({ state: 'healthy', argv: ['sh', '-c', expect.any(String)] });
    // The page is there as soon as create returns: no waiting on the caller's side.
    const endpoint = await client.portEndpoint(sandbox.id, 8080);
    const page = await fetch(`${daemon.address.url}${endpoint.path}index.html`, {
      headers: endpoint.headers,
    });
    expect(await page.text()).toBe('served by the entrypoint\n');
    expect(await output(sandbox.id)).toMatchObject({ stdout: 'starting\n', stderr: 'warming up\n' });
    expect((await client.getSandbox(sandbox.id)).service?.state).toBe('healthy');
    await client.destroySandbox(sandbox.id);
  });

  it("runs the image's own ENTRYPOINT and CMD when asked", async () => {
    // An image whose ENTRYPOINT and CMD together start a service, as a task image's would.
    const reference = `gym-test/service-image:${randomBytes(4).toString('hex')}`;
    const [repo, tag] = reference.split(':') as [string, string];
    const base = await docker.createContainer({ Image: image, Cmd: ['true'] });
    await base.commit({
      repo,
      tag,
      changes: ['ENTRYPOINT ["sh", "-c"]', 'CMD ["echo from the image; exec sleep 1000"]'],
    });
    await base.remove({ force: true });
    try {
      const sandbox = await client.createSandbox({
        image: reference,
        entrypoint: 'image',
        healthcheck: { test: 'true', intervalMs: 100 },
      });
      expect(sandbox.service).toMatchObject({
        state: 'healthy',
        argv: ['sh', '-c', 'echo from the image; exec sleep 1000'],
      });
      let seen = await output(sandbox.id);
      for (let attempt = 0; attempt < 100 && seen.stdout === ''; attempt += 1) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        seen = await output(sandbox.id);
      }
      expect(seen.stdout).toBe('from the image\n');
      await client.destroySandbox(sandbox.id);
    } finally {
      await docker.getImage(reference).remove({ force: true });
    }
  });

  it('fails the create with SERVICE_UNHEALTHY when the check never passes, and leaves nothing', async () => {
    const error = await client
      .createSandbox({
        image,
        entrypoint: ['sh', '-c', 'echo never ready >&2; exec sleep 1000'],
        healthcheck: { test: 'echo probe said no; exit 1', intervalMs: 100, retries: 2 },
      })
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(GymError);
    expect(error).toMatchObject({ code: 'SERVICE_UNHEALTHY', httpStatus: 422 });
    expect((error as GymError).details).toMatchObject({
      health: { failingStreak: 2, lastExitCode: 1, lastOutput: 'probe said no\n' },
      stderrTail: 'never ready\n',
    });
    expect(await containersOfNamespace()).toEqual([]);
  });

  it('fails the create with SERVICE_UNHEALTHY when the service exits before it is healthy', async () => {
    const error = await client
      .createSandbox({
        image,
        entrypoint: ['sh', '-c', 'echo giving up >&2; exit 3'],
        healthcheck: { test: ['CMD', 'false'], intervalMs: 5_000, retries: 100 },
      })
      .catch((caught: unknown) => caught);
    expect(error).toMatchObject({ code: 'SERVICE_UNHEALTHY', message: expect.stringMatching(/exited/) });
    expect((error as GymError).details).toMatchObject({ exit: { status: 'ok', exitCode: 3 } });
    expect(await containersOfNamespace()).toEqual([]);
  });

  it('keeps a bounded tail of what the service prints, and counts the rest', async () => {
    const total = 8 * 1024 * 1024;
    const sandbox = await client.createSandbox({
      image,
      entrypoint: ['sh', '-c', `yes 0123456789abcde | head -c ${total}; echo done >&2; exec sleep 1000`],
    });
    expect(sandbox.service?.state).toBe('running');
    let seen = await output(sandbox.id);
    for (let attempt = 0; attempt < 600 && !seen.stderr.includes('done'); attempt += 1) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      seen = await output(sandbox.id);
    }
    expect(seen.stderr).toBe('done\n');
    expect(seen.stdout.length).toBe(SERVICE_OUTPUT_KEEP_BYTES);
    expect(seen.droppedStdoutBytes + seen.stdout.length).toBe(total);
    expect(seen.stdout.endsWith('0123456789abcde\n')).toBe(true);
    await client.destroySandbox(sandbox.id);
  });

  it('never holds up the destroy and never outlives the sandbox, even ignoring SIGTERM', async () => {
    const marker = `service-marker-${randomBytes(4).toString('hex')}`;
    const sandbox = await client.createSandbox({
      image,
      entrypoint: ['sh', '-c', `trap '' TERM INT HUP; while :; do sleep 1; done # ${marker}`],
    });
    expect(sandbox.service?.state).toBe('running');
    expect(await containersOfNamespace()).toHaveLength(1);
    // The host sees the service's process once it started (runc shares the kernel's process table)...
    let running = await hostProcessesWith(marker);
    for (let attempt = 0; attempt < 100 && running.length === 0; attempt += 1) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      running = await hostProcessesWith(marker);
    }
    expect(running).not.toEqual([]);
    await client.destroySandbox(sandbox.id);
    expect(await containersOfNamespace()).toEqual([]);
    // ...and none once the sandbox is gone.
    expect(await hostProcessesWith(marker)).toEqual([]);
  });
});
