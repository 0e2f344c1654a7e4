/**
 * Host key verification against an OpenSSH known_hosts file: plain and hashed host names,
 * `[host]:port` for ports other than 22, comma-separated patterns with `*`, `?` and `!`
 * negation, and `@revoked` keys. ssh2 accepts any host key unless told otherwise; every SSH
 * connection of this project is checked here, and an unknown or changed key is refused.
 */
import { createHmac } from 'node:crypto';

export type HostKeyVerdict =
  | { kind: 'match' }
  /** The host is known with other keys only: the key changed (or someone is in the middle). */
  | { kind: 'mismatch'; knownTypes: string[] }
  | { kind: 'unknown' }
  | { kind: 'revoked' };

interface Entry {
  marker: '@revoked' | '@cert-authority' | null;
  patterns: string;
  keyType: string;
  key: Buffer;
}

/** The name a known_hosts line uses for a host: `host`, or `[host]:port` off port 22. */
export function hostName(host: string, port: number): string {
  return port === 22 ? host : `[${host}]:${port}`;
}

export function parseKnownHosts(text: string): Entry[] {
  const entries: Entry[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const fields = line.split(/\s+/);
    const marker = fields[0] === '@revoked' || fields[0] === '@cert-authority' ? fields.shift()! : null;
    const [patterns, keyType, key] = fields;
    if (patterns === undefined || keyType === undefined || key === undefined) continue;
    entries.push({
      marker: marker as Entry['marker'],
      patterns,
      keyType,
      key: Buffer.from(key, 'base64'),
    });
  }
  return entries;
}

function globMatches(pattern: string, name: string): boolean {
  const regex = pattern
    .replace(/[.+^${}()|[\]\\]/g, '\\$&')
    .replace(/\*/g, '.*')
    .replace(/\?/g, '.');
  return new RegExp(`^${regex}$`, 'i').test(name);
}

/** Whether a line's host field names `name` (hashed: `|1|salt|hmac`; else patterns). */
export function patternsMatch(patterns: string, name: string): boolean {
  if (patterns.startsWith('|1|')) {
    const [, , salt, hash] = patterns.split('|');
    if (salt === undefined || hash === undefined) return false;
    const computed = createHmac('sha1', Buffer.from(salt, 'base64')).update(name).digest('base64');
    return computed === hash;
  }
  let matched = false;
  for (const pattern of patterns.split(',')) {
    if (pattern.startsWith('!')) {
      if (globMatches(pattern.slice(1), name)) return false;
    } else if (globMatches(pattern, name)) matched = true;
  }
  return matched;
}

/** Judges the raw host key blob a server presented against the file's entries. */
export function verifyHostKey(entries: Entry[], host: string, port: number, key: Buffer): HostKeyVerdict {
  const name = hostName(host, port);
  if (entries.some((entry) => entry.marker === '@revoked' && entry.key.equals(key)))
    return { kind: 'revoked' };
  const forHost = entries.filter((entry) => entry.marker === null && patternsMatch(entry.patterns, name));
  if (forHost.some((entry) => entry.key.equals(key))) return { kind: 'match' };
  if (forHost.length > 0)
    return { kind: 'mismatch', knownTypes: [...new Set(forHost.map((entry) => entry.keyType))] };
  return { kind: 'unknown' };
}
