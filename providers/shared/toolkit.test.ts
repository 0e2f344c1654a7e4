import { describe, expect, it } from 'vitest';
import type { GymError } from '../../core/errors.ts';
import { superviseExec } from './exec-skeleton.ts';
import { resolveUserIds } from './passwd.ts';
import { RelayTable } from './relay-table.ts';
import { sandboxIdentity, sandboxTimes } from './sandbox-identity.ts';
import { SessionTable } from './session-table.ts';
import type { ShellSession } from './shell-session.ts';
import { requireSpecCapabilities } from './spec-capabilities.ts';

const clock = { now: () => Date.parse('2026-01-01T00:00:00.000Z'), monotonicMs: () => 0 };

describe('sandboxTimes', () => {
  it('caps the lease at the deadline', () => {
    expect(sandboxTimes(clock, 7200, 3600)).toEqual({
      createdAt: '2026-01-01T00:00:00.000Z',
      leaseExpiresAt: '2026-01-01T01:00:00.000Z',
      deadlineAt: '2026-01-01T01:00:00.000Z',
    });
    expect(sandboxTimes(clock, 60, 3600).leaseExpiresAt).toBe('2026-01-01T00:01:00.000Z');
  });

  it('uses the id and times the daemon passed, and makes its own only when absent', () => {
    const given = { createdAt: 'a', leaseExpiresAt: 'b', deadlineAt: 'c' };
    expect(
      sandboxIdentity({ id: 'sbx-given0000', times: given }, { clock, maxLifetimeSeconds: 10 }, 5),
    ).toEqual({
      id: 'sbx-given0000',
      ...given,
    });
    const made = sandboxIdentity({}, { clock, maxLifetimeSeconds: 10 }, 5);
    expect(made.id).toMatch(/^sbx-[a-z0-9]+$/);
    expect(made.leaseExpiresAt).toBe('2026-01-01T00:00:05.000Z');
  });
});

function fakeSession(): ShellSession & { closed: number } {
  const session = {
    closed: 0,
    isAlive: true,
    close() {
      session.closed += 1;
      session.isAlive = false;
    },
  };
  return session as unknown as ShellSession & { closed: number };
}

describe('SessionTable', () => {
  it('shares one opening, reuses a live session and replaces a dead one', async () => {
    const table = new SessionTable();
    let opened = 0;
    const open = async () => {
      opened += 1;
      return fakeSession();
    };
    const [first, second] = await Promise.all([
      table.session('sbx-a', 'main', undefined, open),
      table.session('sbx-a', 'main', undefined, open),
    ]);
    expect(first).toBe(second);
    expect(opened).toBe(1);
    const other = await table.session('sbx-a', 'main', 'nobody', open);
    expect(other).not.toBe(first);
    first.close();
    const replaced = await table.session('sbx-a', 'main', undefined, open);
    expect(replaced).not.toBe(first);
    expect(opened).toBe(3);
  });

  it('forgets a failed opening and closes every session of a sandbox', async () => {
    const table = new SessionTable();
    await expect(
      table.session('sbx-a', 'x', undefined, () => Promise.reject(new Error('no'))),
    ).rejects.toThrow('no');
    const session = await table.session('sbx-a', 'x', undefined, async () => fakeSession());
    const kept = await table.session('sbx-b', 'x', undefined, async () => fakeSession());
    table.close('sbx-a');
    await new Promise((resolve) => setImmediate(resolve));
    expect((session as ReturnType<typeof fakeSession>).closed).toBe(1);
    expect(table.sandboxIds).toEqual(['sbx-b']);
    table.closeAll();
    await new Promise((resolve) => setImmediate(resolve));
    expect((kept as ReturnType<typeof fakeSession>).closed).toBe(1);
  });
});

function fakeRelay() {
  const relay = {
    isOpen: true,
    closed: 0,
    close() {
      relay.closed += 1;
      relay.isOpen = false;
    },
  };
  return relay;
}

describe('RelayTable', () => {
  it('opens one relay per sandbox, shared by concurrent callers, and opens again once it closed', async () => {
    const table = new RelayTable<ReturnType<typeof fakeRelay>>();
    let started = 0;
    const start = async () => {
      started += 1;
      return fakeRelay();
    };
    const [first, second] = await Promise.all([table.open('sbx-a', start), table.open('sbx-a', start)]);
    expect(first).toBe(second);
    expect(await table.current('sbx-a')).toBe(first);
    expect(table.openRelays.size).toBe(1);
    first.close();
    expect(await table.current('sbx-a')).toBeUndefined();
    const reopened = await table.open('sbx-a', start);
    expect(started).toBe(2);
    // The closed one it replaced no longer counts among the open relays.
    expect([...table.openRelays]).toEqual([reopened]);
  });

  it('closes a relay released while it was opening and tells the opener the sandbox is gone', async () => {
    const table = new RelayTable<ReturnType<typeof fakeRelay>>();
    let finish: (relay: ReturnType<typeof fakeRelay>) => void = () => {};
    const opening = table.open('sbx-a', () => new Promise((resolve) => (finish = resolve)));
    const released = table.release('sbx-a');
    const relay = fakeRelay();
    finish(relay);
    await expect(opening).rejects.toMatchObject({ code: 'SANDBOX_NOT_FOUND' });
    expect(await released).toBe(relay);
    expect(relay.closed).toBe(1);
    expect(table.sandboxIds).toEqual([]);
    expect(table.openRelays.size).toBe(0);
  });

  it('forgets a failed opening', async () => {
    const table = new RelayTable<ReturnType<typeof fakeRelay>>();
    await expect(table.open('sbx-a', () => Promise.reject(new Error('port taken')))).rejects.toThrow(
      'port taken',
    );
    expect(table.sandboxIds).toEqual([]);
    const relay = await table.open('sbx-a', async () => fakeRelay());
    expect(await table.release('sbx-a')).toBe(relay);
    expect(relay.closed).toBe(1);
  });
});

describe('requireSpecCapabilities', () => {
  const capabilities = {
    sessions: true,
    snapshot: false,
    gpus: false,
    diskLimit: false,
    networkModes: ['none'],
  } as unknown as Parameters<typeof requireSpecCapabilities>[1];

  it('names the first missing capability, with the hint on how to turn it on', () => {
    const refuse = (spec: Parameters<typeof requireSpecCapabilities>[2]) => {
      try {
        requireSpecCapabilities('docker', capabilities, spec, { gpus: 'set gpus: true' });
      } catch (error) {
        return error as GymError;
      }
      throw new Error('not refused');
    };
    const gpus = refuse({ resources: { gpus: 1 } as never, network: 'none' });
    expect(gpus.code).toBe('CAPABILITY_UNSUPPORTED');
    expect(gpus.message).toContain('set gpus: true');
    expect(gpus.details).toMatchObject({ provider: 'docker', capability: 'gpus' });
    expect(refuse({ resources: { diskMiB: 10 } as never, network: 'none' }).details).toMatchObject({
      capability: 'diskLimit',
    });
    expect(refuse({ resources: {} as never, network: 'bridge' }).details).toMatchObject({
      capability: 'networkModes',
      available: ['none'],
    });
    expect(() =>
      requireSpecCapabilities('docker', capabilities, { resources: {} as never, network: 'none' }),
    ).not.toThrow();
  });

  it("refuses a multi-container task's services where the provider cannot run them, naming them", () => {
    const spec = {
      resources: {} as never,
      network: 'none' as const,
      services: [{ name: 'db', image: 'gym/db:1', env: {}, dependsOn: [] }],
    };
    let refusal: GymError | undefined;
    try {
      requireSpecCapabilities('kubernetes', capabilities, spec);
    } catch (error) {
      refusal = error as GymError;
    }
    expect(refusal?.code).toBe('CAPABILITY_UNSUPPORTED');
    expect(refusal?.message).toMatch(
      /provider kubernetes cannot run a task's other containers .*spec\.services: db/,
    );
    expect(refusal?.details).toMatchObject({ capability: 'services', services: ['db'] });
    expect(() => requireSpecCapabilities('docker', { ...capabilities, services: true }, spec)).not.toThrow();
  });
});

describe('superviseExec', () => {
  const request = { timeoutMs: 50, maxOutputBytes: 8 };

  it('kills once on the timeout, waits for the kill, and releases the stream after it', async () => {
    let kills = 0;
    let released = false;
    const result = await superviseExec(
      request,
      {},
      {
        run: (output, stopped) =>
          new Promise<string>((resolve) => {
            output.push('stdout', Buffer.from('0123456789abcdef'));
            stopped.addEventListener('abort', () => {
              released = true;
              resolve('ended');
            });
          }),
        kill: async () => {
          kills += 1;
          return 'killed' as const;
        },
        classify: ({ end, timedOut, aborted, killOutcome }, output) => {
          expect({ end, timedOut, aborted, killOutcome }).toEqual({
            end: 'ended',
            timedOut: true,
            aborted: false,
            killOutcome: 'killed',
          });
          return output.result('timeout', null);
        },
      },
    );
    expect(kills).toBe(1);
    expect(released).toBe(true);
    expect(result).toMatchObject({ status: 'timeout', stdoutTruncated: true, stdoutBytes: 16 });
  });

  it("kills on the caller's abort, and a command that ends first is never killed", async () => {
    const controller = new AbortController();
    let kills = 0;
    const aborted = superviseExec(
      { timeoutMs: 60_000, maxOutputBytes: 8 },
      { signal: controller.signal },
      {
        run: (_output, stopped) =>
          new Promise((resolve) => stopped.addEventListener('abort', () => resolve(0))),
        kill: async () => {
          kills += 1;
        },
        classify: ({ aborted: wasAborted, timedOut }, output) =>
          output.result(wasAborted && !timedOut ? 'killed' : 'ok', null),
      },
    );
    controller.abort();
    expect((await aborted).status).toBe('killed');
    const quick = await superviseExec(
      request,
      { signal: controller.signal },
      {
        run: async () => 0,
        kill: async () => {
          kills += 1;
        },
        classify: ({ end }, output) => output.result('ok', end ?? null),
      },
    );
    await new Promise((resolve) => setTimeout(resolve, 80));
    expect(quick).toMatchObject({ status: 'ok', exitCode: 0 });
    expect(kills).toBe(1);
  });

  it("makes a kill that had to take the sandbox the command's loss of it, whatever classify says", async () => {
    let told = 0;
    const result = await superviseExec(
      { timeoutMs: 50, maxOutputBytes: 4096 },
      {},
      {
        run: (output, stopped) =>
          new Promise<number>((resolve) => {
            output.push('stdout', Buffer.from('out'));
            stopped.addEventListener('abort', () => resolve(137));
          }),
        kill: async () => 'sandbox_killed' as const,
        sandboxKilled: () => {
          told += 1;
        },
        classify: (_supervision, output) => output.result('ok', 0),
      },
    );
    expect(told).toBe(1);
    expect(result).toMatchObject({ status: 'timeout', exitCode: null, sandboxLost: true, stdout: 'out' });
    expect(result.stderr).toContain('the sandbox was killed');
  });

  it('hands a failed start to the classification, with the timer released', async () => {
    let kills = 0;
    const result = await superviseExec(
      request,
      {},
      {
        run: async () => {
          throw new Error('cannot start');
        },
        kill: async () => {
          kills += 1;
        },
        classify: ({ end, error }, output) => {
          expect(end).toBeUndefined();
          expect(String(error)).toContain('cannot start');
          return output.result('ok', 126);
        },
      },
    );
    await new Promise((resolve) => setTimeout(resolve, 80));
    expect(result.exitCode).toBe(126);
    expect(kills).toBe(0);
  });
});

describe('resolveUserIds', () => {
  const passwd = async () => 'root:x:0:0::/root:/bin/sh\nagent:x:1000:1001::/home/agent:/bin/sh\n';

  it('reads numbers, uid:gid and names, and refuses a name the sandbox lacks as a command that cannot start', async () => {
    expect(await resolveUserIds('1234', passwd)).toEqual({ uid: 1234, gid: 1234 });
    expect(await resolveUserIds('1234:5', passwd)).toEqual({ uid: 1234, gid: 5 });
    expect(await resolveUserIds('agent', passwd)).toEqual({ uid: 1000, gid: 1001 });
    expect(await resolveUserIds('agent:7', passwd)).toEqual({ uid: 1000, gid: 7 });
    await expect(resolveUserIds('nobody', passwd)).rejects.toMatchObject({ code: 'VALIDATION_FAILED' });
    let read = 0;
    await resolveUserIds('42', async () => {
      read += 1;
      return '';
    });
    expect(read).toBe(0);
  });
});
