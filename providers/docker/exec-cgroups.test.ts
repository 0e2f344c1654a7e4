import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseParentPid, parseStartTime } from '../shared/proc-stat.ts';
import { ContainerCgroup, findCgroup2Mount, parseUnifiedCgroupPath } from './exec-cgroups.ts';

describe('cgroup v2 discovery', () => {
  it('finds the cgroup2 mount of a hybrid host, and of a pure v2 host', () => {
    const hybrid = [
      '30 23 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755',
      '31 30 0:27 / /sys/fs/cgroup/memory rw,relatime shared:10 - cgroup cgroup rw,memory',
      '41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw',
    ].join('\n');
    expect(findCgroup2Mount(hybrid)).toBe('/sys/fs/cgroup/unified');
    const pure =
      '35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate';
    expect(findCgroup2Mount(pure)).toBe('/sys/fs/cgroup');
    expect(findCgroup2Mount('41 31 0:38 / /mnt/with\\040space rw - cgroup2 none rw')).toBe('/mnt/with space');
  });

  it('reports no mount on a v1-only host', () => {
    expect(findCgroup2Mount('31 30 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n')).toBeNull();
  });

  it('reads the v2 path of a process from its 0:: line', () => {
    const hybrid = '9:name=systemd:/docker/abc\n4:memory:/docker/abc\n0::/docker/abc\n';
    expect(parseUnifiedCgroupPath(hybrid)).toBe('/docker/abc');
    expect(parseUnifiedCgroupPath('0::/system.slice/docker-abc.scope\n')).toBe(
      '/system.slice/docker-abc.scope',
    );
  });

  it('refuses paths it cannot reach by name (outside our cgroup namespace) and v1-only hosts', () => {
    expect(parseUnifiedCgroupPath('0::/../../docker/abc\n')).toBeNull();
    expect(parseUnifiedCgroupPath('4:memory:/docker/abc\n')).toBeNull();
    expect(parseUnifiedCgroupPath('0::\n')).toBeNull();
  });
});

describe('/proc/<pid>/stat fields', () => {
  it('reads the parent and the start time, whatever the command name holds', () => {
    const fields = Array.from({ length: 50 }, (_, index) => String(index + 3));
    fields[4 - 3] = '17';
    fields[22 - 3] = '123456';
    // A process may name itself `a) b) c` to shift naive field counting.
    const clean = `42 (a) b) c) ${fields.join(' ')}`;
    expect(parseParentPid(clean)).toBe(17);
    expect(parseStartTime(clean)).toBe(123456);
  });
});

describe('the host pid of a process seen by its pid in the container', () => {
  const root = mkdtempSync(join(tmpdir(), 'gym-host-pid-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  /** A container cgroup listing `procs` (host pid: its NSpid line), and a procfs with the daemon at `self`. */
  function container(name: string, procs: Array<[number, string]>, self = '4242'): ContainerCgroup {
    const proc = join(root, name, 'proc');
    const cgroup = join(root, name, 'cgroup');
    mkdirSync(cgroup, { recursive: true });
    writeFileSync(join(cgroup, 'cgroup.procs'), procs.map(([pid]) => `${pid}\n`).join(''));
    for (const [pid, nsPids] of [[0, self] as [number, string], ...procs]) {
      const directory = join(proc, pid === 0 ? 'self' : String(pid));
      mkdirSync(directory, { recursive: true });
      writeFileSync(join(directory, 'status'), `Name:\tx\nPid:\t${pid}\nNSpid:\t${nsPids}\nUid:\t0\n`);
    }
    return new ContainerCgroup(cgroup, proc);
  }

  it('finds the helper, never a process of a pid namespace nested in the container with the same last pid', async () => {
    // 200 is an agent's process in a pid namespace it made inside the container (CAP_SYS_ADMIN),
    // left behind in the container's cgroup, whose pid there is the helper's pid in the container.
    const before = container('nested-older', [
      [100, '100 1'],
      [200, '200 57 42'],
      [300, '300 42'],
    ]);
    expect(await before.hostPidOf(42)).toBe(300);
    const after = container('nested-newer', [
      [100, '100 1'],
      [300, '300 42'],
      [200, '200 57 42'],
    ]);
    expect(await after.hostPidOf(42)).toBe(300);
    expect(await after.hostPidOf(1)).toBe(100);
    expect(await after.hostPidOf(7)).toBeNull();
  });

  it('takes no host process for one of the container, and counts depth from where the daemon runs', async () => {
    // A process of the daemon's own pid namespace is not in the container's, whatever its pid.
    expect(await container('host-process', [[42, '42']]).hostPidOf(42)).toBeNull();
    // A daemon itself in a pid namespace (one level down): the container is two levels down.
    const nested = container(
      'daemon-nested',
      [
        [100, '100 5 1'],
        [300, '300 9 42'],
      ],
      '4242 17',
    );
    expect(await nested.hostPidOf(42)).toBe(300);
    expect(await container('daemon-nested-shallow', [[300, '300 42']], '4242 17').hostPidOf(42)).toBeNull();
  });

  it('finds the helper among many processes the agent left', async () => {
    const many: Array<[number, string]> = Array.from({ length: 130 }, (_, index) => [
      1000 + index,
      `${1000 + index} ${index + 2}`,
    ]);
    const cgroup = container('many', [[100, '100 1'], ...many, [2000, '2000 900']]);
    expect(await cgroup.hostPidOf(900)).toBe(2000);
    expect(await cgroup.hostPidOf(100)).toBe(1098);
  });
});
