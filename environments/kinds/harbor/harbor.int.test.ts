import { randomBytes } from 'node:crypto';
import { chmod, cp, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../../client/client.ts';
import { silentLogger } from '../../../core/logger.ts';
import { startTestDaemon, type TestDaemon } from '../../../test/daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../../../test/docker-available.ts';
import { runTestEval } from '../../../test/eval-run.ts';
import { loadEnvironment, readRows } from '../../environment.ts';
import { gymFields } from '../../runner/rollout-line.ts';
import { buildDockerfileImage, buildHarborImages } from './images.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const EXAMPLES = join(import.meta.dirname, '../../harbor/tasks');

describe.skipIf(skipReason !== undefined)('Harbor task directories against real Docker', () => {
  let daemon: TestDaemon;
  let client: GymClient;
  let directory = '';
  const madeImages: string[] = [];

  beforeAll(async () => {
    await testImage(docker, 'busybox');
    await testImage(docker, 'debian-base');
    directory = await mkdtemp(join(tmpdir(), 'gym-harbor-'));
    daemon = await startTestDaemon(
      { namespace: `harbortest-${randomBytes(3).toString('hex')}` },
      { listen: true },
    );
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
  }, 300_000);

  afterAll(async () => {
    await daemon?.cleanup();
    for (const image of madeImages)
      await docker
        .getImage(image)
        .remove({ force: true })
        .catch(() => {});
    await rm(directory, { recursive: true, force: true });
  });

  async function run(path: string, harnessName: string) {
    const environment = await loadEnvironment('harbor');
    const rows = await readRows(path);
    await buildHarborImages(client, rows, silentLogger);
    return { rows, ...(await runTestEval({ client, environment, rows, harnessName, directory })) };
  }

  it('scores every example task 1 with the oracle and 0 with noop, from images built here', async () => {
    const oracle = await run(EXAMPLES, 'oracle');
    expect(oracle.rows.map((row) => row.id)).toEqual(['gym/hello-file', 'gym/sales-total']);
    expect(oracle.rollouts.map((row) => [row.id, gymFields(row).outcome, row.reward])).toEqual([
      ['gym/hello-file', 'reward', 1],
      ['gym/sales-total', 'reward', 1],
    ]);
    // reward.json's every metric is kept; its `reward` is the rollout's.
    expect(gymFields(oracle.rollouts[1]!).verifier).toMatchObject({
      rewards: { reward: 1, correct_value: 1, two_decimals: 1 },
    });
    const noop = await run(EXAMPLES, 'noop');
    expect(noop.rollouts.map((row) => [row.id, gymFields(row).outcome, row.reward])).toEqual([
      ['gym/hello-file', 'reward', 0],
      ['gym/sales-total', 'reward', 0],
    ]);
    expect(noop.failures).toEqual([]);
  }, 300_000);

  it('makes a test that writes no reward file a verifier error, in the failures file and not among the rewards', async () => {
    const task = join(directory, 'no-reward');
    await cp(join(EXAMPLES, 'hello-file'), task, { recursive: true });
    await writeFile(
      join(task, 'tests/test.sh'),
      '#!/bin/sh\necho "checked, but forgot to write the reward"\n',
    );
    await chmod(join(task, 'tests/test.sh'), 0o755);
    // The image's tag hashes the build context: a context of its own gives an image of its own.
    await writeFile(
      join(task, 'environment/README.txt'),
      `only this test: ${randomBytes(4).toString('hex')}\n`,
    );
    const [row] = await readRows(task);
    madeImages.push(String(row!.image));
    const { summary, rollouts, failures } = await run(task, 'oracle');
    expect(rollouts).toEqual([]);
    expect(failures).toHaveLength(1);
    expect(failures[0]).toMatchObject({
      _gym: { outcome: 'verifier_error' },
      _ng_failure_class: 'verifier_error',
      _ng_failure_terminal: true,
    });
    expect(String((gymFields(failures[0]!).verifier as { reason: string }).reason)).toMatch(
      /wrote no \/logs\/verifier\/reward\.json or \/logs\/verifier\/reward\.txt/,
    );
    expect(summary.failures).toBe(1);
    expect(summary.metrics['mean/reward']).toBeUndefined();
  }, 300_000);

  it("runs a task on a prebuilt docker_image, from that image's working directory", async () => {
    const reference = `gym/harbor-prebuilt:${randomBytes(4).toString('hex')}`;
    madeImages.push(reference);
    const empty = join(directory, 'empty-context');
    await mkdir(empty, { recursive: true });
    await buildDockerfileImage(
      client,
      { dockerfile: 'FROM gym/busybox:latest\nWORKDIR /work\n', contextDirectory: empty, reference },
      silentLogger,
    );
    const task = join(directory, 'prebuilt');
    await mkdir(join(task, 'tests'), { recursive: true });
    await writeFile(join(task, 'task.toml'), `[environment]\ndocker_image = "${reference}"\n`);
    await writeFile(join(task, 'instruction.md'), 'Nothing to do.\n');
    await writeFile(
      join(task, 'tests/test.sh'),
      '#!/bin/sh\nif [ "$(pwd)" = /work ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n',
    );
    const { rollouts } = await run(task, 'noop');
    expect(rollouts.map((row) => [row.id, row.workdir, row.reward])).toEqual([['prebuilt', '/work', 1]]);
  }, 300_000);

  it('builds the Dockerfile subset into an image with its settings, and names what it cannot build', async () => {
    const context = join(directory, 'context');
    await mkdir(join(context, 'conf'), { recursive: true });
    await writeFile(join(context, 'conf/app.ini'), 'mode=test\n');
    await writeFile(join(context, 'tool.sh'), '#!/bin/sh\necho tool\n');
    const reference = `gym/harbor-buildtest:${randomBytes(4).toString('hex')}`;
    madeImages.push(reference);
    const build = (dockerfile: string, tag = reference) =>
      buildDockerfileImage(client, { dockerfile, contextDirectory: context, reference: tag }, silentLogger);
    const result = await build(
      [
        'FROM gym/busybox:latest',
        'ARG SUFFIX=one',
        'ENV APP_HOME=/srv/app MODE="two words"',
        'WORKDIR $APP_HOME',
        'COPY conf ./conf/',
        'COPY --chmod=755 tool.sh /usr/local/bin/tool',
        'RUN echo "built-$SUFFIX" > built.txt',
        'USER 1234',
        'RUN id -u > /tmp/uid',
      ].join('\n'),
    );
    expect(result.built).toBe(true);
    const image = await docker.getImage(reference).inspect();
    expect(image.Config.WorkingDir).toBe('/srv/app');
    expect(image.Config.User).toBe('1234');
    expect(image.Config.Env).toEqual(expect.arrayContaining(['APP_HOME=/srv/app', 'MODE=two words']));
    expect(image.Config.Entrypoint ?? []).toEqual([]);
    const container = await docker.createContainer({
      Image: reference,
      Cmd: [
        'sh',
        '-c',
        'cat conf/app.ini built.txt /tmp/uid && tool && stat -c %a /usr/local/bin/tool && pwd',
      ],
      HostConfig: { NetworkMode: 'none' },
    });
    try {
      await container.start();
      await container.wait();
      const logs = (await container.logs({ stdout: true, stderr: true })).toString('utf8');
      expect(logs.replace(/[^\x20-\x7e\n]/g, '')).toMatch(
        /mode=test\n.*built-one\n.*1234\n.*tool\n.*755\n.*\/srv\/app/s,
      );
    } finally {
      await container.remove({ force: true });
    }
    // The second time, the image is there: nothing is built.
    expect((await build('FROM gym/busybox:latest\n')).built).toBe(false);
    await expect(build('FROM ubuntu:24.04\nRUN true\n', `${reference}-missing`)).rejects.toThrow(
      /the base image "ubuntu:24.04" .* not on this machine, and no registry is reachable.*gym\/debian-base:latest/,
    );
    await expect(build('FROM gym/busybox:latest\nRUN exit 3\n', `${reference}-failing`)).rejects.toThrow(
      /Dockerfile line 2: RUN .*failed with exit 3/,
    );
    await expect(
      build('FROM gym/busybox:latest\nCOPY absent.txt /x\n', `${reference}-absent`),
    ).rejects.toThrow(/line 2: COPY absent.txt: no such file/);
  }, 300_000);
});
