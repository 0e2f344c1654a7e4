/**
 * A multi-container task's group survives the daemon's kill -9 without a leak: its service
 * containers are still its own after the restart (the adopted sandbox still reaches them by name),
 * a group whose lease ran out is reaped with its services, and destroying the rest leaves nothing.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { GymClient } from '../../client/client.ts';
import { SERVICE_LABEL } from '../../providers/docker/service-group.ts';
import { spawnDaemonProcess } from '../daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';
import { waitFor } from '../wait-for.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';

/** A group: the sandbox and one server beside it that answers its word on loopback port 8080. */
const groupSpec = (word: string, ttlSeconds: number) => ({
  image: busybox,
  ttlSeconds,
  labels: { word },
  services: [
    {
      name: 'db',
      image: busybox,
      command: ['sh', '-c', `mkdir -p /www && echo ${word} > /www/word && exec httpd -f -p 8080 -h /www`],
      healthcheck: {
        argv: ['wget', '-q', '-O', '/dev/null', 'http://127.0.0.1:8080/word'],
        intervalMs: 200,
        retries: 50,
      },
    },
  ],
});

describe.skipIf(skipReason !== undefined)('a group of containers across a daemon crash', () => {
  const namespace = `svc-crash-${randomBytes(4).toString('hex')}`;
  let child: ChildProcess | undefined;
  let stateDir = '';

  /** This namespace's containers: each sandbox's own, and each service's, by the sandbox it belongs to. */
  const containers = async () => {
    const listed = await docker.listContainers({
      all: true,
      filters: { label: [`gym.namespace=${namespace}`] },
    });
    const services = listed.filter((container) => container.Labels[SERVICE_LABEL] !== undefined);
    const sandboxes = listed.filter((container) => container.Labels[SERVICE_LABEL] === undefined);
    return {
      sandboxes: sandboxes.map((container) => container.Labels['gym.sandbox-id']!).sort(),
      services: services.map((container) => container.Labels['gym.sandbox-id']!).sort(),
    };
  };

  afterAll(async () => {
    child?.kill('SIGKILL');
    const left = await docker.listContainers({
      all: true,
      filters: { label: [`gym.namespace=${namespace}`] },
    });
    await Promise.all(left.map((container) => docker.getContainer(container.Id).remove({ force: true })));
    await rm(stateDir, { recursive: true, force: true });
  });

  it('keeps each group whole through kill -9, reaps an expired one with its services, and leaves nothing after destroy', async () => {
    stateDir = await mkdtemp(join(tmpdir(), 'gym-svc-crash-'));
    const configPath = join(stateDir, 'gym.yaml');
    await writeFile(
      configPath,
      `stateDir: ${stateDir}\nnamespace: ${namespace}\nlisten: { host: 127.0.0.1, port: 0 }\nreaperIntervalMs: 300\norphanScanIntervalMs: 1000\nlogLevel: warn\n`,
    );
    const start = async (): Promise<GymClient> => {
      const started = await spawnDaemonProcess(configPath, stateDir);
      child = started.child;
      return started.client;
    };
    let client = await start();
    const long = await client.createSandbox(groupSpec('long', 600));
    const short = await client.createSandbox(groupSpec('short', 25));
    const both = [long.id, short.id].sort();
    expect(await containers()).toEqual({ sandboxes: both, services: both });

    child!.kill('SIGKILL');
    await new Promise((resolve) => child!.once('exit', resolve));
    expect(await containers()).toEqual({ sandboxes: both, services: both });

    client = await start();
    // Adopted whole: the sandbox still reaches its own service by name.
    const word = await client.exec(long.id, { argv: ['wget', '-q', '-O', '-', 'http://db:8080/word'] });
    expect(word.stdout.trim()).toBe('long');
    // The short lease runs out: the reaper takes the sandbox and its service with it.
    const afterReap = await waitFor(
      'the short-lived group to be reaped',
      async () => {
        const left = await containers();
        return left.sandboxes.length === 1 ? left : undefined;
      },
      60_000,
    );
    expect(afterReap).toEqual({ sandboxes: [long.id], services: [long.id] });

    await client.destroySandbox(long.id);
    expect(await containers()).toEqual({ sandboxes: [], services: [] });
    child!.kill('SIGTERM');
    await new Promise((resolve) => child!.once('exit', resolve));
  }, 180_000);
});
