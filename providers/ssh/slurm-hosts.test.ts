import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../core/logger.ts';
import { HostSchema } from './host-fleet.ts';
import type { SlurmCommands } from './slurm-allocation.ts';
import { SlurmHosts } from './slurm-hosts.ts';

/** Slurm is never asked in these cases: what the hosts of an allocation's nodes are. */
const silentSlurm: SlurmCommands = {
  where: 'nowhere',
  run: () => Promise.reject(new Error('not asked in this test')),
  close: () => {},
};

function slurmHosts(options: Record<string, unknown>) {
  return new SlurmHosts(options, {
    logger: silentLogger,
    namespace: 'ns',
    checkHost: (host) => HostSchema.parse(host),
    setHosts: () => {},
    list: async () => ({ sandboxes: [], unreachable: [] }),
    reap: async () => {},
    commands: silentSlurm,
  });
}

const node = { username: 'gym', knownHostsPath: '/k', workDirectory: '/scratch/gym', port: 2222 };

describe('Slurm mode hosts', () => {
  it('makes each node a host named after it, at its NodeAddr unless an override says otherwise', () => {
    const hosts = slurmHosts({ node, nodeOverrides: { c2: { host: 'c2-ib', maxSandboxes: 4 } } });
    expect(
      hosts.hostsFor({
        jobId: '7',
        grantedAt: 0,
        nodes: [
          { name: 'c1', address: '10.0.0.1' },
          { name: 'c2', address: '10.0.0.2' },
        ],
      }),
    ).toEqual([
      { ...node, name: 'c1', host: '10.0.0.1' },
      { ...node, name: 'c2', host: 'c2-ib', maxSandboxes: 4 },
    ]);
    expect(hosts.allocation.jobName).toBe('gym-ns');
  });

  it('refuses node settings the provider would refuse, and a name or address Slurm gives', () => {
    expect(() => slurmHosts({ node: { ...node, workDirectory: 'relative' } })).toThrow();
    expect(() => slurmHosts({ node: { ...node, name: 'n' } })).toThrow(/comes from Slurm/);
    expect(() => slurmHosts({ node: { ...node, host: 'h' } })).toThrow(/comes from Slurm/);
    expect(() => slurmHosts({ node, nodeOverrides: { c1: { port: 0 } } })).toThrow();
    expect(() => slurmHosts({ node: { ...node, unknownSetting: 1 } })).toThrow();
  });
});
