/**
 * `Idempotency-Key` across a daemon killed with SIGKILL, on real Docker: after the restart a
 * create and an exec that had answered are answered again without running, and an exec that was
 * running when the daemon died is reported as such (IDEMPOTENT_OUTCOME_UNKNOWN), never run again.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { GymClient } from '../../client/client.ts';
import { spawnDaemonProcess } from '../../test/daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../../test/docker-available.ts';
import { waitFor } from '../../test/wait-for.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';

describe.skipIf(skipReason !== undefined)('Idempotency-Key across kill -9, on Docker', () => {
  const cleanups: Array<() => Promise<void>> = [];
  afterAll(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
  });

  it('answers a finished create and exec again without running them, and reports the exec the kill cut off', async () => {
    const namespace = `idem-${randomBytes(4).toString('hex')}`;
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-idem-crash-'));
    const configPath = join(stateDir, 'gym.yaml');
    await writeFile(
      configPath,
      `stateDir: ${stateDir}\nnamespace: ${namespace}\nlisten: { host: 127.0.0.1, port: 0 }\nlogLevel: warn\n`,
    );
    let child: ChildProcess | undefined;
    const containers = async () =>
      (await docker.listContainers({ all: true, filters: { label: [`gym.namespace=${namespace}`] } })).map(
        (container) => container.Id,
      );
    cleanups.push(async () => {
      child?.kill('SIGKILL');
      await Promise.all((await containers()).map((id) => docker.getContainer(id).remove({ force: true })));
      await rm(stateDir, { recursive: true, force: true });
    });
    const start = async (): Promise<GymClient> => {
      const started = await spawnDaemonProcess(configPath, stateDir);
      child = started.child;
      return started.client;
    };

    let client = await start();
    const spec = { image: busybox, labels: { suite: 'idempotency' } };
    const sandbox = await client.createSandbox(spec, { idempotencyKey: 'create-1' });
    const done = await client.exec(
      sandbox.id,
      { command: 'echo ran >> /tmp/done; cat /tmp/done' },
      { idempotencyKey: 'exec-done' },
    );
    expect(done.stdout).toBe('ran\n');
    // An exec the kill will cut off: it has started (its line is written) and not answered.
    const cut = client
      .exec(
        sandbox.id,
        { command: 'echo started >> /tmp/cut; sleep 60', timeoutMs: 120_000 },
        { idempotencyKey: 'exec-cut' },
      )
      .catch((error: unknown) => error);
    await waitFor(
      'the exec to start',
      async () =>
        (await client.exec(sandbox.id, { argv: ['cat', '/tmp/cut'] }).catch(() => undefined))?.stdout ===
          'started\n' || undefined,
      30_000,
    );

    child!.kill('SIGKILL');
    await new Promise((resolve) => child!.once('exit', resolve));
    expect(await cut).toMatchObject({ code: 'DAEMON_UNAVAILABLE' });

    client = await start();
    expect((await client.createSandbox(spec, { idempotencyKey: 'create-1' })).id).toBe(sandbox.id);
    expect(await containers()).toHaveLength(1);
    const doneAgain = await client.exec(
      sandbox.id,
      { command: 'echo ran >> /tmp/done; cat /tmp/done' },
      { idempotencyKey: 'exec-done' },
    );
    expect(doneAgain).toEqual(done);
    const cutAgain = await client
      .exec(
        sandbox.id,
        { command: 'echo started >> /tmp/cut; sleep 60', timeoutMs: 120_000 },
        { idempotencyKey: 'exec-cut' },
      )
      .catch((error: unknown) => error);
    expect(cutAgain).toMatchObject({
      code: 'IDEMPOTENT_OUTCOME_UNKNOWN',
      details: { reason: 'interrupted' },
    });
    // Neither ran again.
    expect((await client.exec(sandbox.id, { argv: ['cat', '/tmp/done', '/tmp/cut'] })).stdout).toBe(
      'ran\nstarted\n',
    );

    await client.destroySandbox(sandbox.id);
    child!.kill('SIGTERM');
    await new Promise((resolve) => child!.once('exit', resolve));
  }, 150_000);
});
