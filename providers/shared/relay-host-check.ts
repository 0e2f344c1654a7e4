/**
 * The host check of the providers that copy the static relay into their sandboxes for gateway
 * reach (Kubernetes into the Pod, Apptainer and Enroot to each host): the binary scripts/setup.sh
 * builds must be there, or their sandboxes get no model gateway.
 */
import type { HostCheck, HostCheckContext } from '../../core/host-check.ts';
import { DEFAULT_RELAY_HELPER_PATH } from './gateway-relay.ts';
import { isExecutableFile } from './host-tools.ts';

/** The check, for the provider's options as configured (`relayHelperPath`, `gatewayReach`). */
export function relayHelperChecks(provider: string, { options }: HostCheckContext): HostCheck[] {
  if (options.gatewayReach === false) return [];
  const path =
    typeof options.relayHelperPath === 'string' ? options.relayHelperPath : DEFAULT_RELAY_HELPER_PATH;
  return [
    {
      name: `relay helper (provider ${provider})`,
      ok: isExecutableFile(path),
      detail: `${path} (copied into sandboxes for gateway reach)`,
      fix: 'bash scripts/setup.sh (compiles it statically; needs gcc and libc6-dev), or set gatewayReach: false',
    },
  ];
}
