/**
 * A Pod makes its own archives (`tar -c` in the container), and the agent can replace that
 * `tar`: what it then sends for a download is any tar it likes. Through the test-only API
 * emulator (`test/k8s-emulator/`), the agent's `tar` prints a hand-made archive, and the daemon's
 * stream of it must end with ARCHIVE_UNSAFE before a client unpacks anything it names.
 */

import { KubeConfig } from '@kubernetes/client-node';
import { afterAll, describe, expect, it } from 'vitest';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import { dockerTestEnvironment, testImage } from '../../test/docker-available.ts';
import { testContext } from '../../test/fixtures/provider-context.ts';
import { KubernetesEmulator } from '../../test/k8s-emulator/emulator.ts';
import { type ContractEntry, entriesToTar } from '../contract/tar-helpers.ts';
import { KubernetesProvider } from './kubernetes-provider.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';
const emulator = skipReason === undefined ? await KubernetesEmulator.start(docker) : null;

afterAll(async () => {
  await emulator?.close();
});

const file = (name: string, text = 'planted'): ContractEntry => ({
  name,
  type: 'file',
  content: Buffer.from(text),
});

/** Archives the agent's `tar` prints for `readArchive(id, '/out')`. */
const HOSTILE: Record<string, ContractEntry[]> = {
  'an absolute name': [{ name: 'out/', type: 'directory' }, file('/root/.ssh/authorized_keys')],
  'a climbing name': [{ name: 'out/', type: 'directory' }, file('out/../../home/user/.bashrc')],
  'a name outside the directory read': [{ name: 'out/', type: 'directory' }, file('etc/cron.d/x')],
  'an entry through a link of its own': [
    { name: 'out/', type: 'directory' },
    { name: 'out/keys', type: 'symlink', linkname: '/root/.ssh' },
    file('out/keys/authorized_keys'),
  ],
  'a hard link to a host file': [
    { name: 'out/', type: 'directory' },
    { name: 'out/shadow', type: 'link', linkname: '/etc/shadow' },
  ],
};

describe.skipIf(skipReason !== undefined)(
  "kubernetes provider: a download made by the agent's own tar",
  () => {
    it.each(Object.keys(HOSTILE))('ends the stream on %s', async (attack) => {
      const kubeConfig = new KubeConfig();
      kubeConfig.loadFromString(emulator!.kubeconfig('gym-test'));
      const provider = new KubernetesProvider(kubeConfig, testContext());
      const info = await provider.create(parseOrThrow(SandboxSpecSchema, { image: busybox }, 'spec'));
      try {
        const archive = Buffer.concat(await entriesToTar(HOSTILE[attack]!).toArray());
        await provider.writeFile(info.id, '/tmp/made.tar', archive);
        // The agent's `tar`: whatever it is asked, it prints the archive it made. busybox's `sh`
        // runs its own applet for `tar`, so here the agent replaces `sh` (in an image with GNU
        // tar, replacing /usr/bin/tar would do).
        const replaced = await provider.exec(
          info.id,
          parseOrThrow(
            ExecRequestSchema,
            {
              command:
                'mkdir -p /out && printf "#!/bin/busybox sh\\ncat /tmp/made.tar\\n" > /tmp/sh && chmod +x /tmp/sh && mv /tmp/sh /bin/sh',
            },
            'exec',
          ),
        );
        expect(replaced.exitCode).toBe(0);
        const read = await provider.readArchive(info.id, '/out');
        const error = await read.toArray().then(
          () => null,
          (caught: unknown) => caught,
        );
        expect((error as { code?: string } | null)?.code, String(error)).toBe('ARCHIVE_UNSAFE');
      } finally {
        await provider.destroy(info.id);
        await provider.close();
      }
    });
  },
);
