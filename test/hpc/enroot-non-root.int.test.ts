/**
 * The enroot provider logged in as a user that is not root, the usual case on a cluster (user
 * gym-hpc, made by scripts/setup.sh), over SSH and in a Slurm allocation: root in the sandbox is
 * that user on the host (the container's user namespace maps uid 0 to it), and commands, the
 * keeper and its removal all work with that user's rights only.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../core/logger.ts';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import { EnrootProvider } from '../../providers/enroot/enroot-provider.ts';
import { BUSYBOX_REFERENCE } from '../fixtures/busybox-root.ts';
import { testContext } from '../fixtures/provider-context.ts';
import { enrootNode } from './enroot-node.ts';
import { requireSlurm, SLURM_NODE, SLURM_NODE_ADDRESS, SLURM_PARTITION } from './slurm.ts';

const USER = 'gym-hpc';
const found = spawnSync('id', ['-u', USER], { encoding: 'utf8' });
// Fails loudly (never skips) without the user.
if (found.status !== 0) throw new Error(`no user ${USER} on this machine; run scripts/setup.sh`);
const uid = found.stdout.trim();
requireSlurm();

const spec = () => parseOrThrow(SandboxSpecSchema, { image: BUSYBOX_REFERENCE }, 'spec');
const run = (provider: EnrootProvider, id: string, command: string) =>
  provider.exec(id, parseOrThrow(ExecRequestSchema, { command, timeoutMs: 30_000 }, 'exec'));

/** Creates a sandbox, shows root in it is the user on the host, then destroys it and finds its container gone. */
async function asTheUser(provider: EnrootProvider, listed: () => string[]): Promise<void> {
  const sandbox = await provider.create(spec());
  try {
    const inside = await run(
      provider,
      sandbox.id,
      'id -u; cat /proc/self/uid_map; echo hi > /note; cat /note',
    );
    expect(inside.status).toBe('ok');
    const [insideUid, map, note] = inside.stdout.trim().split('\n');
    expect(insideUid).toBe('0');
    expect(map?.trim().split(/\s+/)).toEqual(['0', uid, '1']);
    expect(note).toBe('hi');
    expect(listed()).toHaveLength(1);
  } finally {
    await provider.destroy(sandbox.id);
  }
  expect(listed()).toEqual([]);
}

describe('enroot as a user that is not root', () => {
  const stateDirectory = mkdtemp(join(tmpdir(), 'gym-enroot-user-'));
  afterAll(async () => rm(await stateDirectory, { recursive: true, force: true }));

  it('over SSH', async () => {
    const node = await enrootNode('127.0.0.36', 36000 + (process.pid % 1000), { user: USER });
    const provider = new EnrootProvider(
      { hosts: [node.host] },
      testContext({ logger: silentLogger, stateDirectory: await stateDirectory }),
    );
    try {
      await asTheUser(provider, node.listed);
    } finally {
      await provider.close();
      await node.cleanup();
    }
  });

  describe('in a Slurm allocation', () => {
    const jobName = `gym-enroot-user-${process.pid}`;
    let node: Awaited<ReturnType<typeof enrootNode>>;
    beforeAll(async () => {
      node = await enrootNode(SLURM_NODE_ADDRESS, 33000 + (process.pid % 1000), { user: USER });
    });
    afterAll(async () => {
      spawnSync('scancel', [`--user=${USER}`, `--name=${jobName}`], { stdio: 'ignore' });
      await node?.cleanup();
    });

    it('holds the allocation as that user, from a login host', async () => {
      const { name: _name, host: _host, ...nodeSettings } = node.host;
      // The Slurm commands too run as the user, on a login host (the node's own sshd here).
      const login = {
        host: SLURM_NODE_ADDRESS,
        port: node.host.port,
        username: USER,
        privateKeyPath: node.host.privateKeyPath,
        knownHostsPath: node.host.knownHostsPath,
      };
      const provider = new EnrootProvider(
        {
          slurm: {
            login,
            partition: SLURM_PARTITION,
            timeLimit: '10',
            jobName,
            pollIntervalMs: 200,
            node: nodeSettings,
          },
          keepaliveIntervalMs: 1000,
        },
        testContext({ logger: silentLogger, namespace: 'enrootuser', stateDirectory: await stateDirectory }),
      );
      try {
        await asTheUser(provider, node.listed);
        const held = provider.slurm!.allocation.current!;
        expect(held).not.toBeNull();
        const owner = execFileSync('squeue', ['-h', `--jobs=${held.jobId}`, '-o', '%u'], {
          encoding: 'utf8',
        });
        expect(owner.trim()).toBe(USER);
        expect((await provider.list({})).sandboxes.every((sandbox) => sandbox.scope === SLURM_NODE)).toBe(
          true,
        );
      } finally {
        await provider.close();
      }
    });
  });
});
