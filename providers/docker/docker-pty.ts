/**
 * A terminal in a Docker container: one exec with `Tty` (the engine makes the PTY and gives the
 * program it as its controlling terminal), its hijacked stream carrying the terminal both ways,
 * and the engine's exec resize for the size. Without a terminal (`tty: false`) the same exec
 * without `Tty`, its stream split into stdout and stderr frames.
 */
import type { Duplex } from 'node:stream';
import type Docker from 'dockerode';
import type { PtyChannel, PtyEnd, PtyOpenOptions, PtyOpenRequest } from '../shared/pty-channel.ts';
import { DockerStreamDemuxer } from './demux.ts';
import { wrapDockerError } from './docker-errors.ts';

export async function openDockerPty(
  container: Docker.Container,
  sandboxId: string,
  request: PtyOpenRequest,
  options: PtyOpenOptions,
): Promise<PtyChannel> {
  let exec: Docker.Exec;
  let stream: Duplex;
  try {
    exec = await container.exec({
      Cmd: request.argv,
      Env: Object.entries(request.env).map(([name, value]) => `${name}=${value}`),
      AttachStdin: true,
      AttachStdout: true,
      AttachStderr: true,
      Tty: request.tty,
      // The size from the start (API 1.42+); an older engine ignores it and gets the resize below.
      ...(request.tty ? { ConsoleSize: [request.rows, request.cols] } : {}),
      ...(request.cwd === undefined ? {} : { WorkingDir: request.cwd }),
      ...(request.user === undefined ? {} : { User: request.user }),
    } as Docker.ExecCreateOptions);
    stream = (await exec.start({ hijack: true, stdin: true, Tty: request.tty })) as Duplex;
  } catch (error) {
    throw wrapDockerError(error, { operation: 'open a terminal', sandboxId });
  }
  if (request.tty) {
    stream.on('data', (chunk: Buffer) => options.onOutput('stdout', chunk));
  } else {
    const demuxer = new DockerStreamDemuxer((name, payload) => options.onOutput(name, payload));
    stream.on('data', (chunk: Buffer) => demuxer.push(chunk));
  }
  stream.on('error', () => {});
  const resize = async (rows: number, cols: number) => {
    if (!request.tty) return;
    try {
      await exec.resize({ h: rows, w: cols });
    } catch (error) {
      throw wrapDockerError(error, { operation: 'resize a terminal', sandboxId });
    }
  };
  const ended = new Promise<PtyEnd>((resolve) => {
    let settled = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      exec.inspect().then(
        (state) =>
          resolve(
            state.Running
              ? { exitCode: null, lost: 'the terminal stream ended while its program ran' }
              : { exitCode: state.ExitCode ?? null },
          ),
        (error: unknown) => resolve({ exitCode: null, lost: `the sandbox is gone (${String(error)})` }),
      );
    };
    stream.once('end', finish);
    stream.once('close', finish);
  });
  // After `ended` listens: a program that ends at once must not end the stream unheard.
  if (request.tty) await resize(request.rows, request.cols).catch(() => {});
  return {
    write: (data) => {
      if (!stream.destroyed) stream.write(data);
    },
    resize,
    ended,
    close: () => stream.destroy(),
  };
}
