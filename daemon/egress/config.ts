/**
 * The operator's cap on sandbox egress (`egress` in the daemon's configuration). A token holder
 * sets a sandbox's policy; this decides what any policy may open at all. The default opens
 * nothing: no `public`, no host, no private address.
 */
import { isIP } from 'node:net';
import { z } from 'zod';
import { AllowedHostSchema } from '../../core/schemas/sandbox.ts';

/** `a.b.c.d/len` or `v6::/len`. */
const CidrSchema = z.string().refine(
  (value) => {
    const [address, length, ...rest] = value.split('/');
    const family = isIP(address ?? '');
    const bits = Number(length);
    return (
      rest.length === 0 &&
      family !== 0 &&
      Number.isInteger(bits) &&
      bits >= 0 &&
      bits <= (family === 4 ? 32 : 128)
    );
  },
  { message: 'must be an address range like 10.0.0.0/8 or fd00::/8' },
);

export const EgressConfigSchema = z
  .object({
    /** Whether a sandbox may be given `public` (any public address, on any port). Default: no. */
    allowPublic: z.boolean().default(false),
    /**
     * The hosts an allow-list may name: each entry of a sandbox's policy must fall under one of
     * these (same syntax; `*.pypi.test` covers `files.pypi.test` and `*.files.pypi.test`; an
     * entry with no port covers 80 and 443). Default: none.
     */
    allowedHosts: z.array(AllowedHostSchema).max(4096).default([]),
    /**
     * Address ranges the proxy may connect to although they are loopback, private, link-local or
     * this host's own (a package mirror on the LAN; tests use 127.0.0.0/8). The daemon's own API
     * port is refused whatever this says.
     */
    allowPrivateAddresses: z.array(CidrSchema).max(256).default([]),
    /** Open proxied connections per sandbox; more are refused (a flood cannot take the daemon's sockets). */
    maxConnectionsPerSandbox: z.number().int().positive().max(10_000).default(64),
    /** Bytes (both directions) one sandbox may move through the proxy in its life; then its connections end. */
    maxBytesPerSandbox: z
      .number()
      .int()
      .positive()
      .default(8 * 1024 * 1024 * 1024),
    /** The longest one proxied connection may stay open. */
    maxConnectionSeconds: z.number().int().positive().default(3600),
    /** A proxied connection with no byte either way for this long is closed. */
    idleTimeoutSeconds: z.number().int().positive().default(120),
    /** How long a name lookup and the connect to the host may take together. */
    connectTimeoutMs: z.number().int().positive().default(10_000),
    /** Attempts kept per sandbox in its network log (the oldest go first, and are counted). */
    logEntriesPerSandbox: z.number().int().positive().max(100_000).default(1000),
  })
  .strict();
export type EgressConfig = z.output<typeof EgressConfigSchema>;
