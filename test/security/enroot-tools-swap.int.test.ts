/**
 * The enroot provider against an agent that replaces the tools its commands enter through: root
 * in the container's user namespace may mount over /.gym-tools/busybox in its mount namespace.
 * A command the daemon runs next must still run wholly inside the sandbox's namespaces.
 */
import { mkdtemp, rm } from 'node:fs/promises';
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

const node = await enrootNode('127.0.0.31', 31000 + (process.pid % 1000));
const stateDirectory = await mkdtemp(join(tmpdir(), 'gym-enroot-swap-'));
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
