/**
 * Gateway reach for a daemon outside the cluster: the relay (`../shared/gateway-relay.ts`)
 * carried over one pods/exec stream.
 *
 * The provider copies the static relay (`../shared/relay-helper/gym-relay.c`, built by scripts/setup.sh
 * into `.tools/gym-relay`) into the Pod and runs it as one long-lived exec, tagged for the kill
 * script; the relay listens on the Pod's loopback. `/tmp` must be writable.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import { GatewayRelay } from '../shared/gateway-relay.ts';
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
