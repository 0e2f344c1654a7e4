import { describe, expect, it } from 'vitest';
import { type DeclaredNetwork, decideNetwork, declaredNetwork } from './network.ts';

const refuse = { maximum: 'none', overMaximum: 'refuse' } as const;
const cap = { maximum: 'none', overMaximum: 'cap' } as const;
const publicAllowed = { maximum: 'public', overMaximum: 'refuse' } as const;

describe("task.toml's network, phase by phase, as Harbor resolves it", () => {
  it('takes a phase override over the [environment] baseline, and allow_internet only where no network_mode is set', () => {
    expect(
      declaredNetwork({
        environment: { network_mode: 'no-network' },
        agent: {},
        verifier: { network_mode: 'public' },
        separateVerifier: false,
      }),
    ).toEqual({ agent: { mode: 'no-network' }, verifier: { mode: 'public' } });
    expect(
      declaredNetwork({
        environment: { allow_internet: true },
        agent: {},
        verifier: {},
        separateVerifier: false,
      }),
    ).toEqual({ agent: { mode: 'public' }, verifier: { mode: 'public' } });
    expect(
      declaredNetwork({
        environment: { allow_internet: true, network_mode: 'no-network' },
        agent: {},
        verifier: {},
        separateVerifier: false,
      }),
    ).toEqual({ agent: { mode: 'no-network' }, verifier: { mode: 'no-network' } });
    expect(
      declaredNetwork({
        environment: {},
        agent: { network_mode: 'allowlist', allowed_hosts: ['pypi.org'] },
        verifier: {},
        separateVerifier: false,
      }),
    ).toEqual({ agent: { mode: 'allowlist', allowed_hosts: ['pypi.org'] }, verifier: null });
    // A separate verifier's baseline is its own environment's.
    expect(
      declaredNetwork({
        environment: { network_mode: 'public' },
        agent: {},
        verifier: { environment: { network_mode: 'no-network' } },
        separateVerifier: true,
      }),
    ).toEqual({ agent: { mode: 'public' }, verifier: { mode: 'no-network' } });
    expect(() =>
      declaredNetwork({
        environment: { allowed_hosts: ['x.org'] },
        agent: {},
        verifier: {},
        separateVerifier: false,
      }),
    ).toThrow(/allowed_hosts is only valid with network_mode = "allowlist"/);
  });
});

describe("what a task's phases get under the operator's rule", () => {
  const declared = (agent: DeclaredNetwork['agent'], verifier: DeclaredNetwork['verifier']) => ({
    agent,
    verifier,
  });

  it('gives none to a task that declares nothing, no-network or an allowlist of no host', () => {
    for (const policy of [
      null,
      { mode: 'no-network' as const },
      { mode: 'allowlist' as const, allowed_hosts: [] },
    ])
      expect(decideNetwork(declared(policy, policy), refuse, false)).toEqual({
        applied: { agent: 'none', verifier: 'none' },
        capped: [],
      });
  });

  it('refuses public or an allowlist over the maximum with the reason, or caps it when the operator says so', () => {
    const needsPublic = declared(null, { mode: 'public' });
    expect(decideNetwork(needsPublic, refuse, false).refused).toMatch(
      /verifier phase declares network_mode public, and the operator's taskNetwork\.maximum is none.*overMaximum = "cap"/,
    );
    expect(decideNetwork(needsPublic, cap, false)).toEqual({
      applied: { agent: 'none', verifier: 'none' },
      capped: [expect.stringMatching(/verifier phase declares network_mode public.*: ran with none/)],
    });
    const allowlist = declared({ mode: 'allowlist', allowed_hosts: ['pypi.org'] }, null);
    // No egress proxy: an allowlist is never granted, and never widened to public.
    expect(decideNetwork(allowlist, publicAllowed, true).refused).toMatch(
      /allowlist \[pypi\.org\].*no egress proxy/,
    );
    expect(decideNetwork(allowlist, { maximum: 'public', overMaximum: 'cap' }, true).applied.agent).toBe(
      'none',
    );
  });

  it('gives public where the operator allows it, and refuses phases of one sandbox that would differ', () => {
    expect(decideNetwork(declared({ mode: 'public' }, { mode: 'public' }), publicAllowed, false)).toEqual({
      applied: { agent: 'public', verifier: 'public' },
      capped: [],
    });
    expect(decideNetwork(declared(null, { mode: 'public' }), publicAllowed, false).refused).toMatch(
      /share one sandbox, whose network is set when it starts/,
    );
    expect(decideNetwork(declared(null, { mode: 'public' }), publicAllowed, true)).toEqual({
      applied: { agent: 'none', verifier: 'public' },
      capped: [],
    });
  });
});
