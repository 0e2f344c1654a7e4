import { createHmac, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { hostName, parseKnownHosts, patternsMatch, verifyHostKey } from './known-hosts.ts';

const key = randomBytes(51);
const other = randomBytes(51);
const b64 = (buffer: Buffer) => buffer.toString('base64');
const hashed = (name: string) => {
  const salt = randomBytes(20);
  return `|1|${b64(salt)}|${createHmac('sha1', salt).update(name).digest('base64')}`;
};

describe('known_hosts', () => {
  it('names hosts as OpenSSH writes them', () => {
    expect(hostName('node1', 22)).toBe('node1');
    expect(hostName('127.0.0.2', 2222)).toBe('[127.0.0.2]:2222');
  });

  it('matches a plain entry, a hashed one and patterns, and refuses the rest', () => {
    const entries = parseKnownHosts(
      [
        '# comment',
        `node1,10.0.0.1 ssh-ed25519 ${b64(key)} me@host`,
        `${hashed('[127.0.0.2]:2222')} ssh-ed25519 ${b64(key)}`,
        `gpu-*,!gpu-bad ecdsa-sha2-nistp256 ${b64(key)}`,
        `[10.0.0.9]:2200 ssh-ed25519 ${b64(key)}`,
        '',
      ].join('\n'),
    );
    expect(verifyHostKey(entries, 'node1', 22, key)).toEqual({ kind: 'match' });
    expect(verifyHostKey(entries, '10.0.0.1', 22, key)).toEqual({ kind: 'match' });
    expect(verifyHostKey(entries, '127.0.0.2', 2222, key)).toEqual({ kind: 'match' });
    // The same address on another port is another host.
    expect(verifyHostKey(entries, '127.0.0.2', 22, key)).toEqual({ kind: 'unknown' });
    expect(verifyHostKey(entries, 'gpu-7', 22, key)).toEqual({ kind: 'match' });
    // Brackets are literal, not a character class.
    expect(verifyHostKey(entries, '10.0.0.9', 2200, key)).toEqual({ kind: 'match' });
    expect(verifyHostKey(entries, '1', 2200, key)).toEqual({ kind: 'unknown' });
    expect(verifyHostKey(entries, 'gpu-bad', 22, key)).toEqual({ kind: 'unknown' });
    expect(verifyHostKey(entries, 'node1', 22, other)).toEqual({
      kind: 'mismatch',
      knownTypes: ['ssh-ed25519'],
    });
    expect(verifyHostKey(entries, 'node2', 22, key)).toEqual({ kind: 'unknown' });
  });

  it('refuses a revoked key even where a line accepts it', () => {
    const entries = parseKnownHosts(`node1 ssh-ed25519 ${b64(key)}\n@revoked * ssh-ed25519 ${b64(key)}\n`);
    expect(verifyHostKey(entries, 'node1', 22, key)).toEqual({ kind: 'revoked' });
  });

  it('does not take a hashed entry for another name, nor a malformed one for any', () => {
    expect(patternsMatch(hashed('node1'), 'node2')).toBe(false);
    expect(patternsMatch('|1|broken', 'node1')).toBe(false);
  });
});
