/**
 * One SSH connection to one host, shared by every sandbox on it: key or agent authentication,
 * the host key checked against a known_hosts file (an unknown, changed or revoked key is refused,
 * never accepted silently), keepalives, reconnection with backoff, and at most `maxChannels`
 * sessions open at once (OpenSSH's MaxSessions is 10 by default; an 11th exec fails to open).
 *
 * `exec` runs one command and ends when it ends: exit code or signal, stdout and stderr as they
 * come, stdin fed and closed. A connection that drops mid-command rejects the command with
 * `PROVIDER_UNAVAILABLE`, which the provider turns into `sandbox_gone` or `unreachable`.
 *
 * Commands go through the connection's command runner (`command-runner.ts`): one exec channel
 * whose login shell starts a runner once, so the SSH user's shell start-up files are paid once
 * per connection, not per command; each command is `/bin/sh -c LINE` in its own process group.
 * A host without `perl` keeps one exec channel per command (logged once, with the reason); a
 * shell that does not start the runner within `shellStartTimeoutMs` (a start-up file that blocks)
 * fails the commands waiting for it with `PROVIDER_TIMEOUT`, and the next try waits
 * `SHELL_RETRY_MS` first.
 */
import { readFile } from 'node:fs/promises';
import { Client, type ClientChannel, type ConnectConfig } from 'ssh2';
import { GymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import { CommandRunner, type RunnerHooks } from './command-runner.ts';
import { type HostKeyVerdict, hostName, parseKnownHosts, verifyHostKey } from './known-hosts.ts';
import type { RemoteExecOptions, RemoteExit, RemoteProcess } from './remote-process.ts';

export interface SshTarget {
  host: string;
  port: number;
  username: string;
  /** A private key file; or `agent` (an ssh-agent socket path). */
  privateKeyPath?: string;
  agent?: string;
  /** The known_hosts file the host's key must be in. Required: there is no trust on first use. */
  knownHostsPath: string;
  /** Keepalive every this many ms; the connection counts as down after `keepaliveCountMax` misses. */
  keepaliveIntervalMs: number;
  keepaliveCountMax: number;
  /** Sessions open at once on this connection; keep it below the server's MaxSessions. */
  maxChannels: number;
  readyTimeoutMs: number;
  /**
   * Run commands through one runner per connection (default true); false: one exec channel,
   * hence one login shell with its start-up files, per command.
   */
  commandRunner?: boolean;
  /** How long the login shell may take to start the runner (its start-up files run first). Default 20 s. */
  shellStartTimeoutMs?: number;
}

export const DEFAULT_TARGET = {
  port: 22,
  keepaliveIntervalMs: 5000,
  keepaliveCountMax: 3,
  maxChannels: 8,
  readyTimeoutMs: 15_000,
  // Long enough for a slow module system or conda on a loaded node; a start-up file that blocks
  // (a stale lock) fails here rather than hang every command of the host.
  shellStartTimeoutMs: 20_000,
} as const;

/** After the shell did not start the runner in time, how long starts fail fast before it is tried again. */
const SHELL_RETRY_MS = 10_000;

export type { RemoteExecOptions, RemoteExit, RemoteProcess } from './remote-process.ts';

/** Feeds a started command its whole stdin (none: end of file at once) and waits for its end. */
export function runToEnd(
  started: RemoteProcess,
  stdin: Buffer | NodeJS.ReadableStream | undefined,
): Promise<RemoteExit> {
  if (stdin === undefined) started.end();
  else if (Buffer.isBuffer(stdin)) started.end(stdin);
  else {
    stdin.on('error', () => started.close());
    stdin.pipe(started.stdin);
  }
  return started.done;
}

/** Counts what is open and queues what waits, so no open ever meets the server's limit. */
class ChannelSlots {
  readonly #max: number;
  #open = 0;
  readonly #waiting: Array<() => void> = [];

  constructor(max: number) {
    this.#max = max;
  }

  async acquire(): Promise<() => void> {
    if (this.#open >= this.#max) await new Promise<void>((resolve) => this.#waiting.push(resolve));
    this.#open += 1;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#open -= 1;
      this.#waiting.shift()?.();
    };
  }

  get open(): number {
    return this.#open;
  }
}

export class SshConnection {
  readonly target: SshTarget;
  readonly #logger: Logger;
  readonly #slots: ChannelSlots;
  /** How each open channel's command ended, as the server said (kept from the channel's opening). */
  readonly #exits = new WeakMap<ClientChannel, RemoteExit>();
  #client: Client | null = null;
  #connecting: Promise<Client> | null = null;
  #lastError: GymError | null = null;
  #closed = false;
  /** Consecutive failed connects, for the backoff. */
  #failures = 0;
  #retryAt = 0;
  /** The runner of the current client, once asked for (null inside: the host cannot run one). */
  #runner: { client: Client; opening: Promise<CommandRunner | null> } | null = null;
  /** Why this host has no runner (then every command has its own channel); null while it may. */
  #noRunner: string | null = null;
  #runnerError: GymError | null = null;
  #runnerRetryAt = 0;

  constructor(target: SshTarget, logger: Logger) {
    this.target = target;
    this.#logger = logger;
    this.#slots = new ChannelSlots(target.maxChannels);
  }

  get name(): string {
    return `${this.target.username}@${hostName(this.target.host, this.target.port)}`;
  }

  /** Whether the connection is up now (false after a drop until the next use reconnects). */
  get isUp(): boolean {
    return this.#client !== null;
  }

  get lastError(): GymError | null {
    return this.#lastError;
  }

  get openChannels(): number {
    return this.#slots.open;
  }

  /** Whether a `start` or `exec` now takes a slot without waiting. */
  get hasFreeChannel(): boolean {
    return this.#slots.open < this.target.maxChannels;
  }

  #unavailable(reason: string, message: string, cause?: unknown): GymError {
    return new GymError('PROVIDER_UNAVAILABLE', `ssh ${this.name}: ${message}`, {
      details: { host: this.target.host, port: this.target.port, reason },
      ...(cause === undefined ? {} : { cause }),
    });
  }

  /** The live client, connecting (again) when there is none; fails fast while backing off. */
  async client(): Promise<Client> {
    if (this.#closed) throw this.#unavailable('closed', 'the connection is closed');
    if (this.#client !== null) return this.#client;
    if (this.#connecting !== null) return this.#connecting;
    if (Date.now() < this.#retryAt && this.#lastError !== null) throw this.#lastError;
    this.#connecting = this.#connect().finally(() => {
      this.#connecting = null;
    });
    return this.#connecting;
  }

  async #connect(): Promise<Client> {
    const known = parseKnownHosts(
      await readFile(this.target.knownHostsPath, 'utf8').catch((error: Error) => {
        throw this.#unavailable(
          'known-hosts',
          `cannot read known_hosts ${this.target.knownHostsPath}: ${error.message}`,
        );
      }),
    );
    let verdict = { kind: 'unknown' } as HostKeyVerdict;
    const config: ConnectConfig = {
      host: this.target.host,
      port: this.target.port,
      username: this.target.username,
      readyTimeout: this.target.readyTimeoutMs,
      keepaliveInterval: this.target.keepaliveIntervalMs,
      keepaliveCountMax: this.target.keepaliveCountMax,
      hostVerifier: (key: Buffer) => {
        verdict = verifyHostKey(known, this.target.host, this.target.port, key);
        return verdict.kind === 'match';
      },
    };
    if (this.target.privateKeyPath !== undefined)
      config.privateKey = await readFile(this.target.privateKeyPath);
    if (this.target.agent !== undefined) config.agent = this.target.agent;
    const client = new Client();
    try {
      await new Promise<void>((resolve, reject) => {
        client.once('ready', resolve);
        client.once('error', reject);
        client.connect(config);
      });
    } catch (error) {
      client.end();
      const message = (error as Error).message;
      const judged = verdict as HostKeyVerdict;
      const failure =
        judged.kind === 'unknown' && /verification failed/i.test(message)
          ? this.#unavailable(
              'host-key-unknown',
              `the host key is not in ${this.target.knownHostsPath}; add it (ssh-keyscan) after checking it`,
            )
          : judged.kind === 'mismatch'
            ? this.#unavailable(
                'host-key-mismatch',
                `the host key does not match ${this.target.knownHostsPath} (known: ${judged.knownTypes.join(', ')}): it changed, or someone is in the middle; refusing`,
              )
            : judged.kind === 'revoked'
              ? this.#unavailable(
                  'host-key-revoked',
                  `the host key is marked @revoked in ${this.target.knownHostsPath}`,
                )
              : this.#unavailable('connect', `cannot connect: ${message}`, error);
      this.#failed(failure);
      throw failure;
    }
    this.#failures = 0;
    this.#lastError = null;
    client.on('error', (error: Error) => {
      this.#logger.warn({ host: this.name, error: error.message }, 'ssh connection error');
      this.#lastError = this.#unavailable('dropped', `the connection failed: ${error.message}`, error);
    });
    client.once('close', () => {
      if (this.#client === client) this.#client = null;
      this.#lastError ??= this.#unavailable('dropped', 'the connection closed');
      this.#logger.info({ host: this.name }, 'ssh connection closed');
    });
    // Commands and session writes are small and wait for their answers: no Nagle delay on them.
    client.setNoDelay(true);
    this.#client = client;
    return client;
  }

  #failed(error: GymError): void {
    this.#lastError = error;
    this.#failures += 1;
    // 0.5 s, 1 s, 2 s ... at most 30 s between attempts to a host that does not answer.
    this.#retryAt = Date.now() + Math.min(30_000, 500 * 2 ** (this.#failures - 1));
  }

  /** Runs `command` (a shell command line the server's shell parses) to its end. */
  async exec(command: string, options: RemoteExecOptions = {}): Promise<RemoteExit> {
    return runToEnd(await this.start(command, options), options.stdin);
  }

  /**
   * Starts `command` and hands back its channel, held (with its slot) until the command ends or
   * the channel is closed: for a long-lived process such as a session shell, whose stdin stays
   * open between writes. `done` settles as `exec`'s promise does.
   */
  async start(command: string, options: Omit<RemoteExecOptions, 'stdin'> = {}): Promise<RemoteProcess> {
    const release = await this.#slots.acquire();
    let channel: ClientChannel;
    try {
      // A terminal's program is interactive and long-lived: a channel of its own, never the runner.
      const runner = options.terminal === undefined ? await this.#runnerOf() : null;
      if (runner !== null) {
        const started = runner.start(command, options);
        started.done.then(release, release);
        return started;
      }
      channel = await this.#openChannel(command, options.terminal ?? null);
    } catch (error) {
      release();
      throw error;
    }
    // A terminal's input is never ended by its user: once its program exited, ending it lets
    // the channel close now (else the close waits on the open input, tens of seconds).
    if (options.terminal !== undefined) channel.once('exit', () => channel.writable && channel.end());
    const done = this.#run(channel, options);
    done.then(release, release);
    return {
      stdin: channel,
      // A write after the channel ended is dropped: `done` already says how it ended.
      write: (data) => {
        if (channel.writable) channel.write(data);
      },
      end: (data) => {
        if (!channel.writable) return;
        if (data === undefined) channel.end();
        else channel.end(data);
      },
      close: () => channel.close(),
      resize: (rows, cols) => {
        channel.setWindow(rows, cols, 0, 0);
      },
      pause: () => channel.pause(),
      resume: () => channel.resume(),
      done,
    };
  }

  /**
   * The command runner of the live client, started at the first command of each connection;
   * null when this host cannot run one (or it is turned off): commands then get a channel each.
   */
  async #runnerOf(): Promise<CommandRunner | null> {
    if (this.target.commandRunner === false || this.#noRunner !== null) return null;
    const client = await this.client();
    const current = this.#runner;
    if (current !== null && current.client === client) {
      const runner = await current.opening;
      if (runner === null || runner.isOpen) return runner;
    }
    if (Date.now() < this.#runnerRetryAt && this.#runnerError !== null) throw this.#runnerError;
    const opening = this.#openRunner(client);
    this.#runner = { client, opening };
    opening.catch(() => {
      if (this.#runner?.opening === opening) this.#runner = null;
    });
    return opening;
  }

  async #openRunner(client: Client): Promise<CommandRunner | null> {
    const timeoutMs = this.target.shellStartTimeoutMs ?? DEFAULT_TARGET.shellStartTimeoutMs;
    const hooks: RunnerHooks = {
      lost: () => this.#lastError ?? this.#unavailable('dropped', 'the connection closed mid-command'),
      cutOff: () => {
        // ssh2 closes the client before its channels: a live client here means the runner died.
        if (this.#client !== client)
          return this.#lastError ?? this.#unavailable('dropped', 'the connection closed mid-command');
        this.#logger.warn({ host: this.name }, 'ssh: the command runner ended under a live connection');
        return null;
      },
      stopped: () =>
        this.#client === null
          ? (this.#lastError ?? this.#unavailable('dropped', 'the connection closed mid-command'))
          : this.#unavailable('dropped', 'the command was closed before it ended'),
      startTimedOut: (ms) =>
        new GymError(
          'PROVIDER_TIMEOUT',
          `ssh ${this.name}: the login shell did not start the command runner within ${ms / 1000} s: a shell start-up file (~/.bashrc, ~/.profile, /etc/bash.bashrc) blocks or is very slow; fix it, or raise shellStartTimeoutMs`,
          {
            details: { host: this.target.host, port: this.target.port, reason: 'shell-start', timeoutMs: ms },
          },
        ),
    };
    let opened: Awaited<ReturnType<typeof CommandRunner.open>>;
    try {
      opened = await CommandRunner.open((line) => this.#openChannel(line), hooks, timeoutMs);
    } catch (error) {
      if ((error as GymError).code === 'PROVIDER_TIMEOUT') {
        this.#runnerError = error as GymError;
        this.#runnerRetryAt = Date.now() + SHELL_RETRY_MS;
      }
      throw error;
    }
    if ('runner' in opened) {
      this.#runnerError = null;
      return opened.runner;
    }
    // The channel ended without a runner because the connection dropped: that is the error.
    if (this.#client !== client) throw hooks.lost();
    this.#noRunner = opened.unavailable;
    this.#logger.warn(
      { host: this.name, reason: opened.unavailable },
      'ssh: no command runner on this host; every command opens its own channel (and runs the shell start-up files)',
    );
    return null;
  }

  /**
   * Opens a session for `command`. The server may still count a session we saw close a moment
   * ago (it frees the slot after its own bookkeeping), so a refused open ("open failed") is
   * tried again a few times, shortly, before it is an error.
   */
  async #openChannel(
    command: string,
    pty: { rows: number; cols: number; term: string } | null = null,
  ): Promise<ClientChannel> {
    for (let attempt = 0; ; attempt += 1) {
      const client = await this.client();
      try {
        return await new Promise<ClientChannel>((resolve, reject) => {
          const options = pty === null ? {} : { pty: { rows: pty.rows, cols: pty.cols, term: pty.term } };
          client.exec(command, options, (error, stream) => {
            if (error) return reject(error);
            // From the moment the channel opens: a quick command's end may come before `#run`
            // listens (an event, not stream data, so nothing keeps it), and was then unknown.
            stream.once('exit', (code: number | null, signal?: string) =>
              this.#exits.set(stream, {
                code: code ?? null,
                signal: signal === undefined ? null : `SIG${signal.replace(/^SIG/, '')}`,
              }),
            );
            resolve(stream);
          });
        });
      } catch (error) {
        const refused = /open failed|channel open failure/i.test((error as Error).message);
        if (!refused || attempt >= 5)
          throw this.#unavailable('channel', `cannot open a session: ${(error as Error).message}`, error);
        await new Promise((resolve) => setTimeout(resolve, 50 * 2 ** attempt));
      }
    }
  }

  #run(channel: ClientChannel, options: Omit<RemoteExecOptions, 'stdin'>): Promise<RemoteExit> {
    return new Promise((resolve, reject) => {
      // Both streams are always read: `close` comes only after they end.
      channel.on('data', (chunk: Buffer) => options.onStdout?.(chunk));
      channel.stderr.on('data', (chunk: Buffer) => options.onStderr?.(chunk));
      const abort = () => channel.close();
      options.signal?.addEventListener('abort', abort, { once: true });
      channel.on('close', () => {
        options.signal?.removeEventListener('abort', abort);
        const exit = this.#exits.get(channel);
        if (exit !== undefined) resolve(exit);
        else if (this.#client === null || options.signal?.aborted)
          reject(this.#lastError ?? this.#unavailable('dropped', 'the connection closed mid-command'));
        // A server that never says how a command ended: unknown, never a success.
        else resolve({ code: null, signal: null });
      });
    });
  }

  close(): void {
    this.#closed = true;
    this.#client?.end();
    this.#client = null;
  }
}
