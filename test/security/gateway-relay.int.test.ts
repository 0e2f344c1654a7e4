/**
 * Issue 9, item 3: the gateway relay into a sandbox must be one bounded relay per sandbox, must
 * not make a host process per connection (a sandbox limited to 16 processes made 80 root
 * processes on the host through `socat ... fork`), and must not outlive a daemon killed with -9.
 * Issue 10, item 1: a daemon restarted after kill -9 restores the reach of the sandboxes it
 * adopts at the URL their agents were given.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { spawnDaemonProcess, startTestDaemon } from '../daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const debian = skipReason === undefined ? await testImage(docker, 'debian-base') : 'gym/debian-base:missing';

/** The port of a gateway URL a Docker sandbox got (`http://127.0.0.1:<port>`). */
function portOf(url: string): number {
  expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
  return Number(new URL(url).port);
}

/** Opens `count` connections to the relay from one process, holds them, and reports how many the relay kept. */
const HOLD_CONNECTIONS = (port: number, count: number, holdSeconds: number) => `
import socket, time, json
held, failed = [], 0
for _ in range(${count}):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", ${port}))
        held.append(s)
    except OSError:
        failed += 1
time.sleep(${holdSeconds})
alive = 0
for s in held:
    s.setblocking(False)
    try:
        alive += 0 if s.recv(1) == b"" else 1
    except BlockingIOError:
        alive += 1
    except OSError:
        pass
print(json.dumps({"connected": len(held), "failed": failed, "alive": alive}))
`;

/** Sends one HTTP request through the relay and prints the status line of the answer. */
const ONE_REQUEST = (port: number) => `
import socket
s = socket.create_connection(("127.0.0.1", ${port}), timeout=10)
s.sendall(b"GET /v1/gateway/no-such-rollout/v1/models HTTP/1.1\\r\\nHost: gateway\\r\\nConnection: close\\r\\n\\r\\n")
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
print(data.split(b"\\r\\n")[0].decode())
`;

/** Every process whose chain of parents reaches `ancestor` (from the host's /proc). */
async function descendants(ancestor: number): Promise<Array<{ pid: number; command: string }>> {
  const parents = new Map<number, number>();
  const commands = new Map<number, string>();
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => null);
    if (stat === null) continue;
    const afterName = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    parents.set(Number(entry), Number(afterName[1]));
    commands.set(Number(entry), stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')));
  }
  const found: Array<{ pid: number; command: string }> = [];
  for (const pid of parents.keys()) {
    for (
      let current = parents.get(pid);
      current !== undefined && current > 1;
      current = parents.get(current)
    ) {
      if (current === ancestor) {
        found.push({ pid, command: commands.get(pid)! });
        break;
      }
    }
  }
  return found;
}

/** Host processes whose command line names `needle` (a test's own state directory). */
async function processesMentioning(needle: string): Promise<number[]> {
  const found: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    const commandLine = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    if (commandLine.includes(needle)) found.push(Number(entry));
  }
  return found;
}

describe.skipIf(skipReason !== undefined)('the gateway relay into a sandbox', () => {
  const cleanups: Array<() => Promise<void>> = [];
  afterAll(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
  });

  it('makes no host process per connection, caps connections, and still carries HTTP', async () => {
    const daemon = await startTestDaemon(
      { namespace: `relay-${randomBytes(3).toString('hex')}` },
      { listen: true },
    );
    const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
    cleanups.push(async () => {
      await daemon.stop({ destroy: true });
      await rm(daemon.stateDir, { recursive: true, force: true });
    });
    const sandbox = await client.createSandbox({ image: debian, resources: { pidsLimit: 16 } });
    const { url } = await client.exposeGateway(sandbox.id);
    const port = portOf(url);
    expect(await client.exposeGateway(sandbox.id)).toEqual({ url });

    const answer = await client.exec(sandbox.id, {
      argv: ['python3', '-c', ONE_REQUEST(port)],
      timeoutMs: 20_000,
    });
    expect(answer.stdout, answer.stderr).toMatch(/^HTTP\/1\.1 \d{3} /);

    const before = await descendants(process.pid);
    const holding = client.exec(sandbox.id, {
      argv: ['python3', '-c', HOLD_CONNECTIONS(port, 150, 3)],
      timeoutMs: 60_000,
    });
    await new Promise((resolve) => setTimeout(resolve, 2000));
    const during = await descendants(process.pid);
    const metric = async (name: string) => {
      const text = await (await daemon.app.inject({ method: 'GET', url: '/metrics', headers: daemon.auth }))
        .body;
      return Number(new RegExp(`^${name}\\{provider="docker"\\} (\\d+)$`, 'm').exec(text)?.[1]);
    };
    expect(await metric('gym_gateway_relay_connections')).toBe(32);
    expect(await metric('gym_gateway_relay_listeners')).toBe(1);
    const result = await holding;
    expect(result.status, result.stderr).toBe('ok');
    const counts = JSON.parse(result.stdout) as { connected: number; failed: number; alive: number };
    console.info(
      `150 connections from a sandbox with pidsLimit 16: ${JSON.stringify(counts)}; host processes under the daemon ${before.length} -> ${during.length}`,
    );
    expect(during.length, JSON.stringify(during)).toBeLessThanOrEqual(before.length);
    expect(counts.alive).toBeGreaterThan(0);
    expect(counts.alive).toBeLessThanOrEqual(32);
    expect(await metric('gym_gateway_relay_refused_total')).toBeGreaterThanOrEqual(150 - 32);

    // The slots come back: once the holder is gone, a request goes through again.
    const again = await client.exec(sandbox.id, {
      argv: ['python3', '-c', ONE_REQUEST(port)],
      timeoutMs: 20_000,
    });
    expect(again.stdout, again.stderr).toMatch(/^HTTP\/1\.1 \d{3} /);
  }, 120_000);

  it('leaves nothing behind when the daemon is killed with -9; its successor restores the same URL', async () => {
    const namespace = `relay-crash-${randomBytes(3).toString('hex')}`;
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-relay-crash-'));
    const configPath = join(stateDir, 'gym.yaml');
    await writeFile(
      configPath,
      `stateDir: ${stateDir}\nnamespace: ${namespace}\nlisten: { host: 127.0.0.1, port: 0 }\nlogLevel: warn\n`,
    );
    let child: ChildProcess | undefined;
    cleanups.push(async () => {
      child?.kill('SIGKILL');
      // What a failing run leaves (a relay that survived): ours, found by our state directory.
      for (const pid of await processesMentioning(stateDir)) process.kill(pid, 'SIGKILL');
      const containers = await docker.listContainers({
        all: true,
        filters: { label: [`gym.namespace=${namespace}`] },
      });
      await Promise.all(
        containers.map((container) => docker.getContainer(container.Id).remove({ force: true })),
      );
      await rm(stateDir, { recursive: true, force: true });
    });
    const started = await spawnDaemonProcess(configPath, stateDir);
    child = started.child;
    const sandbox = await started.client.createSandbox({ image: debian, ttlSeconds: 600 });
    const { url } = await started.client.exposeGateway(sandbox.id);
    // What the agent inside does, straight through the engine so it works with no daemon at all.
    const container = docker.getContainer(`gym-${namespace}-${sandbox.id}`);
    const askGateway = async (): Promise<string> => {
      const exec = await container.exec({
        Cmd: ['python3', '-c', ONE_REQUEST(portOf(url))],
        AttachStdout: true,
        AttachStderr: true,
        Tty: true,
      });
      const stream = await exec.start({ Tty: true });
      const chunks: Buffer[] = [];
      stream.on('data', (chunk: Buffer) => chunks.push(chunk));
      await new Promise((resolve) => stream.on('end', resolve));
      return Buffer.concat(chunks).toString().trim();
    };
    expect(await askGateway()).toMatch(/^HTTP\/1\.1 \d{3} /);

    // Whatever the daemon has started and still runs (after kill -9 they would be reparented).
    const helpers = await descendants(child.pid!);
    child.kill('SIGKILL');
    await new Promise((resolve) => child!.once('exit', resolve));
    // Give anything that survived a moment to show itself; then nothing may listen or run.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await processesMentioning(stateDir)).toEqual([]);
    const isAlive = (pid: number) => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    expect(helpers.filter(({ pid }) => isAlive(pid))).toEqual([]);
    expect(await askGateway()).not.toMatch(/^HTTP/);

    // The successor adopts the sandbox and, before it answers anyone, restores its reach at the
    // URL the agent inside was given.
    const restarted = await spawnDaemonProcess(configPath, stateDir);
    child = restarted.child;
    expect((await restarted.client.getSandbox(sandbox.id)).id).toBe(sandbox.id);
    expect(await askGateway()).toMatch(/^HTTP\/1\.1 \d{3} /);
    expect(await restarted.client.exposeGateway(sandbox.id)).toEqual({ url });
  }, 120_000);
});
