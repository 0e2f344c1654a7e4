/**
 * The enroot provider against its agent, root of the sandbox's namespaces: it may mount its own
 * program over the tools the daemon's commands enter through, and stop (SIGSTOP) any process of
 * the sandbox, the daemon's kill script included.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { silentLogger } from '../../core/logger.ts';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import { EnrootProvider } from '../../providers/enroot/enroot-provider.ts';
import { BUSYBOX_REFERENCE } from '../fixtures/busybox-root.ts';
import { testContext } from '../fixtures/provider-context.ts';
import { enrootNode } from '../hpc/enroot-node.ts';
import { runnerOutOfReachCase, stopperCases } from './ssh-runtime-agent.ts';

const node = await enrootNode('127.0.0.31', 31000 + (process.pid % 1000));
const stateDirectory = await mkdtemp(join(tmpdir(), 'gym-enroot-agent-'));
const provider = new EnrootProvider(
  { hosts: [node.host] },
  testContext({ logger: silentLogger, stateDirectory }),
);
afterAll(async () => {
  await provider.close();
  await node.cleanup();
  await rm(stateDirectory, { recursive: true, force: true });
});

it('runs the next command inside the sandbox after the agent mounts over its busybox', async () => {
  const sandbox = await provider.create(
    parseOrThrow(SandboxSpecSchema, { image: BUSYBOX_REFERENCE }, 'spec'),
  );
  const exec = (command: string) =>
    provider.exec(sandbox.id, parseOrThrow(ExecRequestSchema, { command, timeoutMs: 30_000 }, 'exec'));
  const planted = await exec(
    [
      'cp /.gym-tools/busybox /busybox',
      // Whatever runs this notes where it runs: a pid that this /proc does not show is outside.
      `printf '#!/busybox sh\\nif [ -d /proc/$$ ]; then echo inside >> /ran; else echo "outside: $$ $0 $*" >> /escaped; fi\\nexec /busybox "$@"\\n' > /evil`,
      'chmod 755 /evil',
      '/busybox mount --bind /evil /.gym-tools/busybox && echo mounted',
    ].join(' && '),
  );
  expect(planted.stdout + planted.stderr).toContain('mounted');
  expect(planted.exitCode).toBe(0);
  expect((await exec('true')).exitCode).toBe(0);
  // Before the fix the daemon's own nsenter was the planted program, run in the host's pid and
  // network namespaces (a pid this /proc does not show) with the agent's code in it.
  const seen = await exec('/busybox cat /escaped 2>/dev/null; true');
  expect(seen).toMatchObject({ exitCode: 0, stdout: '' });
  // The planted program may run, as a program of the sandbox, inside it.
  expect((await exec('/busybox cat /ran')).exitCode).toBe(0);
  await provider.destroy(sandbox.id);
});

stopperCases(provider, 2345);
runnerOutOfReachCase(provider);

/**
 * ENROOT_ALLOW_SUPERUSER (enroot.conf, or the environment) lets root start a container without a
 * user namespace: root of the host with every capability, for the keeper and whatever enters it.
 * The provider sets it to no on every enroot call, so a root SSH user's sandbox is still a user
 * namespace (root mapped to root: allowed only with allowRootSshUser, see HostSchema).
 */
it('keeps a root SSH user in a user namespace when the host allows Enroot superuser containers', async () => {
  const superuser = new EnrootProvider(
    { hosts: [{ ...node.host, env: { ENROOT_ALLOW_SUPERUSER: 'yes' } }] },
    testContext({ logger: silentLogger, stateDirectory, namespace: 'superuser' }),
  );
  try {
    const sandbox = await superuser.create(
      parseOrThrow(SandboxSpecSchema, { image: BUSYBOX_REFERENCE }, 'spec'),
    );
    const result = await superuser.exec(
      sandbox.id,
      parseOrThrow(ExecRequestSchema, { command: 'cat /proc/self/uid_map' }, 'exec'),
    );
    // Before the fix the container was the host's user namespace (uid_map "0 0 4294967295") and
    // the daemon's commands could not even enter it (setns to one's own user namespace fails).
    expect(result).toMatchObject({ status: 'ok', exitCode: 0 });
    expect(result.stdout.trim().split(/\s+/)).toEqual(['0', '0', '1']);
    await superuser.destroy(sandbox.id);
  } finally {
    await superuser.close();
  }
}, 90_000);

/**
 * ENROOT_MOUNT_HOME (enroot.conf; many sites turn it on for pyxis users) makes Enroot's 10-home
 * hook bind the SSH user's home folder read-write into the container, at /root with `--root`: the
 * agent could then write the SSH user's ~/.bashrc or ~/.ssh/authorized_keys on the node and run
 * code there outside every namespace at the next login. The provider sets it to no on every call.
 */
it("does not give the agent the SSH user's home folder when the host's enroot mounts it", async () => {
  const withHome = new EnrootProvider(
    { hosts: [{ ...node.host, env: { ENROOT_MOUNT_HOME: 'yes' } }] },
    testContext({ logger: silentLogger, stateDirectory, namespace: 'mounthome' }),
  );
  try {
    const sandbox = await withHome.create(
      parseOrThrow(SandboxSpecSchema, { image: BUSYBOX_REFERENCE }, 'spec'),
    );
    const planted = await withHome.exec(
      sandbox.id,
      parseOrThrow(ExecRequestSchema, { command: 'echo "echo owned" >> /root/.bashrc' }, 'exec'),
    );
    expect(planted).toMatchObject({ status: 'ok', exitCode: 0 });
    // The node's SSH sessions have this home folder (test/fixtures/sshd.ts): nothing was written there.
    await expect(readFile(join(node.sshd.home, '.bashrc'), 'utf8')).rejects.toThrow(/ENOENT/);
    await withHome.destroy(sandbox.id);
  } finally {
    await withHome.close();
  }
}, 90_000);
