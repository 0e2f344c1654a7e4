/**
 * Bakes a repository into an image: a container from a base image, the files written in, a
 * command run (the base commit), and the container committed. Used for task images (one per
 * swe-mini task); an image that already exists under its content-hash tag is not rebuilt.
 */

import { PassThrough, type Readable } from 'node:stream';
import type Docker from 'dockerode';
import * as tar from 'tar-stream';
import { GymError } from '../core/errors.ts';

export interface RepositoryImageSpec {
  baseImage: string;
  reference: string;
  workdir: string;
  files: Record<string, string>;
  /** Run in `workdir` after the files are written (e.g. `git init && git commit`). */
  command: string;
  env: Record<string, string>;
}

function filesTar(files: Record<string, string>): Readable {
  const pack = tar.pack();
  for (const [path, content] of Object.entries(files)) pack.entry({ name: path, mode: 0o644 }, content);
  pack.finalize();
  return pack as unknown as Readable;
}

async function run(
  docker: Docker,
  container: Docker.Container,
  command: string,
  workdir: string,
  env: Record<string, string>,
): Promise<string> {
  const exec = await container.exec({
    Cmd: ['sh', '-c', command],
    WorkingDir: workdir,
    Env: Object.entries(env).map(([key, value]) => `${key}=${value}`),
    AttachStdout: true,
    AttachStderr: true,
  });
  const stream = (await exec.start({ hijack: true, stdin: false })) as unknown as Readable;
  const output = new PassThrough();
  const chunks: Buffer[] = [];
  output.on('data', (chunk: Buffer) => chunks.push(chunk));
  docker.modem.demuxStream(stream, output, output);
  await new Promise<void>((resolve) => {
    stream.once('end', resolve);
    stream.once('close', resolve);
  });
  const { ExitCode } = await exec.inspect();
  const text = Buffer.concat(chunks).toString('utf8');
  if (ExitCode !== 0)
    throw new GymError('INTERNAL', `building the repository image failed (${command}): ${text.slice(-2000)}`);
  return text;
}

export async function buildRepositoryImage(
  docker: Docker,
  spec: RepositoryImageSpec,
): Promise<{ reference: string; built: boolean }> {
  const exists = await docker
    .getImage(spec.reference)
    .inspect()
    .then(
      () => true,
      () => false,
    );
  if (exists) return { reference: spec.reference, built: false };
  const container = await docker.createContainer({
    Image: spec.baseImage,
    Entrypoint: ['sh', '-c', 'sleep 600'],
    Cmd: [],
    WorkingDir: spec.workdir,
    HostConfig: { NetworkMode: 'none', LogConfig: { Type: 'none', Config: {} } },
  });
  try {
    await container.start();
    await run(docker, container, `mkdir -p ${spec.workdir}`, '/', {});
    await container.putArchive(filesTar(spec.files), { path: spec.workdir });
    await run(docker, container, spec.command, spec.workdir, spec.env);
    const separator = spec.reference.lastIndexOf(':');
    await container.commit({
      repo: spec.reference.slice(0, separator),
      tag: spec.reference.slice(separator + 1),
    });
  } finally {
    await container.remove({ force: true }).catch(() => {});
  }
  return { reference: spec.reference, built: true };
}
