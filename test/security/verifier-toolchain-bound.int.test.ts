/**
 * The toolchain check's cost must not grow with what the agent does outside the folders it
 * checks: before, it walked the container's whole overlay upper folder, so 300,000 empty files in
 * /tmp made one check take a minute, and a few million would make the verify time out into an
 * infra error, retried, which nothing an agent does may cause. Here the agent floods /tmp and the
 * check lists only the changes in the protected folders; and past a bound of entries there, the
 * listing stops (the rules grade that as tampered, see toolchain-rules.test.ts).
 */

import type Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../../core/clock.ts';
import { overlayChanges, overlayFolders } from '../../providers/docker/overlay-changes.ts';
import { DockerToolchainCheck } from '../../providers/docker/toolchain-view.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const image = skipReason === undefined ? await testImage(docker, 'debian-base') : 'missing';

/** Files the agent makes in /tmp: before the fix each was one entry the check listed. */
const FLOOD = 100_000;

describe.skipIf(skipReason !== undefined)('the toolchain check against a flood of files', () => {
  let container: Docker.Container;

  beforeAll(async () => {
    container = await docker.createContainer({
      Image: image,
      Entrypoint: ['sleep', '300'],
      Labels: { 'gym.test': 'toolchain-bound' },
      HostConfig: { NetworkMode: 'none' },
    });
    await container.start();
    const run = await container.exec({
      Cmd: [
        'python3',
        '-c',
        `import os\nos.makedirs('/tmp/flood')\nfor i in range(${FLOOD}): open(f'/tmp/flood/{i}', 'w').close()\nopen('/tmp/flood-done', 'w').close()`,
      ],
      AttachStdout: true,
      AttachStderr: true,
    });
    const stream = await run.start({});
    await new Promise((resolve) => stream.on('end', resolve).resume());
    expect((await run.inspect()).ExitCode).toBe(0);
  }, 120_000);

  afterAll(async () => {
    await container?.remove({ force: true }).catch(() => {});
  });

  it('lists none of the files outside the checked folders, and passes an untampered sandbox', {
    timeout: 120_000,
  }, async () => {
    const result = await new DockerToolchainCheck(docker, systemClock).check(
      container,
      'flood',
      [],
      ['/app'],
    );
    expect(result.tampered).toEqual([]);
    // Before the fix every file of the flood was listed (changedPaths > FLOOD).
    expect(result.changedPaths).toBeLessThan(1000);
  });

  it('stops listing a checked folder past the bound', { timeout: 120_000 }, async () => {
    const folders = await overlayFolders((await container.inspect()).GraphDriver);
    expect(folders).not.toBeNull();
    expect(await overlayChanges(folders!, { trees: ['/tmp'], folders: [], paths: [] }, 1000)).toBeNull();
    const done = await overlayChanges(folders!, { trees: [], folders: [], paths: ['/tmp/flood-done'] }, 10);
    expect(done).toEqual([{ path: '/tmp/flood-done', change: 'added', isDirectory: false }]);
  });
});
