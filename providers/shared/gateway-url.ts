/**
 * The gateway's URL as an agent sees it when a relay listens on the sandbox's own loopback, and
 * the port of one such URL recorded before a daemon restart (reach is restored at the same URL).
 */
import { GymError } from '../../core/errors.ts';

export function loopbackGatewayUrl(port: number): string {
  return `http://127.0.0.1:${port}`;
}

/**
 * The port of `url` (one `loopbackGatewayUrl` made), or 0 (any free port) when there is none.
 * @throws GymError `PROVIDER_ERROR` for a URL no provider of this kind gives.
 */
export function recordedGatewayPort(url: string | undefined): number {
  if (url === undefined) return 0;
  const match = /^http:\/\/127\.0\.0\.1:(\d{1,5})$/.exec(url);
  const port = Number(match?.[1]);
  if (match === null || port < 1 || port > 65535)
    throw new GymError(
      'PROVIDER_ERROR',
      `cannot restore gateway reach at ${url}: not a URL this provider gives`,
      {
        details: { url },
      },
    );
  return port;
}
