import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../core/logger.ts';
import type { SandboxProvider } from '../../providers/sandbox-provider.ts';
import type { PtyEnd, PtyOpenOptions, PtyOpenRequest } from '../../providers/shared/pty-channel.ts';
import type { SandboxRecord } from '../state-store.ts';
import { PtySessions } from './pty-sessions.ts';

/** A provider whose terminal the test drives by hand: output and end when the test says. */
function handDriven() {
  const opened: Array<{ request: PtyOpenRequest; options: PtyOpenOptions; end(end: PtyEnd): void }> = [];
  const provider = {
    capabilities: { pty: true },
    openPty: async (_id: string, request: PtyOpenRequest, options: PtyOpenOptions) => {
      let end: (value: PtyEnd) => void = () => {};
      const ended = new Promise<PtyEnd>((resolve) => {
        end = resolve;
      });
      opened.push({ request, options, end });
      return {
        write: () => {},
        resize: async () => {},
        ended,
        close: () => end({ exitCode: null, lost: 'closed' }),
      };
    },
    exec: async () => ({ status: 'ok', exitCode: 0 }),
  } as unknown as SandboxProvider;
  const live = new Set(['sbx-aaaaaaaa']);
  const sessions = new PtySessions({
    sandboxes: {
      record: (id) => {
        if (!live.has(id)) throw new Error(`sandbox ${id} does not exist`);
        return { id, provider: 'hand', execEnv: {} } as unknown as SandboxRecord;
      },
      provider: () => provider,
      touch: async () => {},
    },
    logger: silentLogger,
    limits: { maxPerSandbox: 2, ringBytes: 16 },
  });
  return { sessions, opened, live };
}

describe('PtySessions', () => {
  it('a wait outlives output that comes before the end, and answers at the end', async () => {
    const { sessions, opened } = handDriven();
    const { pty } = await sessions.create('sbx-aaaaaaaa', { command: 'true' });
    const waiting = sessions.get('sbx-aaaaaaaa', pty.id, { waitMs: 60_000 });
    opened[0]!.options.onOutput('stdout', Buffer.from('some output'));
    await new Promise((resolve) => setImmediate(resolve));
    opened[0]!.end({ exitCode: 7 });
    expect(await waiting).toMatchObject({ state: 'exited', exitCode: 7 });
  });

  it('keeps at most its window of output, and counts what a replay lost', async () => {
    const { sessions, opened } = handDriven();
    const { pty } = await sessions.create('sbx-aaaaaaaa', {});
    opened[0]!.options.onOutput('stdout', Buffer.from('0123456789abcdefghij'));
    const read = await sessions.read('sbx-aaaaaaaa', pty.id, { since: '0' });
    expect(Buffer.from(read.data, 'base64').toString()).toBe('456789abcdefghij');
    expect(read).toMatchObject({ offset: 4, dropped: 4, next: 20, eof: false });
    expect(sessions.stats().heldBytes).toBeLessThanOrEqual(16 * 2);
  });

  it('refuses a terminal past the limit unless one ended, and forgets them with their sandbox', async () => {
    const { sessions, opened } = handDriven();
    await sessions.create('sbx-aaaaaaaa', {});
    await sessions.create('sbx-aaaaaaaa', {});
    await expect(sessions.create('sbx-aaaaaaaa', {})).rejects.toMatchObject({ code: 'PTY_LIMIT_REACHED' });
    opened[0]!.end({ exitCode: 0 });
    await new Promise((resolve) => setImmediate(resolve));
    await sessions.create('sbx-aaaaaaaa', {});
    expect(sessions.stats().sessions).toBe(2);
    sessions.forget('sbx-aaaaaaaa');
    expect(sessions.stats()).toEqual({ sessions: 0, heldBytes: 0, waiting: 0 });
  });

  it('a takeover evicts the holder; without it a held terminal refuses', async () => {
    const { sessions } = handDriven();
    const first = await sessions.create('sbx-aaaaaaaa', {});
    expect(() => sessions.attach('sbx-aaaaaaaa', first.pty.id, { takeover: false })).toThrow(
      expect.objectContaining({ code: 'PTY_HELD' }),
    );
    const second = sessions.attach('sbx-aaaaaaaa', first.pty.id, {});
    expect(() =>
      sessions.write('sbx-aaaaaaaa', first.pty.id, { data: 'eA==', attachment: first.attachment }),
    ).toThrow(expect.objectContaining({ code: 'PTY_DETACHED' }));
    sessions.write('sbx-aaaaaaaa', first.pty.id, { data: 'eA==', attachment: second.attachment });
  });
});

describe('PtySessions on a provider without terminals', () => {
  it('refuses with CAPABILITY_UNSUPPORTED naming the capability, before anything opens', async () => {
    const sessions = new PtySessions({
      sandboxes: {
        record: (id) => ({ id, provider: 'plain', execEnv: {} }) as unknown as SandboxRecord,
        provider: () => ({ capabilities: {} }) as unknown as SandboxProvider,
        touch: async () => {},
      },
      logger: silentLogger,
    });
    await expect(sessions.create('sbx-aaaaaaaa', {})).rejects.toMatchObject({
      code: 'CAPABILITY_UNSUPPORTED',
      details: { provider: 'plain', capability: 'pty' },
    });
    expect(sessions.stats().sessions).toBe(0);
  });
});

describe('PtySessions under parallel creates', () => {
  it('counts opens in flight against the limit', async () => {
    const { sessions } = handDriven();
    const results = await Promise.allSettled([1, 2, 3, 4, 5].map(() => sessions.create('sbx-aaaaaaaa', {})));
    expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(2);
    expect(
      results
        .filter((result) => result.status === 'rejected')
        .map((result) => (result as PromiseRejectedResult).reason.code),
    ).toEqual(['PTY_LIMIT_REACHED', 'PTY_LIMIT_REACHED', 'PTY_LIMIT_REACHED']);
    expect(sessions.stats().sessions).toBe(2);
  });
});

describe('PtySessions at the daemon stop', () => {
  it('answers a waiting read at once, so the drain is not held', async () => {
    const { sessions } = handDriven();
    const { pty } = await sessions.create('sbx-aaaaaaaa', {});
    const waiting = sessions.read('sbx-aaaaaaaa', pty.id, { since: '0', waitMs: '60000' });
    sessions.releaseWaiters();
    expect(await waiting).toMatchObject({ data: '', eof: false, state: 'running' });
  });
});
