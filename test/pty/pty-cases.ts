/**
 * Terminals (PTY sessions) through the daemon's API, the same cases on every provider (issue 35,
 * item 3): a session echoes, resizes (`stty size` shows it), takes a signal, waits for its exit
 * code, replays from an offset on attach; and, the agent being the adversary, a terminal printing
 * without end stays within its window, no terminal outlives its sandbox, and another sandbox's
 * credential cannot reach it. A test file gives the daemon and a way to make sandboxes.
 */
import { randomBytes } from 'node:crypto';
import { expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import type { PtyClient } from '../../client/ptys.ts';
import type { GymError } from '../../core/errors.ts';
import { DEFAULT_PTY_LIMITS } from '../../daemon/ptys/pty-sessions.ts';
import type { TestDaemon } from '../daemon-harness.ts';

export interface PtyCaseSetup {
  daemon(): TestDaemon;
  client(): GymClient;
  /** A new ready sandbox of the provider under test, destroyed by the test file's cleanup if left. */
  sandbox(): Promise<string>;
  /**
   * Whether a process whose command line holds `marker` runs on the host the sandboxes run on
   * (their processes are the host's, in namespaces of their own). Absent: not checked there.
   */
  hostHasProcess?(marker: string): Promise<boolean>;
}

/** Reads until `pattern` shows in the output (from `since`); each read waits up to 5 s, 24 reads at most. */
export async function readUntil(
  ptys: PtyClient,
  sandboxId: string,
  ptyId: string,
  pattern: RegExp,
  options: { since?: number; attachment?: string; withinMs?: number } = {},
): Promise<{ text: string; next: number }> {
  let text = '';
  let since = options.since ?? 0;
  // Bounded by time, not by reads: a shell on an SSH terminal echoes what it is typed a few
  // bytes at a time, and 24 reads ran out in half a second before its answer came.
  const deadline = performance.now() + (options.withinMs ?? 45_000);
  while (performance.now() < deadline) {
    const chunk = await ptys.read(sandboxId, ptyId, {
      since,
      waitMs: Math.max(1, Math.min(5_000, Math.round(deadline - performance.now()))),
      ...(options.attachment === undefined ? {} : { attachment: options.attachment }),
    });
    text += chunk.data.toString('utf8');
    since = chunk.next;
    if (pattern.test(text)) return { text, next: since };
    if (chunk.eof) break;
  }
  throw new Error(`terminal output never showed ${pattern}: ${JSON.stringify(text.slice(-2000))}`);
}

async function errorOf(promise: Promise<unknown>): Promise<GymError> {
  return promise.then(
    () => {
      throw new Error('expected the call to fail');
    },
    (error: unknown) => error as GymError,
  );
}

/** Waits (100 reads at most) until a process of the sandbox has `commandLine` as its command line. */
async function waitForProcess(client: GymClient, sandboxId: string, commandLine: string): Promise<void> {
  const scan = `for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done`;
  for (let round = 0; round < 100; round += 1) {
    const result = await client.exec(sandboxId, { command: scan });
    if (result.stdout.split('\n').some((line) => line.trim() === commandLine)) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`no process ${commandLine} in ${sandboxId}`);
}

export function ptyCases(setup: PtyCaseSetup): void {
  const ptys = () => setup.client().ptys;

  it('a shell on a terminal echoes what it runs, and closes', async () => {
    const sandboxId = await setup.sandbox();
    const { pty, attachment } = await ptys().create(sandboxId, {});
    expect(pty).toMatchObject({ state: 'running', tty: true, rows: 24, cols: 80, held: true });
    await ptys().write(sandboxId, pty.id, 'echo gym-$((6 * 7))-done\n', { attachment });
    const { text } = await readUntil(ptys(), sandboxId, pty.id, /gym-42-done/, { attachment });
    // The terminal echoes the typed line too: the arithmetic shows it ran, not only echoed.
    expect(text).toContain('gym-$((6 * 7))-done');
    expect((await ptys().list(sandboxId)).map((item) => item.id)).toContain(pty.id);
    await ptys().close(sandboxId, pty.id);
    expect((await errorOf(ptys().get(sandboxId, pty.id))).code).toBe('PTY_NOT_FOUND');
    // Idempotent.
    await ptys().close(sandboxId, pty.id);
  });

  it('opens at the asked size and resizes (stty size shows both)', async () => {
    const sandboxId = await setup.sandbox();
    const { pty } = await ptys().create(sandboxId, { rows: 31, cols: 101 });
    // Kubernetes sets a terminal's size on its resize channel once the exec is open (as kubectl
    // does): a program that asks at once may see the default first. Asked again until it shows.
    let first: { text: string; next: number } | undefined;
    for (let attempt = 0; first === undefined && attempt < 10; attempt += 1) {
      await ptys().write(sandboxId, pty.id, 'stty size\n');
      first = await readUntil(ptys(), sandboxId, pty.id, /^31 101\r?$/m, { withinMs: 4_000 }).catch(
        () => undefined,
      );
    }
    if (first === undefined) throw new Error('the terminal never showed its opening size 31 101');
    const resized = await ptys().resize(sandboxId, pty.id, { rows: 45, cols: 132 });
    expect(resized).toMatchObject({ rows: 45, cols: 132 });
    await ptys().write(sandboxId, pty.id, 'stty size\n');
    await readUntil(ptys(), sandboxId, pty.id, /^45 132\r?$/m, { since: first.next });
    await ptys().close(sandboxId, pty.id);
  });

  it('a signal ends a sleeping command, and so does Ctrl-C typed on the terminal', async () => {
    const sandboxId = await setup.sandbox();
    const { pty } = await ptys().create(sandboxId, { command: 'sleep 300' });
    // A signal sent before the command runs finds nothing to end (a runtime slow to start it).
    await waitForProcess(setup.client(), sandboxId, 'sleep 300');
    await ptys().signal(sandboxId, pty.id, 'SIGINT');
    const ended = await ptys().get(sandboxId, pty.id, { waitMs: 30_000 });
    expect(ended.state).toBe('exited');
    expect(ended.exitCode).not.toBe(0);

    const shell = await ptys().create(sandboxId, {});
    await ptys().write(sandboxId, shell.pty.id, 'sleep 299; echo after-$((1 + 1))\n');
    // Typed before the shell ran the line, Ctrl-C would only discard it: wait for the sleep.
    await waitForProcess(setup.client(), sandboxId, 'sleep 299');
    // Ctrl-C reaches the foreground job through the terminal's line discipline; the shell lives on.
    await ptys().write(sandboxId, shell.pty.id, '\u0003');
    await ptys().write(sandboxId, shell.pty.id, 'echo alive-$((2 + 3))\n');
    const { text } = await readUntil(ptys(), sandboxId, shell.pty.id, /alive-5/);
    expect(text).not.toContain('after-2');
    expect((await ptys().get(sandboxId, shell.pty.id)).state).toBe('running');
  });

  it('waits for the exit and gives its code; the output ends with eof', async () => {
    const sandboxId = await setup.sandbox();
    const { pty } = await ptys().create(sandboxId, { command: 'echo bye-$((3 * 3)); exit 7' });
    const ended = await ptys().get(sandboxId, pty.id, { waitMs: 30_000 });
    expect(ended).toMatchObject({ state: 'exited', exitCode: 7 });
    const output = await ptys().read(sandboxId, pty.id, { since: 0 });
    expect(output.data.toString()).toContain('bye-9');
    expect(output).toMatchObject({ eof: true, exitCode: 7, offset: 0 });
    // Writing to an ended terminal is refused, not lost silently.
    expect((await errorOf(ptys().write(sandboxId, pty.id, 'x'))).code).toBe('SANDBOX_NOT_READY');
  });

  it('without a terminal, stdout and stderr come apart', async () => {
    const sandboxId = await setup.sandbox();
    const { pty } = await ptys().create(sandboxId, {
      command: 'echo out-$((4 + 4)); echo err-$((5 + 5)) >&2; exit 3',
      tty: false,
    });
    const ended = await ptys().get(sandboxId, pty.id, { waitMs: 30_000 });
    expect(ended).toMatchObject({ state: 'exited', exitCode: 3, tty: false });
    const stdout = await ptys().read(sandboxId, pty.id, { since: 0 });
    const stderr = await ptys().read(sandboxId, pty.id, { since: 0, stream: 'stderr' });
    expect(stdout.data.toString()).toBe('out-8\n');
    expect(stderr.data.toString()).toBe('err-10\n');
  });

  it('another client re-attaches, replays from an offset and evicts the holder', async () => {
    const sandboxId = await setup.sandbox();
    const first = await ptys().create(sandboxId, {});
    await ptys().write(sandboxId, first.pty.id, 'echo first-$((10 + 1))\n', { attachment: first.attachment });
    const seen = await readUntil(ptys(), sandboxId, first.pty.id, /first-11/, {
      attachment: first.attachment,
    });
    // Held: an attach that does not take over is refused.
    expect((await errorOf(ptys().attach(sandboxId, first.pty.id, { takeover: false }))).code).toBe(
      'PTY_HELD',
    );
    // Another process (its own client), taking over: replay from 0 holds what the first saw.
    const other = new GymClient({ url: setup.daemon().address.url as string, token: setup.daemon().token });
    const second = await other.ptys.attach(sandboxId, first.pty.id);
    const replay = await other.ptys.read(sandboxId, first.pty.id, {
      since: 0,
      attachment: second.attachment,
    });
    expect(replay.offset).toBe(0);
    expect(replay.data.toString()).toContain('first-11');
    // From an offset: exactly the bytes from there (and whatever the shell printed since).
    const tail = await other.ptys.read(sandboxId, first.pty.id, { since: seen.next - 3 });
    expect(tail.offset).toBe(seen.next - 3);
    expect(tail.data.toString().startsWith(seen.text.slice(-3))).toBe(true);
    // The evicted holder's next call fails.
    expect(
      (await errorOf(ptys().write(sandboxId, first.pty.id, 'x', { attachment: first.attachment }))).code,
    ).toBe('PTY_DETACHED');
    // The new holder drives it; detached, another attaches without a takeover.
    await other.ptys.write(sandboxId, first.pty.id, 'echo second-$((20 + 2))\n', {
      attachment: second.attachment,
    });
    await readUntil(other.ptys, sandboxId, first.pty.id, /second-22/, { since: seen.next });
    await other.ptys.detach(sandboxId, first.pty.id, second.attachment);
    const third = await ptys().attach(sandboxId, first.pty.id, { takeover: false });
    expect(third.pty.held).toBe(true);
  });

  it('adversary: a terminal printing without end stays within its window', async () => {
    const sandboxId = await setup.sandbox();
    const { pty } = await ptys().create(sandboxId, { command: 'yes gym-flood-line' });
    const ring = DEFAULT_PTY_LIMITS.ringBytes;
    let info = await ptys().get(sandboxId, pty.id);
    for (let round = 0; round < 600 && info.output.end < 8 * ring; round += 1) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      info = await ptys().get(sandboxId, pty.id);
    }
    expect(info.output.end).toBeGreaterThanOrEqual(8 * ring);
    expect(info.output.end - info.output.start).toBeLessThanOrEqual(ring);
    expect(setup.daemon().manager.ptys.stats().heldBytes).toBeLessThanOrEqual(
      DEFAULT_PTY_LIMITS.maxPerSandbox * 2 * ring,
    );
    const replay = await ptys().read(sandboxId, pty.id, { since: 0 });
    expect(replay.dropped).toBeGreaterThan(0);
    expect(replay.offset).toBe(replay.dropped);
    await ptys().close(sandboxId, pty.id);
  });

  it('adversary: no terminal outlives its sandbox', async () => {
    const sandboxId = await setup.sandbox();
    const seconds = 100_000 + randomBytes(3).readUIntBE(0, 3);
    const { pty } = await ptys().create(sandboxId, { command: `sleep ${seconds}` });
    const shell = await ptys().create(sandboxId, {});
    await ptys().write(sandboxId, shell.pty.id, `sleep ${seconds + 1} &\necho started-$((7 * 7))\n`);
    await readUntil(ptys(), sandboxId, shell.pty.id, /started-49/);
    if (setup.hostHasProcess !== undefined) {
      expect(await setup.hostHasProcess(`sleep ${seconds}`)).toBe(true);
      expect(await setup.hostHasProcess(`sleep ${seconds + 1}`)).toBe(true);
    }
    const held = setup.daemon().manager.ptys.stats().sessions;
    await setup.client().destroySandbox(sandboxId);
    expect((await errorOf(ptys().get(sandboxId, pty.id))).code).toBe('SANDBOX_NOT_FOUND');
    // The daemon let go of both sessions (their transports, their output).
    expect(setup.daemon().manager.ptys.stats().sessions).toBe(held - 2);
    if (setup.hostHasProcess !== undefined) {
      expect(await setup.hostHasProcess(`sleep ${seconds}`)).toBe(false);
      expect(await setup.hostHasProcess(`sleep ${seconds + 1}`)).toBe(false);
    }
  });

  it("adversary: another sandbox's credential cannot reach a terminal", async () => {
    const victim = await setup.sandbox();
    const attacker = await setup.sandbox();
    const { pty } = await ptys().create(victim, {});
    const grant = await setup.client().grantAccess({ sandboxIds: [attacker], rights: ['exec', 'pty'] });
    const scoped = new GymClient({ url: setup.daemon().address.url as string, token: grant.token });
    // Its own sandbox's terminals: allowed.
    expect(await scoped.ptys.list(attacker)).toEqual([]);
    for (const attempt of [
      scoped.ptys.attach(victim, pty.id),
      scoped.ptys.read(victim, pty.id, { since: 0 }),
      scoped.ptys.write(victim, pty.id, 'id\n'),
      scoped.ptys.list(victim),
      scoped.ptys.create(victim, {}),
    ])
      expect((await errorOf(attempt)).code).toBe('ACCESS_DENIED');
    // The victim's terminal id under the attacker's own sandbox is no terminal at all.
    expect((await errorOf(scoped.ptys.attach(attacker, pty.id))).code).toBe('PTY_NOT_FOUND');
    expect((await errorOf(scoped.ptys.read(attacker, pty.id, { since: 0 }))).code).toBe('PTY_NOT_FOUND');
  });
}

/** Whether any process of this host has `marker` in its command line (the host's /proc). */
export async function hostProcessWith(marker: string): Promise<boolean> {
  const { readdir, readFile } = await import('node:fs/promises');
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const line = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    if (line.split('\0').join(' ').includes(marker)) return true;
  }
  return false;
}
