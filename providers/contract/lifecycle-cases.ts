import { expect, it } from 'vitest';
import { GymError } from '../../core/errors.ts';
import type { SandboxProvider } from '../sandbox-provider.ts';
import { expectGymError, type SandboxFixture } from './fixture.ts';

export function defineLifecycleCases(fixture: SandboxFixture): void {
  it('creates a ready sandbox that reports its spec and labels', async () => {
    const info = await fixture.create({ labels: { role: 'lifecycle' } });
    expect(info).toMatchObject({
      provider: fixture.provider.name,
      state: 'ready',
      image: fixture.options.image,
    });
    expect(info.labels).toMatchObject({ role: 'lifecycle', 'contract-run': fixture.runId });
    expect(Date.parse(info.deadlineAt)).toBeGreaterThanOrEqual(Date.parse(info.leaseExpiresAt));
    const fetched = await fixture.provider.get(info.id);
    expect(fetched).toMatchObject({ id: info.id, state: 'ready', labels: info.labels, pool: null });
  });

  it('writes seed files and waits for the readiness probe', async () => {
    const info = await fixture.create({
      files: [{ path: '/etc/gym-seed/hello.sh', content: '#!/bin/sh\necho seeded\n', mode: 0o755 }],
      readiness: { command: 'test -x /etc/gym-seed/hello.sh' },
    });
    const result = await fixture.exec(info.id, { argv: ['/etc/gym-seed/hello.sh'] });
    expect(result.stdout).toBe('seeded\n');
  });

  it('destroys idempotently, and the sandbox is gone after', async () => {
    const info = await fixture.create();
    await fixture.provider.destroy(info.id);
    await fixture.provider.destroy(info.id);
    await expectGymError(fixture.provider.get(info.id), 'SANDBOX_NOT_FOUND');
    const execAfter = await fixture.exec(info.id, { argv: ['true'] }).then(
      (result) => result.status,
      (error: { code?: string }) => error.code,
    );
    expect(['sandbox_gone', 'SANDBOX_NOT_FOUND']).toContain(execAfter);
    await expectGymError(fixture.provider.readFile(info.id, '/etc/passwd'), 'SANDBOX_NOT_FOUND');
  });

  it('reports sandbox_gone for a command whose sandbox is destroyed under it', async () => {
    const info = await fixture.create();
    const running = fixture.exec(info.id, { command: 'sleep 30', timeoutMs: 60_000 });
    await new Promise((resolve) => setTimeout(resolve, 500));
    await fixture.provider.destroy(info.id);
    const result = await running.then(
      (value) => value.status,
      (error: { code?: string }) => error.code,
    );
    expect(['sandbox_gone', 'SANDBOX_NOT_FOUND']).toContain(result);
  });

  it('lists sandboxes by label', async () => {
    const first = await fixture.create({ labels: { group: 'listing', member: 'one' } });
    const second = await fixture.create({ labels: { group: 'listing', member: 'two' } });
    const group = await fixture.provider.list({
      labels: { group: 'listing', 'contract-run': fixture.runId },
    });
    expect(group.sandboxes.map((info) => info.id).sort()).toEqual([first.id, second.id].sort());
    const one = await fixture.provider.list({ labels: { member: 'one', 'contract-run': fixture.runId } });
    expect(one.sandboxes.map((info) => info.id)).toEqual([first.id]);
  });

  it('lists by pool, by daemon and by several labels at once, with each sandbox as created', async () => {
    const run = { 'contract-run': fixture.runId };
    const pooled = await fixture.create(
      { labels: { group: 'filters', tier: 'a' } },
      { pool: 'contract-pool' },
    );
    const loose = await fixture.create({ labels: { group: 'filters', tier: 'b' } });
    const ids = async (filter: Parameters<SandboxProvider['list']>[0]) =>
      (await fixture.provider.list(filter)).sandboxes.map((info) => info.id).sort();
    expect(await ids({ labels: { ...run, group: 'filters' } })).toEqual([pooled.id, loose.id].sort());
    expect(await ids({ labels: { ...run, group: 'filters', tier: 'b' } })).toEqual([loose.id]);
    expect(await ids({ labels: { ...run, group: 'filters', tier: 'c' } })).toEqual([]);
    expect(await ids({ labels: run, pool: 'contract-pool' })).toEqual([pooled.id]);
    expect(await ids({ labels: run, pool: null })).not.toContain(pooled.id);
    expect(await ids({ labels: run, pool: null })).toContain(loose.id);
    expect(await ids({ labels: run, daemonId: pooled.daemonId })).toContain(pooled.id);
    expect(await ids({ labels: run, daemonId: `${pooled.daemonId}-other` })).toEqual([]);
    const [listed] = (await fixture.provider.list({ labels: { ...run, tier: 'a' } })).sandboxes;
    expect(listed).toMatchObject({
      id: pooled.id,
      image: fixture.options.image,
      labels: { ...run, group: 'filters', tier: 'a' },
      pool: 'contract-pool',
      daemonId: pooled.daemonId,
      state: 'ready',
    });
  });

  it('lists a backend that answers completely: no part unreachable, each sandbox in its scope', async () => {
    const info = await fixture.create({ labels: { group: 'complete' } });
    const filtered = await fixture.provider.list({
      labels: { group: 'complete', 'contract-run': fixture.runId },
    });
    expect(filtered.unreachable).toEqual([]);
    expect(filtered.sandboxes.map((listed) => listed.id)).toEqual([info.id]);
    // The scope is what the daemon keeps an unseen sandbox by: the listing and get must agree.
    expect(filtered.sandboxes[0]?.scope).toBe((await fixture.provider.get(info.id)).scope);
    const everything = await fixture.provider.list();
    expect(everything.unreachable).toEqual([]);
    expect(everything.sandboxes.map((listed) => listed.id)).toContain(info.id);
  });

  // Registered only when the provider's author can make an unreachable backend: a case that
  // skips would fail a CI that forbids skips.
  const createUnreachable = fixture.options.createUnreachableProvider;
  if (createUnreachable !== undefined)
    it('names the part it could not see instead of throwing, when the backend does not answer', async () => {
      const unreachable = await createUnreachable!();
      try {
        const listing = await unreachable.list();
        expect(listing.sandboxes).toEqual([]);
        expect(listing.unreachable.length).toBeGreaterThan(0);
        for (const part of listing.unreachable) {
          expect(part.scope).toMatch(/\S/);
          expect(part.reason).toMatch(/\S/);
        }
        expect((await unreachable.health()).ok).toBe(false);
      } finally {
        await unreachable.close();
      }
    });

  it("keeps sandboxes apart: one does not see the other's files", async () => {
    const first = await fixture.create();
    const second = await fixture.create();
    await fixture.provider.writeFile(first.id, '/tmp/secret.txt', Buffer.from('only in the first'));
    const seen = await fixture.exec(second.id, { command: 'cat /tmp/secret.txt 2>&1; ls /tmp' });
    expect(seen.stdout).not.toContain('only in the first');
    expect(seen.stdout).toMatch(/No such file/);
  });

  const peer = fixture.options.networkPolicyPeer;
  if (peer === undefined)
    it('has no network but loopback by default', async () => {
      const info = await fixture.create();
      const result = await fixture.exec(info.id, { command: 'ls /sys/class/net' });
      expect(result.stdout.split(/\s+/).filter(Boolean)).toEqual(['lo']);
    });
  else
    it('has no network by default: a listener reachable from outside the policy is not reachable from it', async () => {
      const { host, port, banner } = await peer();
      const info = await fixture.create();
      const result = await fixture.exec(info.id, {
        command: `nc -w 3 ${host} ${port} </dev/null; echo "exit=$?"`,
        timeoutMs: 30_000,
      });
      expect(result.stdout).not.toContain(banner);
      expect(result.stdout).toMatch(/exit=[1-9]/);
    });

  // A provider whose limits take the whole sandbox (see `limitOverrun`) has these cases instead.
  const takesSandbox = fixture.options.capabilities?.limitOverrun === 'sandbox';
  if (takesSandbox)
    it('bounds a fork loop and a memory hog by the limits, and a sandbox they take is reported lost with why', async () => {
      expect(fixture.provider.capabilities.limitOverrun).toBe('sandbox');
      const forks = await fixture.create({ resources: { pidsLimit: 24 } });
      const loop = await fixture.exec(forks.id, {
        command: 'i=0; while [ $i -lt 300 ]; do sleep 1003 >/dev/null 2>&1 & i=$((i+1)); echo $i; done',
        timeoutMs: 30_000,
      });
      expect(Number(loop.stdout.trim().split('\n').pop() || 0)).toBeLessThan(300);
      expect(loop.sandboxLost === true ? loop.reason : loop.exitCode).toBeTruthy();
      const hog = await fixture.create({ resources: { memoryMiB: 48 } });
      const result = await fixture.exec(hog.id, { command: 'tail /dev/zero', timeoutMs: 60_000 });
      expect(result).toMatchObject({ status: 'oom', sandboxLost: true });
      expect(result.reason).toMatch(/memory/);
    });

  // Not registered when the author declares no per-sandbox pids limit (see `pidsLimit`).
  if (fixture.options.capabilities?.pidsLimit !== false && !takesSandbox)
    it('enforces the pids limit (a fork loop cannot pass it)', async (context) => {
      if (fixture.provider.capabilities.pidsLimit === false) return context.skip();
      const info = await fixture.create({ resources: { pidsLimit: 24 } });
      // Each started sleep prints its count; the shell dies at the first fork the limit refuses.
      const result = await fixture.exec(info.id, {
        command: 'i=0; while [ $i -lt 100 ]; do sleep 1003 >/dev/null 2>&1 & i=$((i+1)); echo $i; done',
        timeoutMs: 30_000,
      });
      const started = Number(result.stdout.trim().split('\n').pop());
      expect(started).toBeGreaterThan(5);
      expect(started).toBeLessThan(24);
      expect(result.exitCode).not.toBe(0);
      expect(result.stderr).toMatch(/fork|resource|unavailable/i);
    });

  // Not registered when the author declares no per-sandbox memory limit (see `memoryLimit`).
  if (fixture.options.capabilities?.memoryLimit !== false && !takesSandbox)
    it('reports oom when a command passes the memory limit, and the sandbox survives', async (context) => {
      if (fixture.provider.capabilities.memoryLimit === false) return context.skip();
      const info = await fixture.create({ resources: { memoryMiB: 48 } });
      const sessions = fixture.provider.capabilities.sessions ? [undefined, 'oom-session'] : [undefined];
      for (const session of sessions) {
        const result = await fixture.exec(info.id, {
          command: 'tail /dev/zero',
          timeoutMs: 60_000,
          ...(session ? { session } : {}),
        });
        expect(result.status).toBe('oom');
        const after = await fixture.exec(info.id, { argv: ['echo', 'alive'] });
        expect(after.stdout).toBe('alive\n');
      }
    });

  it('fails a create whose readiness probe never passes, leaving nothing behind', async () => {
    const marker = `failed-${Math.random().toString(36).slice(2, 8)}`;
    await expectGymError(
      fixture.create({
        labels: { case: marker },
        readiness: { command: 'exit 1', timeoutMs: 1500, intervalMs: 100 },
      }),
      'SANDBOX_START_FAILED',
    );
    expect(await fixture.provider.list({ labels: { case: marker } })).toEqual({
      sandboxes: [],
      unreachable: [],
    });
  });

  it('fails a create for a user the image does not have, leaving nothing behind', async () => {
    const marker = `nouser-${Math.random().toString(36).slice(2, 8)}`;
    await expectGymError(
      fixture.create({ labels: { case: marker }, user: 'no-such-user-here' }),
      'SANDBOX_START_FAILED',
      'VALIDATION_FAILED',
    );
    expect(await fixture.provider.list({ labels: { case: marker } })).toEqual({
      sandboxes: [],
      unreachable: [],
    });
  });

  it('names a missing image clearly and creates nothing', async () => {
    const marker = `noimage-${Math.random().toString(36).slice(2, 8)}`;
    const error = await expectGymError(
      fixture.create({ image: 'gym/does-not-exist:nope', labels: { case: marker } }),
      'IMAGE_NOT_FOUND',
    );
    expect(error.message).toContain('gym/does-not-exist:nope');
    expect(await fixture.provider.list({ labels: { case: marker } })).toEqual({
      sandboxes: [],
      unreachable: [],
    });
  });

  it('refuses what it cannot do with CAPABILITY_UNSUPPORTED', async () => {
    if (!fixture.provider.capabilities.gpus) {
      await expectGymError(fixture.create({ resources: { gpus: 1 } }), 'CAPABILITY_UNSUPPORTED');
    }
    if (!fixture.provider.capabilities.diskLimit) {
      await expectGymError(fixture.create({ resources: { diskMiB: 100 } }), 'CAPABILITY_UNSUPPORTED');
    }
    if (!fixture.provider.capabilities.sessions) {
      const info = await fixture.create();
      await expectGymError(fixture.exec(info.id, { argv: ['true'], session: 'x' }), 'CAPABILITY_UNSUPPORTED');
    }
    if (fixture.provider.capabilities.otherUsers === false) {
      const info = await fixture.create();
      await expectGymError(
        fixture.exec(info.id, { argv: ['id', '-u'], user: '65534' }),
        'CAPABILITY_UNSUPPORTED',
      );
    }
    expect(fixture.provider.capabilities.networkModes).toContain('none');
    if (!fixture.provider.capabilities.snapshot) {
      const info = await fixture.create();
      const refused =
        fixture.provider.snapshot === undefined
          ? Promise.reject(new GymError('CAPABILITY_UNSUPPORTED', 'no snapshot method'))
          : fixture.provider.snapshot(info.id, { image: `gym-snapshot/contract-${fixture.runId}:refused` });
      await expectGymError(refused, 'CAPABILITY_UNSUPPORTED');
    }
  });

  it('declares the capabilities its suite was registered for', () => {
    expect(fixture.provider.capabilities).toMatchObject(fixture.options.capabilities ?? {});
  });

  // Not registered when the author declares no snapshot: a skipped case fails a strict CI.
  if (fixture.options.capabilities?.snapshot !== false)
    it('snapshots a sandbox into an image that a new sandbox starts from, with its own labels only', async (context) => {
      const { provider } = fixture;
      if (!provider.capabilities.snapshot || provider.snapshot === undefined) return context.skip();
      const source = await fixture.create({ labels: { origin: 'snapshot-source' } });
      await provider.writeFile(source.id, '/srv/contract/state.txt', Buffer.from('kept'));
      const { image } = await provider.snapshot(source.id, {
        image: `gym-snapshot/contract-${fixture.runId}:${source.id}`,
      });
      try {
        const copy = await fixture.create({ image, labels: { role: 'snapshot-copy' } });
        const read = await fixture.exec(copy.id, { argv: ['cat', '/srv/contract/state.txt'] });
        expect(read).toMatchObject({ status: 'ok', stdout: 'kept' });
        const listed = (await provider.get(copy.id)).labels;
        expect(listed).toEqual({ role: 'snapshot-copy', 'contract-run': fixture.runId });
        const bySourceLabel = await provider.list({
          labels: { origin: 'snapshot-source', 'contract-run': fixture.runId },
        });
        expect(bySourceLabel.sandboxes.map((info) => info.id)).toEqual([source.id]);
        // The source is left as it was, and keeps running.
        expect((await fixture.exec(source.id, { argv: ['echo', 'alive'] })).stdout).toBe('alive\n');
        expect((await provider.get(source.id)).state).toBe('ready');
      } finally {
        await fixture.cleanup();
        await fixture.options.removeImage?.(image);
      }
    });
}
