import { describe, expect, it } from 'vitest';
import { engineKindOf, podmanUlimits } from './engine-kind.ts';
import { isGvisorRuntime, runtimeProblems, runtimeTier } from './runtime-tier.ts';

const LIMITS = [
  'Limit                     Soft Limit           Hard Limit           Units     ',
  'Max processes             96363                96363                processes ',
  'Max open files            20000                20000                files     ',
].join('\n');

describe('runtime tiers', () => {
  it('tells gVisor by its name or path, and adds its own pids and memory to the limits', () => {
    expect(isGvisorRuntime('runsc')).toBe(true);
    expect(isGvisorRuntime('/usr/bin/runsc')).toBe(true);
    expect(isGvisorRuntime('runc')).toBe(false);
    expect(runtimeTier(undefined)).toMatchObject({ runtime: 'runc', hasGuestKernel: false, pidsOverhead: 0 });
    const gvisor = runtimeTier('runsc');
    expect(gvisor.hasGuestKernel).toBe(true);
    expect(gvisor.pidsOverhead).toBeGreaterThanOrEqual(40);
    expect(gvisor.hostControlGap).toContain('runsc');
  });

  it("names a runtime the engine lacks and gVisor's missing arguments", () => {
    expect(runtimeProblems('runsc', { runc: { path: 'runc' } })[0]).toContain('no runtime "runsc"');
    const bare = runtimeProblems('runsc', { runsc: { path: '/usr/bin/runsc' } });
    expect(bare).toHaveLength(3);
    expect(bare.join('\n')).toContain('--platform=ptrace');
    expect(
      runtimeProblems('runsc', {
        runsc: {
          path: '/usr/bin/runsc',
          runtimeArgs: ['--platform=ptrace', '--network=none', '--file-access=shared'],
        },
      }),
    ).toEqual([]);
    expect(runtimeProblems('crun', { crun: { path: '/usr/bin/crun' } })).toEqual([]);
  });
});

describe('engine kinds', () => {
  it("tells Podman from its version answer's components", () => {
    expect(engineKindOf({ Components: [{ Name: 'Podman Engine' }] })).toBe('podman');
    expect(engineKindOf({ Components: [{ Name: 'Engine' }] })).toBe('docker');
  });

  it("gives Podman rlimits at or below the host's hard limits", () => {
    expect(podmanUlimits(LIMITS)).toEqual([
      { Name: 'nofile', Soft: 20000, Hard: 20000 },
      { Name: 'nproc', Soft: 32768, Hard: 32768 },
    ]);
    const low = LIMITS.replace('96363                96363', '4096                 4096');
    expect(podmanUlimits(low)).toContainEqual({ Name: 'nproc', Soft: 4096, Hard: 4096 });
  });
});
