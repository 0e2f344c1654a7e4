import { describe, expect, it } from 'vitest';
import { type DeclaredNetwork, decideNetwork, declaredNetwork, type OperatorNetwork } from './network.ts';

const closed = { allowPublic: false, allowedHosts: [] };
const refuse: OperatorNetwork = { taskNetwork: { maximum: 'none', overMaximum: 'refuse' }, egress: closed };
const cap: OperatorNetwork = { taskNetwork: { maximum: 'none', overMaximum: 'cap' }, egress: closed };
const packages: OperatorNetwork = {
  taskNetwork: { maximum: 'none', overMaximum: 'refuse' },
  egress: { allowPublic: false, allowedHosts: ['*.pkg.test', 'pypi.test'] },
};
const publicAllowed: OperatorNetwork = {
  taskNetwork: { maximum: 'none', overMaximum: 'refuse' },
  egress: { allowPublic: true, allowedHosts: [] },
};
const NONE = { mode: 'none', allowedHosts: [] };

describe("task.toml's network, phase by phase, as Harbor resolves it", () => {
  it('takes a phase override over the [environment] baseline, and allow_internet only where no network_mode is set', () => {
    expect(
      declaredNetwork({
        environment: { network_mode: 'no-network' },
        agent: {},
        verifier: { network_mode: 'public' },
        separateVerifier: false,
      }),
    ).toEqual({
      environment: { mode: 'no-network' },
      agent: { mode: 'no-network' },
      verifier: { mode: 'public' },
    });
    expect(
      declaredNetwork({
        environment: { allow_internet: true },
        agent: {},
        verifier: {},
        separateVerifier: false,
      }),
    ).toEqual({ environment: { mode: 'public' }, agent: { mode: 'public' }, verifier: { mode: 'public' } });
    expect(
      declaredNetwork({
        environment: { allow_internet: true, network_mode: 'no-network' },
        agent: {},
        verifier: {},
        separateVerifier: false,
      }),
    ).toEqual({
      environment: { mode: 'no-network' },
      agent: { mode: 'no-network' },
      verifier: { mode: 'no-network' },
    });
    expect(
      declaredNetwork({
        environment: {},
        agent: { network_mode: 'allowlist', allowed_hosts: ['pypi.org'] },
        verifier: {},
        separateVerifier: false,
      }),
    ).toEqual({
      environment: null,
      agent: { mode: 'allowlist', allowed_hosts: ['pypi.org'] },
      verifier: null,
    });
    // A separate verifier's baseline is its own environment's.
    expect(
      declaredNetwork({
        environment: { network_mode: 'public' },
        agent: {},
        verifier: { environment: { network_mode: 'no-network' } },
        separateVerifier: true,
      }),
    ).toEqual({
      environment: { mode: 'public' },
      agent: { mode: 'public' },
      verifier: { mode: 'no-network' },
    });
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

describe("what a task's phases get under the operator's egress cap", () => {
  const declared = (
    agent: DeclaredNetwork['agent'],
    verifier: DeclaredNetwork['verifier'],
    environment: DeclaredNetwork['agent'] = null,
  ) => ({ environment, agent, verifier });

  it('gives none to a task that declares nothing, no-network or an allowlist of no host', () => {
    for (const policy of [
      null,
      { mode: 'no-network' as const },
      { mode: 'allowlist' as const, allowed_hosts: [] },
    ])
      expect(decideNetwork(declared(policy, policy, policy), refuse)).toEqual({
        applied: { environment: NONE, agent: NONE, verifier: NONE },
        capped: [],
      });
  });

  it('gives each phase its own policy within the cap: an agent with none, a verifier that installs from the package host', () => {
    expect(
      decideNetwork(
        declared(
          { mode: 'no-network' },
          { mode: 'allowlist', allowed_hosts: ['Files.PKG.test', 'pypi.test'] },
        ),
        packages,
      ),
    ).toEqual({
      applied: {
        environment: NONE,
        agent: NONE,
        verifier: { mode: 'allowlist', allowedHosts: ['files.pkg.test', 'pypi.test'] },
      },
      capped: [],
    });
    expect(decideNetwork(declared(null, { mode: 'public' }), publicAllowed).applied.verifier).toEqual({
      mode: 'public',
      allowedHosts: [],
    });
  });

  it('refuses what the cap does not allow with the phase, the host and the setting, or caps it when told to', () => {
    const beyond = declared(
      { mode: 'allowlist', allowed_hosts: ['pypi.test', 'evil.test'] },
      { mode: 'public' },
    );
    const refused = decideNetwork(beyond, packages).refused;
    expect(refused).toMatch(
      /agent phase declares network_mode allowlist \[pypi\.test, evil\.test\].*egress\.allowedHosts.*evil\.test/,
    );
    expect(refused).toMatch(/verifier phase declares network_mode public.*egress\.allowPublic/);
    expect(refused).toMatch(/overMaximum = "cap"/);
    const capped = decideNetwork(beyond, {
      ...packages,
      taskNetwork: { maximum: 'none', overMaximum: 'cap' },
    });
    expect(capped.refused).toBeUndefined();
    // An allowlist keeps the hosts the cap covers; public is never narrowed into a guess: none.
    expect(capped.applied.agent).toEqual({ mode: 'allowlist', allowedHosts: ['pypi.test'] });
    expect(capped.applied.verifier).toEqual(NONE);
    expect(capped.capped).toEqual([
      expect.stringMatching(/agent phase .*: ran with allowlist \[pypi\.test\]/),
      expect.stringMatching(/verifier phase .*: ran with none/),
    ]);
    expect(decideNetwork(declared(null, { mode: 'public' }), cap).applied.verifier).toEqual(NONE);
  });

  it('refuses an allowed_hosts entry no proxy can take', () => {
    expect(() =>
      decideNetwork(
        declared({ mode: 'allowlist', allowed_hosts: ['https://pypi.test/simple'] }, null),
        packages,
      ),
    ).toThrow(/\[agent\]: allowed_hosts entry "https:\/\/pypi\.test\/simple" is not a host name/);
  });

  it('takes the agent phase for the start of a row read before the baseline was kept', () => {
    const old = { agent: { mode: 'allowlist' as const, allowed_hosts: ['pypi.test'] }, verifier: null };
    expect(decideNetwork(old, packages).applied.environment).toEqual({
      mode: 'allowlist',
      allowedHosts: ['pypi.test'],
    });
  });
});
