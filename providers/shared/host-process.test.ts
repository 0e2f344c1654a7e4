import { describe, expect, it } from 'vitest';
import { memoryCounterPaths } from './host-process.ts';
import { parseProcessState } from './proc-stat.ts';

describe('reading a container from the host', () => {
  it('finds the OOM counter of a hybrid host (v1 memory) and of a pure v2 host', () => {
    const hybrid = '9:name=systemd:/docker/abc\n4:memory:/docker/abc\n0::/docker/abc\n';
    expect(memoryCounterPaths(hybrid, '/sys/fs/cgroup/unified', '/sys/fs/cgroup/memory')).toEqual([
      '/sys/fs/cgroup/memory/docker/abc/memory.oom_control',
      '/sys/fs/cgroup/unified/docker/abc/memory.events',
    ]);
    expect(memoryCounterPaths('0::/system.slice/docker-abc.scope\n', '/sys/fs/cgroup', '/x')).toEqual([
      '/sys/fs/cgroup/system.slice/docker-abc.scope/memory.events',
    ]);
  });

  it('refuses a path that climbs out', () => {
    expect(memoryCounterPaths('0::/../../etc\n', '/sys/fs/cgroup', '/x')).toEqual([]);
  });

  it('reads the state letter even when the command name holds ") "', () => {
    expect(parseProcessState('42 (evil) Z 1) R 1 42 42 0 -1')).toBe('R');
    expect(parseProcessState('7 (sleep) Z 1 7 7 0 -1')).toBe('Z');
  });
});
