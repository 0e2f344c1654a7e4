/**
 * A Docker sandbox's declared ports (`openPortRelay`): the static relay copied into the container
 * and run in connect mode through one attached exec, its stdin and stdout the relay's frames
 * (`../shared/port-relay.ts`). Works under every runtime the provider runs (runc, gVisor) and
 * every network mode, `none` included: nothing outside the container listens.
 *
 * The binary goes to a fresh root-owned path in `/tmp` for each relay, written by the engine's
 * archive API and run as root: a sandbox user other than root cannot replace it (the sticky
 * `/tmp` keeps root's file), and a root agent that replaces it gains nothing it lacked, since
 * the daemon's side holds any relay to the protocol and it reaches only that sandbox's loopback.
 */
import { randomBytes } from 'node:crypto';
import type { Duplex } from 'node:stream';
import type Docker from 'dockerode';
import { GymError } from '../../core/errors.ts';
import { loadRelayBinary } from '../shared/gateway-relay.ts';
import { PortRelay } from '../shared/port-relay.ts';
import { DockerStreamDemuxer } from './demux.ts';
import { streamDone } from './one-shot-exec.ts';

export interface DockerPortRelayOptions {
  /** The static relay on this host (`.tools/gym-relay`, built by scripts/setup.sh). */
  relayHelperPath: string;
  /** Writes a file into the container (the provider's archive-API writer). */
  writeFile(path: string, content: Uint8Array, mode: number): Promise<void>;
}

export async function startDockerPortRelay(
  container: Docker.Container,
  sandboxId: string,
  options: DockerPortRelayOptions,
): Promise<PortRelay> {
  const binary = await loadRelayBinary(options.relayHelperPath);
  if (binary === null)
    throw new GymError(
      'CAPABILITY_UNSUPPORTED',
      `ports need the relay binary at ${options.relayHelperPath}, which scripts/setup.sh builds`,
      { details: { capability: 'ports', relayHelperPath: options.relayHelperPath } },
    );
  const path = `/tmp/.gym-port-relay-${randomBytes(6).toString('hex')}`;
  await options.writeFile(path, binary, 0o755);
  return PortRelay.start(
    async (io) => {
      const exec = await container.exec({
        Cmd: [path, 'connect'],
        User: '0',
        AttachStdin: true,
        AttachStdout: true,
        AttachStderr: true,
        Tty: false,
      });
      const stream = (await exec.start({ hijack: true, stdin: true })) as Duplex;
      const demuxer = new DockerStreamDemuxer((name, payload) => {
        if (name === 'stdout') io.onStdout(payload);
      });
      stream.on('data', (chunk: Buffer) => demuxer.push(chunk));
      stream.on('error', () => {});
      io.stdin.pipe(stream);
      return {
        done: streamDone(stream),
        pause: () => stream.pause(),
        resume: () => stream.resume(),
        abandon: () => {
          io.stdin.unpipe(stream);
          stream.destroy();
        },
      };
    },
    { label: `sandbox ${sandboxId}`, details: { sandboxId } },
  );
}
