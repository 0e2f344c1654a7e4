/**
 * The apptainer provider against its agent, which runs as the same user as the commands the
 * daemon starts in its instance, and so may stop (SIGSTOP) any of them, the kill script included.
 */
import { afterAll, expect, it } from 'vitest';
import { silentLogger } from '../../core/logger.ts';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import { ApptainerProvider } from '../../providers/apptainer/apptainer-provider.ts';
import { BUSYBOX_REFERENCE } from '../fixtures/busybox-root.ts';
import { testContext } from '../fixtures/provider-context.ts';
import { computeNode } from '../hpc/node.ts';
import { runnerOutOfReachCase, stopperCases } from './ssh-runtime-agent.ts';

const node = await computeNode('127.0.0.33', 31000 + (process.pid % 1000));
const provider = new ApptainerProvider({ hosts: [node.host] }, testContext({ logger: silentLogger }));
afterAll(async () => {
  await provider.close();
  await node.cleanup();
});

stopperCases(provider, 2346);
runnerOutOfReachCase(provider);

/**
 * What the agent may do as root on the node (the SSH user here is root): nothing that takes a
 * capability. Apptainer's default for root ("root default capabilities = full") gave every
 * command in the instance all of them (mount, raw devices, module loading, host files through
 * binds), until the provider passed `--no-privs` at the instance's start and on every exec into it.
 */
it('gives the agent no capability as root: one-shot, in a session, and as another user', async () => {
  const sandbox = await provider.create(
    parseOrThrow(SandboxSpecSchema, { image: BUSYBOX_REFERENCE }, 'spec'),
  );
  const probe = [
    'id -u',
    'grep -E "^(CapEff|CapPrm|NoNewPrivs):" /proc/self/status',
    'mkdir -p /tmp/m && mount -t tmpfs attack /tmp/m 2>/dev/null && echo MOUNTED',
    'true',
  ].join('; ');
  const exec = (extra: Record<string, unknown> = {}) =>
    provider.exec(sandbox.id, parseOrThrow(ExecRequestSchema, { command: probe, ...extra }, 'exec'));
  const unprivileged = (uid: number) =>
    [`${uid}`, 'CapPrm:\t0000000000000000', 'CapEff:\t0000000000000000', 'NoNewPrivs:\t1', ''].join('\n');
  // Before the fix: every capability the node has (CapEff 000001fffeffffff here), NoNewPrivs 0, MOUNTED.
  expect(await exec()).toMatchObject({ status: 'ok', stdout: unprivileged(0) });
  expect(await exec({ session: 'agent' })).toMatchObject({ status: 'ok', stdout: unprivileged(0) });
  expect(await exec({ user: '1000:1000' })).toMatchObject({ status: 'ok', stdout: unprivileged(1000) });
  expect(await exec({ session: 'other', user: '1000:1000' })).toMatchObject({
    status: 'ok',
    stdout: unprivileged(1000),
  });
  // The daemon's own file transfers run without privileges too, and still work.
  await provider.writeFile(sandbox.id, '/tmp/note', Buffer.from('kept'));
  const read = await provider.readFile(sandbox.id, '/tmp/note');
  const chunks: Buffer[] = [];
  for await (const chunk of read) chunks.push(chunk as Buffer);
  expect(Buffer.concat(chunks).toString()).toBe('kept');
  await provider.destroy(sandbox.id);
}, 90_000);

/**
 * Without capabilities, uid 0 of the node still owns what root owns there, the host's /proc/sys
 * included (kernel.core_pattern names a program the kernel runs as full root): a root SSH user is
 * refused unless the host says `allowRootSshUser: true` (the other tests' node does).
 */
it('makes no sandbox on a host whose SSH user is root unless allowRootSshUser is set, and says why', async () => {
  const refusing = new ApptainerProvider(
    { hosts: [{ ...node.host, allowRootSshUser: false }] },
    testContext({ logger: silentLogger, namespace: 'refused' }),
  );
  try {
    const health = await refusing.health();
    expect(health.ok).toBe(false);
    expect(health.message).toMatch(/SSH user is root.*allowRootSshUser/);
    await expect(
      refusing.create(parseOrThrow(SandboxSpecSchema, { image: BUSYBOX_REFERENCE }, 'spec')),
    ).rejects.toMatchObject({
      code: 'FORBIDDEN_BY_CONFIG',
      message: expect.stringContaining('allowRootSshUser: true'),
    });
    // Nothing was started for it.
    expect((await refusing.list()).sandboxes).toEqual([]);
    expect((await provider.health()).ok).toBe(true);
  } finally {
    await refusing.close();
  }
}, 60_000);
