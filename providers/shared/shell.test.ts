import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { HOST_STOP_SCRIPT, hostKillNamespaceArgv, killScriptArgv } from './kill-script.ts';
import { parseProcessState } from './proc-stat.ts';
import { printfFormatFor, shellJoin } from './shell.ts';

/** These run the generated shell text in the machine's own /bin/sh: the same POSIX sh the sandboxes have. */
describe('shell helpers', () => {
  it('quotes words so the shell sees them unchanged', () => {
    const words = ['plain', 'with space', "it's", '$HOME', '`id`', '*', 'a\nb', '', '--flag=x'];
    const out = execFileSync('sh', ['-c', `printf '%s\\0' ${shellJoin(words)}`]);
    expect(out.toString().split('\0').slice(0, -1)).toEqual(words);
  });

  it('encodes any bytes as a printf format that reproduces them', () => {
    const bytes = Buffer.concat([randomBytes(4096), Buffer.from('%s %d \\ \' " \n\0')]);
    const out = execFileSync('sh', ['-c', `printf ${printfFormatFor(bytes)}`]);
    expect(out.equals(bytes)).toBe(true);
  });
});

describe('KILL_SCRIPT', () => {
  it('kills every process tagged with the exec id, including ones that left the session', async () => {
    const execId = `exec-unit${Math.random().toString(36).slice(2, 10)}`;
    const child = spawn('sh', ['-c', 'setsid sleep 1004 & sleep 1004 & wait'], {
      env: { ...process.env, GYM_EXEC_ID: execId },
      stdio: 'ignore',
    });
    const untagged = spawn('sleep', ['1004'], {
      env: { ...process.env, GYM_EXEC_ID: `${execId}x` },
      stdio: 'ignore',
    });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const exited = new Promise((resolve) => child.once('exit', resolve));
    execFileSync('sh', killScriptArgv(execId, 'tagged-only').slice(1));
    await exited;
    const tagged = execFileSync('sh', [
      '-c',
      `grep -l "GYM_EXEC_ID=${execId}$" /proc/[0-9]*/environ 2>/dev/null | wc -l`,
    ]);
    expect(tagged.toString().trim()).toBe('0');
    // A process whose id merely starts with the same text is left alone.
    expect(untagged.exitCode).toBeNull();
    untagged.kill('SIGKILL');
  });

  it('stops a parent before killing its child, so the parent never runs its next command', async () => {
    const directory = mkdtempSync(join(tmpdir(), 'gym-kill-'));
    for (let attempt = 0; attempt < 10; attempt += 1) {
      const execId = `exec-race${attempt}${Math.random().toString(36).slice(2, 8)}`;
      const marker = join(directory, `never-${attempt}`);
      const child = spawn('sh', ['-c', `sleep 1006; echo never > ${marker}`], {
        env: { ...process.env, GYM_EXEC_ID: execId },
        stdio: 'ignore',
      });
      await new Promise((resolve) => setTimeout(resolve, 50));
      const exited = new Promise((resolve) => child.once('exit', resolve));
      execFileSync('sh', killScriptArgv(execId, 'tagged-only').slice(1));
      await exited;
      expect(existsSync(marker), `attempt ${attempt}`).toBe(false);
    }
    rmSync(directory, { recursive: true, force: true });
  });
});

describe('killScriptArgv reach', () => {
  /** A tagged session leader with an untagged child in its session; resolves the child's pid. */
  async function leaderWithUntaggedChild(execId: string) {
    const leader = spawn('sh', ['-c', 'env -i sleep 1008 & echo $!; wait'], {
      env: { ...process.env, GYM_EXEC_ID: execId },
      stdio: ['ignore', 'pipe', 'ignore'],
      detached: true,
    });
    const childPid = await new Promise<number>((resolve) =>
      leader.stdout.once('data', (chunk: Buffer) => resolve(Number(chunk.toString().trim()))),
    );
    return { leader, childPid };
  }
  /** Alive and not a zombie (whose reaping is up to whatever adopted it). */
  const isRunning = (pid: number) => {
    const stat = existsSync(`/proc/${pid}/stat`) ? readFileSync(`/proc/${pid}/stat`, 'utf8') : '';
    const state = stat === '' ? null : parseProcessState(stat);
    return state !== null && state !== 'Z' && state !== 'X';
  };

  it('reaches an untagged process of the same session only with tagged-and-their-sessions', async () => {
    const onlyId = `exec-only${Math.random().toString(36).slice(2, 10)}`;
    const only = await leaderWithUntaggedChild(onlyId);
    execFileSync('sh', killScriptArgv(onlyId, 'tagged-only').slice(1));
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(isRunning(only.childPid)).toBe(true);
    process.kill(only.childPid, 'SIGKILL');

    const widerId = `exec-wide${Math.random().toString(36).slice(2, 10)}`;
    const wider = await leaderWithUntaggedChild(widerId);
    execFileSync('sh', killScriptArgv(widerId, 'tagged-and-their-sessions').slice(1));
    const deadline = performance.now() + 2_000;
    while (isRunning(wider.childPid) && performance.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 10));
    expect(isRunning(wider.childPid)).toBe(false);
  });
});

describe('HOST_STOP_SCRIPT', () => {
  // A sandbox whose init died and whose pid a host process took: the namespace then named is
  // the host's own. Run in a pid namespace of the test's own, standing for the host, so a script
  // that stops every process there stops only the test's. Needs root.
  it.skipIf(process.getuid?.() !== 0)(
    "stops nothing when the pid namespace it is given is its own (the host's)",
    () => {
      const inside = [
        'sleep 1016 & victim=$!',
        'sleep 0.2',
        `sh -c "$0" gym-stop /proc/$victim/ns/pid 999999; echo "rc=$?"`,
        'read -r state < /proc/$victim/stat; set -- $state; echo "victim=$3"',
        'kill -9 $victim',
      ].join('\n');
      // Before the guard the script stopped every process here, itself too, and never returned:
      // the time limit kills unshare, and --kill-child the whole namespace.
      const output = execFileSync(
        'unshare',
        ['--fork', '--pid', '--mount-proc', '--kill-child', 'sh', '-c', inside, HOST_STOP_SCRIPT],
        { timeout: 10_000, killSignal: 'SIGKILL' },
      ).toString();
      expect(output).toContain('rc=0');
      expect(output).toContain('victim=S');
    },
  );
});

/**
 * `script` as the init of a pid namespace of its own (unshare's child), after `settleMs`: the
 * unshare process, the init's host pid and the namespace's file. Needs root.
 */
async function pidNamespace(script: string, settleMs: number) {
  const outer = spawn('unshare', ['--fork', '--pid', 'sh', '-c', script], { stdio: 'ignore' });
  await new Promise((resolve) => setTimeout(resolve, settleMs));
  const init = execFileSync('pgrep', ['-P', String(outer.pid)])
    .toString()
    .trim();
  return { outer, init, namespace: `/proc/${outer.pid}/ns/pid_for_children` };
}

describe('HOST_STOP_SCRIPT with zombies', () => {
  // An init that never reaps (here `sleep`, exec'd over the shell that forked its children) keeps
  // a dead child a zombie for good: a stop that counted it went round 50 times and failed.
  it.skipIf(process.getuid?.() !== 0)('stops the live processes and passes over a zombie', async () => {
    // The first child ends after the shell became `sleep`: nothing will reap it.
    const { outer, init, namespace } = await pidNamespace('sleep 0.3 & sleep 1020 & exec sleep 1021', 800);
    try {
      const states = () =>
        execFileSync('sh', [
          '-c',
          `for d in /proc/[0-9]*; do [ "$d/ns/pid" -ef ${namespace} ] && [ "\${d#/proc/}" != ${init} ] && { read -r s < $d/stat; set -- $s; printf '%s ' "$3"; }; done; :`,
        ])
          .toString()
          .trim()
          .split(' ')
          .sort();
      expect(states()).toEqual(['S', 'Z']);
      const output = execFileSync('sh', ['-c', HOST_STOP_SCRIPT, 'gym-stop', namespace, init], {
        timeout: 20_000,
      }).toString();
      // One process killed, however many rounds saw it still dying on a loaded host.
      expect(output.trim()).toBe('1');
      // The sleep it killed is a zombie too once its exit is through (nothing reaps here):
      // nothing is left alive.
      const deadline = performance.now() + 5_000;
      while (states().join() !== 'Z,Z' && performance.now() < deadline)
        await new Promise((resolve) => setTimeout(resolve, 20));
      expect(states()).toEqual(['Z', 'Z']);
    } finally {
      outer.kill('SIGKILL');
    }
  });
});

describe('HOST_STOP_SCRIPT with an init that starts a child again', () => {
  // Enroot's keeper: an init whose loop starts its `sleep` again as soon as it dies. Every round
  // of the stop found a new one, so the stop ended only when a round fell between a death and
  // the next start: it failed on a host where the init always won (50 rounds, exit 1).
  it.skipIf(process.getuid?.() !== 0)(
    'holds the init while it stops the rest, then lets it go on',
    async () => {
      const { outer, init, namespace } = await pidNamespace(
        'sleep 1030 & while :; do sleep 1031 & wait $!; done',
        500,
      );
      try {
        const output = execFileSync('sh', ['-c', HOST_STOP_SCRIPT, 'gym-stop', namespace, init], {
          timeout: 20_000,
        }).toString();
        // The two sleeps of before; none started while the stop ran.
        expect(output.trim()).toBe('2');
        // The init goes on (not left stopped) and starts its sleep again.
        const deadline = performance.now() + 5_000;
        const state = () =>
          execFileSync('sh', ['-c', `read -r s < /proc/${init}/stat; set -- $s; echo $3`])
            .toString()
            .trim();
        const children = () =>
          execFileSync('sh', ['-c', `cat /proc/${init}/task/${init}/children`])
            .toString()
            .trim();
        while ((state() === 'T' || children() === '') && performance.now() < deadline)
          await new Promise((resolve) => setTimeout(resolve, 20));
        expect(state()).not.toBe('T');
        expect(children()).not.toBe('');
      } finally {
        outer.kill('SIGKILL');
      }
    },
  );
});

describe('HOST_KILL_NAMESPACE_SCRIPT', () => {
  // The escalation when a host kill was outrun: the namespace's init goes, and with it every
  // process of the namespace, however fast they fork. Needs root (a pid namespace of its own).
  it.skipIf(process.getuid?.() !== 0)(
    'kills every process of a pid namespace, a fork loop included',
    async () => {
      const outer = spawn(
        'unshare',
        ['--fork', '--pid', 'sh', '-c', 'while :; do sleep 1015 & sleep 0.05; done & sleep 1015 & wait'],
        { stdio: 'ignore' },
      );
      await new Promise((resolve) => setTimeout(resolve, 300));
      const namespace = `/proc/${outer.pid}/ns/pid_for_children`;
      const inNamespace = () =>
        execFileSync('sh', [
          '-c',
          `n=0; for d in /proc/[0-9]*; do [ "$d/ns/pid" -ef ${namespace} ] && n=$((n+1)); done; echo $n`,
        ])
          .toString()
          .trim();
      expect(Number(inNamespace())).toBeGreaterThan(1);
      const exited = new Promise((resolve) => outer.once('exit', resolve));
      try {
        execFileSync('sh', hostKillNamespaceArgv('busybox', namespace).slice(2));
        await exited;
        expect(existsSync(namespace)).toBe(false);
      } finally {
        // Whatever the script left of the loop must not outlive the test.
        execFileSync('sh', [
          '-c',
          `for d in /proc/[0-9]*; do [ "$d/ns/pid" -ef ${namespace} ] && kill -9 "\${d#/proc/}"; done 2>/dev/null; true`,
        ]);
      }
    },
  );
});
