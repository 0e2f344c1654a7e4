import { describe, expect, it } from 'vitest';
import { GymError } from '../../core/errors.ts';
import { NetworkPolicySchema, SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { AddressGuard } from './addresses.ts';
import { EgressConfigSchema } from './config.ts';
import { EgressCredentials } from './credentials.ts';
import { EgressLog } from './log.ts';
import { policyRefusal, requireWithinCap } from './policy.ts';

const allowlist = (...allowedHosts: string[]) =>
  NetworkPolicySchema.parse({ mode: 'allowlist', allowedHosts });

describe('allow-list matching', () => {
  it('matches exact names and *. suffixes on their ports only', () => {
    const policy = allowlist('pypi.test', '*.files.test:8443', 'git.test:*');
    expect(policyRefusal(policy, 'pypi.test', 443)).toBeNull();
    expect(policyRefusal(policy, 'PYPI.test.', 80)).toBeNull();
    expect(policyRefusal(policy, 'pypi.test', 22)).not.toBeNull();
    expect(policyRefusal(policy, 'evil-pypi.test', 443)).not.toBeNull();
    expect(policyRefusal(policy, 'pypi.test.evil.test', 443)).not.toBeNull();
    expect(policyRefusal(policy, 'a.files.test', 8443)).toBeNull();
    expect(policyRefusal(policy, 'files.test', 8443)).not.toBeNull();
    expect(policyRefusal(policy, 'git.test', 9418)).toBeNull();
  });

  it('refuses raw IPs unless one is listed, and everything under none', () => {
    expect(policyRefusal(allowlist('*.test:*'), '127.0.0.2', 80)).not.toBeNull();
    expect(policyRefusal(allowlist('203.0.113.5'), '203.0.113.5', 443)).toBeNull();
    expect(policyRefusal(allowlist('[2001:db8::1]:*'), '[2001:db8::1]', 22)).toBeNull();
    expect(policyRefusal({ mode: 'none', allowedHosts: ['pypi.test'] }, 'pypi.test', 443)).not.toBeNull();
  });
});

describe("the operator's cap", () => {
  const config = EgressConfigSchema.parse({ allowedHosts: ['*.pypi.test', 'mirror.test:*'] });

  it('allows nothing by default, and no public unless configured', () => {
    const nothing = EgressConfigSchema.parse({});
    expect(() => requireWithinCap(allowlist('pypi.test'), nothing)).toThrow(GymError);
    expect(() => requireWithinCap({ mode: 'public', allowedHosts: [] }, nothing)).toThrow(/allowPublic/);
    expect(() => requireWithinCap({ mode: 'none', allowedHosts: [] }, nothing)).not.toThrow();
  });

  it('lets a policy narrow what the operator allows, never widen it', () => {
    expect(() =>
      requireWithinCap(allowlist('files.pypi.test', '*.cdn.pypi.test', 'mirror.test:8080'), config),
    ).not.toThrow();
    for (const wider of ['pypi.test', '*.test', 'files.pypi.test:22', 'files.pypi.test:*', 'other.test']) {
      expect(() => requireWithinCap(allowlist(wider), config), wider).toThrow(/egress.allowedHosts/);
    }
  });

  it('keeps every string spec valid and takes the object form', () => {
    expect(SandboxSpecSchema.parse({ image: 'x' }).network).toBe('none');
    expect(SandboxSpecSchema.parse({ image: 'x', network: 'bridge' }).network).toBe('bridge');
    expect(
      SandboxSpecSchema.parse({ image: 'x', network: { mode: 'allowlist', allowedHosts: ['a.test'] } })
        .network,
    ).toBe('none');
    expect(() =>
      SandboxSpecSchema.parse({ image: 'x', network: { mode: 'allowlist', allowedHosts: ['A B'] } }),
    ).toThrow();
  });
});

describe('addresses the proxy connects to', () => {
  it('refuses loopback, private, link-local, mapped and own addresses unless allowed, and the API port always', () => {
    const guard = new AddressGuard([], ['198.51.100.7']);
    for (const address of [
      '127.0.0.1',
      '10.0.0.1',
      '172.16.3.4',
      '192.168.0.1',
      '169.254.169.254',
      '0.0.0.0',
      '::1',
      '::',
      'fe80::1',
      'fd00::1',
      '::ffff:10.0.0.1',
      '224.0.0.1',
      '198.51.100.7',
    ]) {
      expect(guard.refusal(address, 80), address).not.toBeNull();
    }
    expect(guard.refusal('203.0.113.9', 443)).toBeNull();
    const testing = new AddressGuard(['127.0.0.0/8']);
    testing.addSelfPort(7000);
    expect(testing.refusal('127.0.0.5', 80)).toBeNull();
    expect(testing.refusal('127.0.0.5', 7000)).toMatch(/own API/);
    expect(testing.refusal('::ffff:127.0.0.1', 7000)).toMatch(/own API/);
    expect(testing.refusal('10.0.0.1', 80)).not.toBeNull();
  });
});

/** Every way to write the IPv6 address that carries `ipv4` (or is it), as a client or URL parser may. */
function spellingsOf(ipv4: string): string[] {
  const [a, b, c, d] = ipv4.split('.').map(Number) as [number, number, number, number];
  const high = ((a << 8) | b).toString(16);
  const low = ((c << 8) | d).toString(16);
  const pad = (hex: string) => hex.padStart(4, '0');
  return [
    `::ffff:${ipv4}`,
    `::ffff:${high}:${low}`,
    `::FFFF:${high.toUpperCase()}:${low.toUpperCase()}`,
    `0:0:0:0:0:ffff:${high}:${low}`,
    `0000:0000:0000:0000:0000:ffff:${pad(high)}:${pad(low)}`,
    `0:0::ffff:${ipv4}`,
    `::ffff:${high}:${low}%lo`,
    new URL(`http://[::ffff:${ipv4}]/`).hostname.slice(1, -1),
    `::ffff:0:${ipv4}`,
    `::${ipv4}`,
    `::${high}:${low}`,
    `64:ff9b::${ipv4}`,
    `64:ff9b::${high}:${low}`,
    `2002:${high}:${low}::1`,
  ];
}

describe('every spelling of an address that carries an IPv4 one', () => {
  it("refuses the daemon's API port on loopback and own addresses, however the address is written", () => {
    // The test daemons' set-up: loopback allowed (hosts on 127.0.0.x), the API port refused all the same.
    const guard = new AddressGuard(['127.0.0.0/8', '::/0'], ['198.51.100.7']);
    guard.addSelfPort(7000);
    for (const ipv4 of ['127.0.0.1', '127.0.0.2', '0.0.0.0', '198.51.100.7']) {
      for (const spelling of spellingsOf(ipv4)) {
        expect(guard.refusal(spelling, 7000), spelling).toMatch(/own API/);
      }
    }
    for (const spelling of ['::1', '0:0:0:0:0:0:0:1', '0000::0001', '::', '::0']) {
      expect(guard.refusal(spelling, 7000), spelling).toMatch(/own API/);
    }
    expect(guard.refusal('127.0.0.2', 7001)).toBeNull();
  });

  it('refuses loopback, private and own addresses in every spelling when nothing is allowed', () => {
    const guard = new AddressGuard([], ['198.51.100.7', '2001:db8:1::5']);
    for (const ipv4 of ['127.0.0.1', '10.1.2.3', '169.254.169.254', '192.168.1.1', '198.51.100.7']) {
      for (const spelling of spellingsOf(ipv4)) {
        expect(guard.refusal(spelling, 80), spelling).not.toBeNull();
      }
    }
    for (const spelling of ['2001:db8:1::5', '2001:DB8:1:0:0:0:0:5', '2001:0db8:0001::0005']) {
      expect(guard.refusal(spelling, 80), spelling).not.toBeNull();
    }
    // A public address in a mapped spelling is that public address.
    expect(guard.refusal('::ffff:203.0.113.9', 443)).toBeNull();
    expect(guard.refusal('::ffff:cb00:7109', 443)).toBeNull();
  });
});

describe('proxy credentials', () => {
  const credentials = new EgressCredentials('daemon-token');
  const header = (user: string, secret: string) =>
    `Basic ${Buffer.from(`${user}:${secret}`).toString('base64')}`;

  it("proves one sandbox, and no other sandbox's secret or a guess passes", () => {
    const secret = credentials.secretFor('sbx-a');
    expect(credentials.sandboxOf(header('sbx-a', secret))).toBe('sbx-a');
    expect(credentials.sandboxOf(header('sbx-b', secret))).toBeUndefined();
    expect(credentials.sandboxOf(header('sbx-a', `${secret.slice(0, -1)}0`))).toBeUndefined();
    expect(credentials.sandboxOf(header('sbx-a', ''))).toBeUndefined();
    expect(credentials.sandboxOf(undefined)).toBeUndefined();
    expect(new EgressCredentials('another-daemon').sandboxOf(header('sbx-a', secret))).toBeUndefined();
  });

  it('points the variables at the relay and keeps the gateway unproxied', () => {
    const environment = credentials.environment('sbx-a', 'http://127.0.0.1:41234');
    expect(environment.HTTPS_PROXY).toBe(`http://sbx-a:${credentials.secretFor('sbx-a')}@127.0.0.1:41234`);
    expect(environment.NO_PROXY).toBe('localhost,127.0.0.1');
  });
});

describe('the network log', () => {
  it('keeps the newest entries within its bound and counts what it dropped', () => {
    const log = new EgressLog(3);
    for (let index = 0; index < 5; index++) {
      log.add('sbx', {
        at: '',
        kind: 'connect',
        host: `h${index}`,
        port: 1,
        verdict: 'refused',
        bytesUp: 0,
        bytesDown: 0,
        durationMs: 0,
      });
    }
    const read = log.read('sbx');
    expect(read.attempts.map((attempt) => attempt.host)).toEqual(['h2', 'h3', 'h4']);
    expect(read.dropped).toBe(2);
  });
});
