/**
 * The proxy credential of each sandbox: `<sandbox id>:<secret>`, the secret an HMAC of the id
 * under a key only the daemon holds. Every sandbox reaches the proxy through the same socket, so
 * this, not the connection, says which sandbox asks; one sandbox's secret opens no other's policy
 * (the secret is checked against the id it names). Derived, not stored: a restarted daemon
 * recognises the credentials its sandboxes already hold.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

export class EgressCredentials {
  readonly #key: string;

  /** @param key a secret of the daemon (its API token): whoever holds it could mint credentials. */
  constructor(key: string) {
    this.#key = key;
  }

  secretFor(sandboxId: string): string {
    return createHmac('sha256', this.#key).update(`egress-proxy\0${sandboxId}`).digest('hex');
  }

  /**
   * The sandbox a `Proxy-Authorization` header proves, or undefined. Compared in constant time:
   * an agent cannot learn a secret byte by byte from how fast it is refused.
   */
  sandboxOf(header: string | undefined): string | undefined {
    const match = /^basic\s+([a-z0-9+/=]+)\s*$/i.exec(header ?? '');
    if (match === null) return undefined;
    const decoded = Buffer.from(match[1]!, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon <= 0) return undefined;
    const sandboxId = decodeURIComponent(decoded.slice(0, colon));
    const given = Buffer.from(decoded.slice(colon + 1), 'utf8');
    const expected = Buffer.from(this.secretFor(sandboxId), 'utf8');
    return given.length === expected.length && timingSafeEqual(given, expected) ? sandboxId : undefined;
  }

  /**
   * The environment that points a sandbox's tools at the proxy: the relay's own address (the
   * gateway URL's host and port), so the proxy rides the reach the gateway already has.
   */
  environment(sandboxId: string, gatewayUrl: string): Record<string, string> {
    const { host } = new URL(gatewayUrl);
    const proxy = `http://${encodeURIComponent(sandboxId)}:${this.secretFor(sandboxId)}@${host}`;
    return {
      HTTP_PROXY: proxy,
      HTTPS_PROXY: proxy,
      http_proxy: proxy,
      https_proxy: proxy,
      // The gateway itself (and the sandbox's own loopback services) are not proxied.
      NO_PROXY: 'localhost,127.0.0.1',
      no_proxy: 'localhost,127.0.0.1',
    };
  }
}
