/**
 * The agent against an archive snapshot (on Docker, Debian: its `find` is whatever comes first on
 * PATH, so the agent can replace it). Its find lies that a link it planted is a directory, so the
 * recorded directory modes name the link; replay must not set a mode through it.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { dockerTestEnvironment, testImage } from '../../test/docker-available.ts';
import { testContext } from '../../test/fixtures/provider-context.ts';
import { DockerProvider } from '../docker/docker-provider.ts';
import { captureArchiveSnapshot, replayArchiveSnapshot } from './archive-snapshot.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const directory = await mkdtemp(join(tmpdir(), 'gym-archive-adversary-'));
const provider = new DockerProvider(docker, testContext());
const created: string[] = [];
afterAll(async () => {
  await Promise.all(created.map((id) => provider.destroy(id)));
  await provider.close();
  await rm(directory, { recursive: true, force: true });
});

/** The agent's find: the real listing, with /srv/x (a link) passed off as a folder holding an old entry. */
const LYING_FIND = `#!/bin/sh
case "$*" in
  *-newerct*) exec /usr/bin/find "$@" ;;
  *"-type l"*) /usr/bin/find "$@" | tr '\\0' '\\n' | grep -v '^/srv/x$' | tr '\\n' '\\0' ;;
  *"-type d"*) /usr/bin/find "$@"; printf '/srv/x\\0' ;;
  *) /usr/bin/find "$@"; printf '/srv/x/old\\0' ;;
esac
`;

it.skipIf(skipReason !== undefined)(
  'sets no directory mode through a link the listing passed off as a directory',
  async () => {
    const spec = SandboxSpecSchema.parse({ image: await testImage(docker, 'debian-base'), ttlSeconds: 600 });
    const run = (id: string, command: string) => provider.exec(id, ExecRequestSchema.parse({ command }));
    const parent = await provider.create(spec);
    created.push(parent.id);
    const setup = await run(
      parent.id,
      `mkdir -p /srv /usr/local/bin && echo f > /srv/file && echo secret > /etc/target && chmod 600 /etc/target && ln -s /etc/target /srv/x && cat > /usr/local/bin/find <<'EOF'\n${LYING_FIND}EOF\nchmod 755 /usr/local/bin/find`,
    );
    expect(setup.exitCode, setup.stderr).toBe(0);
    const manifest = await captureArchiveSnapshot(provider, parent.id, {
      file: join(directory, 'snapshot.tar'),
      maxBytes: 16 * 1024 * 1024,
      createdAtMs: Date.parse(parent.createdAt),
    });
    // The lie worked: the link is among the directories whose mode replay sets.
    const modes = (manifest.details as { directoryModes: Array<[string, string]> }).directoryModes;
    expect(modes.map(([path]) => path)).toContain('/srv/x');
    const child = await provider.create(spec);
    created.push(child.id);
    await replayArchiveSnapshot(provider, child.id, manifest);
    const seen = await run(child.id, 'readlink /srv/x; stat -c %a /etc/target');
    expect(seen.stdout).toBe('/etc/target\n600\n');
  },
);
