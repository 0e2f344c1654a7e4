import { describe, expect, it } from 'vitest';
import { parseParentPid, parseStartTime } from '../shared/proc-stat.ts';
import { findCgroup2Mount, parseUnifiedCgroupPath } from './exec-cgroups.ts';

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
