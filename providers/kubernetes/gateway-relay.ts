/**
 * Gateway reach for a daemon outside the cluster: the relay (`../shared/gateway-relay.ts`)
 * carried over one pods/exec stream.
 *
 * The provider copies the static relay (`../shared/relay-helper/gym-relay.c`, built by scripts/setup.sh
 * into `.tools/gym-relay`) into the Pod and runs it as one long-lived exec, tagged for the kill
 * script; the relay listens on the Pod's loopback. `/tmp` must be writable.
 */
import { randomBytes } from 'node:crypto';
import type { KubeConfig } from '@kubernetes/client-node';
import { GymError } from '../../core/errors.ts';
import { GatewayRelay, loadRelayBinary } from '../shared/gateway-relay.ts';
import { PortRelay } from '../shared/port-relay.ts';
import { type PodTarget, startPodExec } from './pod-exec.ts';

export { DEFAULT_RELAY_HELPER_PATH, loadRelayBinary, relayStatsOf } from '../shared/gateway-relay.ts';

/** Where the relay is copied in the Pod. */
export const RELAY_PATH_IN_POD = '/tmp/.gym-relay';

export type PodRelay = GatewayRelay;

export const PodRelay = {
  /**
   * Starts the relay (already copied to `RELAY_PATH_IN_POD`) through `wrapper` (which tags it for
   * the kill script), on `port` (0: any free one), and resolves once it listens.
   */
  start(
    kubeConfig: KubeConfig,
    target: PodTarget,
    wrapper: string[],
    port: number,
    socketPath: string,
    maxConnections: number,
    stats: { refusedTotal: number },
  ): Promise<GatewayRelay> {
    return GatewayRelay.start(
      (io) =>
        startPodExec(kubeConfig, target, [...wrapper, RELAY_PATH_IN_POD, String(port)], {
          stdin: io.stdin,
          // Never ended, only dropped by close(): works on v4 too.
          keepStdinOpen: true,
          onStdout: io.onStdout,
        }),
      { label: target.pod, details: { pod: target.pod, port } },
      socketPath,
      maxConnections,
      stats,
    );
  },
};

/** A relay in a Pod, with the exec id that tags its process for the kill script. */
export interface TaggedPodRelay {
  readonly relay: PodRelay;
  readonly execId: string;
  readonly isOpen: boolean;
  close(): void;
}

/** The relay and its exec id, as `RelayTable` keeps them. */
export function tagRelay(relay: PodRelay, execId: string): TaggedPodRelay {
  return {
    relay,
    execId,
    get isOpen() {
      return relay.isOpen;
    },
    close: () => relay.close(),
  };
}

/**
 * A sandbox's declared ports (`openPortRelay`): the relay copied to a fresh path in the Pod's
 * `/tmp` and run in connect mode as one long-lived exec (no shell needed), so each connection the
 * daemon opens reaches 127.0.0.1:PORT in the Pod. The Pod's network policy is untouched: the
 * bytes travel the exec channel.
 */
export async function startPodPortRelay(
  kubeConfig: KubeConfig,
  target: PodTarget,
  relayHelperPath: string,
  writeFile: (path: string, content: Buffer) => Promise<void>,
): Promise<PortRelay> {
  const binary = await loadRelayBinary(relayHelperPath);
  if (binary === null)
    throw new GymError(
      'CAPABILITY_UNSUPPORTED',
      `ports need the relay at ${relayHelperPath}, which scripts/setup.sh builds`,
      {
        details: { capability: 'ports', relayHelperPath },
      },
    );
  const path = `/tmp/.gym-port-relay-${randomBytes(6).toString('hex')}`;
  await writeFile(path, binary);
  return PortRelay.start(
    (io) =>
      startPodExec(kubeConfig, target, [path, 'connect'], {
        stdin: io.stdin,
        keepStdinOpen: true,
        onStdout: io.onStdout,
      }),
    { label: target.pod, details: { pod: target.pod } },
  );
}
