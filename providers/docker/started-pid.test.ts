/**
 * Finding a just-started exec's pid before it is moved into its cgroup. Under heavy load (300
 * execs at once on 2 busy cores) the engine took more than the old 1 s + 5 s to start the
 * process, and those commands failed as PROVIDER_ERROR "could not move the command into its own
 * cgroup" (reason: "the exec showed no pid within 5000 ms").
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { ContainerCgroup } from './exec-cgroups.ts';
import { PID_WAIT_MS, startedHostPid } from './one-shot-exec.ts';

interface FakeInspect {
  Pid: number;
  Running: boolean;
  ExitCode: number | null;
}

/** An exec whose inspect answers `state(elapsed ms)`, counting the calls. */
function fakeExec(state: (elapsedMs: number) => FakeInspect) {
  const started = performance.now();
  const exec = {
    calls: 0,
    inspect: async () => {
      exec.calls += 1;
      return state(performance.now() - started);
    },
  };
  return exec as typeof exec & Parameters<typeof startedHostPid>[0];
}

const noHostView = { cgroup: { hostPidOf: async () => null } as unknown as ContainerCgroup };
const notYet: FakeInspect = { Pid: 0, Running: false, ExitCode: null };

describe('startedHostPid', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance', 'Date'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('waits for an exec a loaded engine starts 30 s late, asking it less and less often', async () => {
    const exec = fakeExec((elapsed) =>
      elapsed < 30_000 ? notYet : { Pid: 4242, Running: true, ExitCode: null },
    );
    const pid = startedHostPid(exec, noHostView, null);
    await vi.advanceTimersByTimeAsync(31_000);
    expect(await pid).toBe(4242);
    // A pause growing to 500 ms: about 70 inspects in 30 s, not one every millisecond.
    expect(exec.calls).toBeLessThan(100);
  });

  it('takes the pid from the ready token when it comes while the engine shows none', async () => {
    let seen!: () => void;
    const ready = { seen: new Promise<void>((resolve) => (seen = resolve)), nsPid: null as number | null };
    const host = {
      cgroup: { hostPidOf: async (ns: number) => (ns === 7 ? 999 : null) } as unknown as ContainerCgroup,
    };
    const pid = startedHostPid(
      fakeExec(() => notYet),
      host,
      ready,
    );
    setTimeout(() => {
      ready.nsPid = 7;
      seen();
    }, 8_000);
    await vi.advanceTimersByTimeAsync(8_100);
    expect(await pid).toBe(999);
  });

  it('fails at once for an exec that ended without running, and at the deadline for one that never starts', async () => {
    const ended = startedHostPid(
      fakeExec(() => ({ Pid: 0, Running: false, ExitCode: 126 })),
      noHostView,
      null,
    );
    await expect(ended).rejects.toThrow(/ended \(exit 126\) before it showed a pid/);
    const never = startedHostPid(
      fakeExec(() => notYet),
      noHostView,
      null,
    ).catch((error: Error) => error);
    await vi.advanceTimersByTimeAsync(PID_WAIT_MS + 1_000);
    expect(String(await never)).toContain(`no pid within ${PID_WAIT_MS} ms`);
  });
});
