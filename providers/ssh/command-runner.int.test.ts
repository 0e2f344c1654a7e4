/**
 * The command runner against a real OpenSSH server whose user's ~/.bashrc is the test's: the
 * start-up file runs once per connection, a blocking one is a bounded error, a host without perl
 * keeps the per-command path, and the exec contract holds through the runner (exit status,
 * signals, stdin, bounded windows, a kill or a closed connection kills the process group).
 */
import { execFileSync } from 'node:child_process';
import { mkdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { GymError } from '../../core/errors.ts';
import { type Logger, silentLogger } from '../../core/logger.ts';
import { startSshd, type TestSshd } from '../../test/fixtures/sshd.ts';
import { DEFAULT_TARGET, SshConnection, type SshTarget } from './connection.ts';
import { OUTPUT_WINDOW_BYTES } from './runner-script.ts';

let sshd: TestSshd;
let connections: SshConnection[] = [];
const connect = (overrides: Partial<SshTarget> = {}, logger: Logger = silentLogger) => {
  const connection = new SshConnection(
    {
      ...DEFAULT_TARGET,
      host: sshd.host,
      port: sshd.port,
      username: 'root',
      privateKeyPath: sshd.clientKeyPath,
      knownHostsPath: sshd.knownHostsPath,
      ...overrides,
    },
    logger,
  );
  connections.push(connection);
  return connection;
};

async function run(connection: SshConnection, command: string, stdin?: Buffer) {
  let stdout = '';
  let stderr = '';
  const exit = await connection.exec(command, {
    ...(stdin === undefined ? {} : { stdin }),
    onStdout: (chunk) => {
      stdout += chunk.toString();
    },
    onStderr: (chunk) => {
      stderr += chunk.toString();
    },
  });
  return { ...exit, stdout, stderr };
}

const rcCount = () => join(sshd.home, 'rc-count');
/** A ~/.bashrc that counts its runs (and does `extra`). */
async function bashrc(extra = ''): Promise<void> {
  await rm(rcCount(), { force: true });
  await writeFile(join(sshd.home, '.bashrc'), `echo run >> "$HOME/rc-count"\n${extra}\n`);
}
const rcRuns = async () =>
  (await readFile(rcCount(), 'utf8').catch(() => '')).split('\n').filter((line) => line === 'run').length;

/** Whether a host process is gone (or a zombie no one waits for). */
function isGone(pid: number): boolean {
  try {
    const stat = execFileSync('cat', [`/proc/${pid}/stat`], {
      stdio: ['ignore', 'pipe', 'ignore'],
    }).toString();
    return stat.split(') ')[1]?.startsWith('Z') ?? true;
  } catch {
    return true;
  }
}

beforeAll(async () => {
  sshd = await startSshd({ host: '127.0.0.3', port: 23000 + (process.pid % 1000) });
});
afterEach(() => {
  for (const connection of connections) connection.close();
  connections = [];
});
afterAll(async () => {
  await sshd?.cleanup();
});

describe('ssh command runner', () => {
  it('runs the shell start-up file once per connection, not once per command', async () => {
    // It also prints, as some do: none of that reaches a command's output.
    await bashrc('echo welcome to the cluster');
    const connection = connect();
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, index) => run(connection, `echo ${index}`)),
    );
    expect(results.map((result) => result.stdout)).toEqual(
      Array.from({ length: 12 }, (_, index) => `${index}\n`),
    );
    expect(await run(connection, 'echo again')).toMatchObject({ code: 0, stdout: 'again\n' });
    expect(await rcRuns()).toBe(1);
    // The per-command path (what every command paid before): one run of the file each.
    const perCommand = connect({ commandRunner: false });
    for (let index = 0; index < 3; index += 1) await run(perCommand, 'true');
    expect(await rcRuns()).toBe(4);
  });

  it('keeps the exec contract: exit codes, signals, both streams, stdin and large output', async () => {
    await bashrc();
    const connection = connect();
    expect(await run(connection, 'echo out; echo err >&2; exit 3')).toMatchObject({
      code: 3,
      signal: null,
      stdout: 'out\n',
      stderr: 'err\n',
    });
    expect(await run(connection, 'kill -KILL $$')).toMatchObject({ code: null, signal: 'SIGKILL' });
    expect(await run(connection, 'kill -TERM $$')).toMatchObject({ code: null, signal: 'SIGTERM' });
    expect((await run(connection, 'tr a-z A-Z', Buffer.from('shout'))).stdout).toBe('SHOUT');
    // Stdin and output far past the runner's windows (1 MiB each), through one command.
    const big = Buffer.alloc(5 * 1024 * 1024, 'x');
    expect((await run(connection, 'wc -c', big)).stdout.trim()).toBe(String(big.length));
    let received = 0;
    const exit = await connection.exec('head -c 9000000 /dev/zero', {
      onStdout: (chunk) => {
        received += chunk.length;
      },
    });
    expect({ exit, received }).toEqual({ exit: { code: 0, signal: null }, received: 9_000_000 });
    // 200 quick commands at once all report their exit.
    const exits = await Promise.all(Array.from({ length: 200 }, () => connection.exec('exit 7')));
    expect(exits.filter((each) => each.code !== 7)).toEqual([]);
    expect(await rcRuns()).toBe(1);
  });

  it('gives a command no descriptor of the runner or of other commands', async () => {
    await bashrc();
    const connection = connect();
    const holding = connection.start('sleep 30');
    const listed = await run(connection, 'exec ls /proc/self/fd');
    // ls's own: stdin, stdout, stderr and the folder it reads.
    expect(listed.stdout.split('\n').filter(Boolean)).toEqual(['0', '1', '2', '3']);
    (await holding).close();
  });

  it('holds back only the output of a paused command', async () => {
    await bashrc();
    const connection = connect();
    let received = 0;
    const paused = await connection.start('head -c 6000000 /dev/zero', {
      onStdout: (chunk) => {
        received += chunk.length;
      },
    });
    paused.pause();
    paused.end();
    // It gets its first window, then nothing more while paused...
    await expect.poll(() => received).toBe(OUTPUT_WINDOW_BYTES);
    // ...while others go on over the same runner.
    expect((await run(connection, 'echo meanwhile')).stdout).toBe('meanwhile\n');
    expect((await run(connection, 'head -c 3000000 /dev/zero | wc -c')).stdout.trim()).toBe('3000000');
    expect(received).toBe(OUTPUT_WINDOW_BYTES);
    paused.resume();
    expect(await paused.done).toEqual({ code: 0, signal: null });
    expect(received).toBe(6_000_000);
  });

  it('kills the process group of a command it closes, and of every command when the connection closes', async () => {
    await bashrc();
    const connection = connect();
    // A command's parent is the runner.
    const runner = Number((await run(connection, 'echo $PPID')).stdout.trim());
    expect(execFileSync('ps', ['-o', 'args=', '-p', String(runner)]).toString()).toContain(
      'gym-command-runner',
    );
    const pids: number[] = [];
    /** Starts a command that leaves a background sleep in its group; resolves once its pid is known. */
    const started = async () => {
      let said = '';
      let known: () => void = () => {};
      const isKnown = new Promise<void>((resolve) => {
        known = resolve;
      });
      const process = await connection.start('sleep 1000 & echo $!; wait', {
        onStdout: (chunk) => {
          said += chunk.toString();
          if (said.includes('\n')) known();
        },
      });
      await isKnown;
      pids.push(Number(said.trim()));
      return process;
    };
    const aborted = new AbortController();
    const first = await connection.start('sleep 1000 & echo $!; wait', {
      signal: aborted.signal,
      onStdout: (chunk) => pids.push(Number(chunk.toString().trim())),
    });
    await expect.poll(() => pids.length).toBe(1);
    aborted.abort();
    await expect(first.done).rejects.toBeInstanceOf(GymError);
    await expect.poll(() => isGone(pids[0]!)).toBe(true);

    const second = await started();
    const third = await started();
    // Both ran on: the abort killed only its own command.
    expect([isGone(pids[1]!), isGone(pids[2]!)]).toEqual([false, false]);
    second.close();
    expect(await second.done).toEqual({ code: null, signal: null });
    await expect.poll(() => isGone(pids[1]!)).toBe(true);
    expect(isGone(pids[2]!)).toBe(false);
    connection.close();
    await expect(third.done).rejects.toBeInstanceOf(GymError);
    await expect.poll(() => isGone(pids[2]!)).toBe(true);
    await expect.poll(() => isGone(runner)).toBe(true);
    // The runner went with its connection.
    await expect.poll(() => isGone(runner)).toBe(true);
  });

  it('ends its commands with an unknown exit when the runner dies under a live connection, then starts another', async () => {
    await bashrc();
    const connection = connect();
    const runner = Number((await run(connection, 'echo $PPID')).stdout.trim());
    let said = '';
    const running = await connection.start('sleep 1000 & echo $!; wait', {
      onStdout: (chunk) => {
        said += chunk.toString();
      },
    });
    await expect.poll(() => said.includes('\n')).toBe(true);
    process.kill(runner, 'SIGTERM');
    // Not a success, not a dropped connection: unknown, as a channel closed without an exit status.
    expect(await running.done).toEqual({ code: null, signal: null });
    // It took its commands with it.
    await expect.poll(() => isGone(Number(said.trim()))).toBe(true);
    expect(await run(connection, 'echo next')).toMatchObject({ code: 0, stdout: 'next\n' });
    expect(await rcRuns()).toBe(2);
  });

  it('fails with a clear, bounded error when a start-up file blocks', async () => {
    const gate = join(sshd.home, 'gate');
    execFileSync('mkfifo', [gate]);
    try {
      await bashrc(`read line < "${gate}"`);
      const connection = connect({ shellStartTimeoutMs: 1500 });
      const error = (await connection.exec('true').catch((caught: unknown) => caught)) as GymError;
      expect(error).toBeInstanceOf(GymError);
      expect(error.code).toBe('PROVIDER_TIMEOUT');
      expect(error.details.reason).toBe('shell-start');
      expect(error.message).toMatch(/start-up file .* blocks/);
      // Meanwhile the next command fails at once with the same error rather than wait again.
      const again = (await connection.exec('true').catch((caught: unknown) => caught)) as GymError;
      expect(again).toBe(error);
    } finally {
      // Lets the blocked shells go.
      await writeFile(gate, 'go\n'.repeat(4)).catch(() => {});
      await rm(gate, { force: true });
    }
  });

  it('keeps the per-command path on a host without perl, and says why', async () => {
    const bin = join(sshd.directory, 'no-perl-bin');
    await mkdir(bin, { recursive: true });
    for (const tool of ['sh', 'cat', 'echo']) await symlink(`/bin/${tool}`, join(bin, tool)).catch(() => {});
    await bashrc(`PATH=${bin}`);
    const warnings: Array<Record<string, unknown>> = [];
    const logger: Logger = {
      ...silentLogger,
      warn: (object: Record<string, unknown> | string) => {
        if (typeof object !== 'string') warnings.push(object);
      },
    };
    const connection = connect({}, logger);
    expect(await run(connection, 'echo one; exit 4')).toMatchObject({ code: 4, stdout: 'one\n' });
    expect(await run(connection, 'echo two')).toMatchObject({ code: 0, stdout: 'two\n' });
    // One run for the runner's try, then one per command.
    expect(await rcRuns()).toBe(3);
    expect(warnings).toEqual([expect.objectContaining({ reason: 'no perl on the PATH' })]);
  });
});
