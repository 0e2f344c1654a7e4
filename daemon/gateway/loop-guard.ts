/**
 * The gateway's loop guard: a model upstream must never lead back to the daemon, or one agent
 * call would become an endless chain of calls, each recorded and each spending the operator's
 * budget. Two checks stop it: an upstream whose address is the daemon's own listener is refused
 * when it is configured or a rollout is opened (`LoopGuard`), and every call the gateway makes
 * upstream carries the hop header with the daemon's id, so a call that comes back through an
 * address the first check cannot tell apart is refused on arrival (the model routes compare it).
 */
import { isIP } from 'node:net';
import { GymError } from '../../core/errors.ts';
import type { UpstreamConfig } from './model-call.ts';

/** Every call the gateway makes upstream carries this header with the daemon's id: a call that comes back with it is a loop. */
export const GATEWAY_HOP_HEADER = 'x-gym-gateway-hop';

/** Host names that reach this machine's own listeners on a port. */
function isLocalHost(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  if (host === 'localhost' || host.endsWith('.localhost') || host === '::' || host === '::1') return true;
  if (host === '0.0.0.0' || /^127\./.test(host)) return true;
  if (isIP(host) !== 6) return false;
  if (/^::ffff:(127\.|0\.0\.0\.0)/.test(host)) return true;
  // The URL parser writes IPv4-mapped addresses in hex: ::ffff:7f00:1 is 127.0.0.1.
  const mapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(host);
  if (mapped === null) return false;
  const high = Number.parseInt(mapped[1]!, 16);
  return high >> 8 === 127 || (high === 0 && Number.parseInt(mapped[2]!, 16) === 0);
}

/** Refuses an upstream that is the daemon itself, once it knows where the daemon listens. */
export class LoopGuard {
  /** Where the daemon's own API listens (host, port), so no upstream can point at it. */
  #selfAddresses: Array<{ host: string; port: number }> = [];

  /** Tells the guard where the daemon listens; until then it refuses nothing. */
  setSelfAddresses(addresses: Array<{ host: string; port: number }>): void {
    this.#selfAddresses = addresses;
  }

  /** Throws VALIDATION_FAILED when `upstream` reaches one of the daemon's listeners. */
  checkNotSelf(upstream: UpstreamConfig): void {
    const url = new URL(upstream.baseUrl);
    const port = url.port === '' ? (url.protocol === 'https:' ? 443 : 80) : Number(url.port);
    const hostname = url.hostname.replace(/^\[|\]$/g, '').toLowerCase();
    for (const self of this.#selfAddresses) {
      const selfHost = self.host.replace(/^\[|\]$/g, '').toLowerCase();
      // Local names reach the daemon on any bind address; another host's name only when it is the
      // bind address itself. (A loop through an address we cannot tell apart is caught by the
      // hop header instead.)
      const sameHost = hostname === selfHost || isLocalHost(hostname);
      if (sameHost && port === self.port) {
        throw new GymError(
          'VALIDATION_FAILED',
          `the model upstream ${upstream.baseUrl} is the daemon itself (it listens on port ${self.port}); point it at the policy server`,
          { details: { upstream: upstream.baseUrl } },
        );
      }
    }
  }
}
