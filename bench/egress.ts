/**
 * What the egress proxy costs a download: 100 MiB from a host on loopback through the daemon's
 * proxy (CONNECT over its unix socket, as a sandbox's relay reaches it) against the same download
 * straight from that host, in one run; the host and the client are another process. The relay inside a sandbox is the gateway relay's own
 * cost and is not counted here. Goal: through the proxy within 2x of direct.
 *
 *   npm run bench:egress          (BENCH_EGRESS_MIB=100, BENCH_EGRESS_ROUNDS=5 by default)
 *
 * Each figure is the median of the rounds after a warm-up of each path; the wall times of every
 * round are in the line too, and the CPU time both processes spent, which load stretches less.
 */

import { fork } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify from 'fastify';
import { silentLogger } from '../core/logger.ts';
import { AddressGuard } from '../daemon/egress/addresses.ts';
import { EgressConfigSchema } from '../daemon/egress/config.ts';
import { EgressCredentials } from '../daemon/egress/credentials.ts';
import { EgressProxy } from '../daemon/egress/proxy.ts';
import { GatewayArrivals } from '../daemon/gateway/arrivals.ts';
import { GatewayRelays } from '../providers/docker/gateway-relay.ts';
import { percentile, round } from './stats.ts';

const mebibytes = Number(process.env.BENCH_EGRESS_MIB ?? 100);
const rounds = Number(process.env.BENCH_EGRESS_ROUNDS ?? 5);
const total = mebibytes * 1024 * 1024;
// The host and the downloading client run in a process of their own, as they would.
const peer = fork(new URL('./egress-peer.ts', import.meta.url).pathname, {
  env: { ...process.env, BENCH_EGRESS_BYTES: String(total) },
});
type Answer = { ms: number; cpuMs: number };
const answers: Array<(answer: Answer) => void> = [];
peer.on('message', (message: { ready?: boolean } & Answer) => answers.shift()?.(message));
const ask = (command: Record<string, unknown>) =>
  new Promise<Answer>((resolve) => {
    answers.push(resolve);
    if (Object.keys(command).length > 0) peer.send(command);
  });
await ask({});

const directory = await mkdtemp(join(tmpdir(), 'gym-bench-egress-'));
// The sandbox's own socket to the gateway, as its relay reaches the daemon.
const arrivals = new GatewayArrivals({ directory: join(directory, 'gw'), logger: silentLogger });
const socketPath = await arrivals.open('sbx-bench');
const credentials = new EgressCredentials('bench-token');
const proxy = new EgressProxy({
  arrivals,
  config: EgressConfigSchema.parse({
    allowedHosts: ['download.test:*'],
    allowPrivateAddresses: ['127.0.0.0/8'],
  }),
  credentials,
  guard: new AddressGuard(['127.0.0.0/8']),
  policyOf: () => ({ mode: 'allowlist', allowedHosts: ['download.test:*'] }),
  resolver: async () => ['127.0.0.2'],
  logger: silentLogger,
});
const app = Fastify({ logger: false });
proxy.attach(app);
await app.listen({ path: join(directory, 'gateway.sock') });
arrivals.serve(app.server);
const authorization = `Basic ${Buffer.from(`sbx-bench:${credentials.secretFor('sbx-bench')}`).toString('base64')}`;

/** One download: wall time, and the CPU time of the peer and of this process (the proxy's). */
const download = async (command: Record<string, unknown>) => {
  const cpu = process.cpuUsage();
  const answer = await ask(command);
  const used = process.cpuUsage(cpu);
  return { ms: answer.ms, peerCpuMs: answer.cpuMs, proxyCpuMs: (used.user + used.system) / 1000 };
};
const direct = () => download({ kind: 'direct' });
const throughProxy = () => download({ kind: 'proxy', socketPath, authorization });
// The way an agent on Docker reaches the proxy: the gateway relay, a port in the sandbox's network
// namespace piped by the daemon to the gateway socket. Here the namespace is this process's own
// (it needs root and nsenter, as the relay does); without them the figure is left out.
const relays = new GatewayRelays({ maxConnections: 4, idleTimeoutMs: 60_000, logger: silentLogger });
const relayPort = await relays.open('sbx-bench', process.pid, 0, socketPath).catch((error: Error) => {
  console.error(`no relay figure: ${error.message}`);
  return undefined;
});
const throughRelay = () => download({ kind: 'relay', relayPort, authorization });

try {
  // One untimed round of each warms both paths (JIT, socket buffers); then the two alternate, so
  // a change of the machine's load falls on both alike.
  const median = (samples: number[]) => percentile(samples, 0.5);
  await direct();
  await throughProxy();
  if (relayPort !== undefined) await throughRelay();
  const directRuns: Awaited<ReturnType<typeof download>>[] = [];
  const proxyRuns: Awaited<ReturnType<typeof download>>[] = [];
  const relayRuns: Awaited<ReturnType<typeof download>>[] = [];
  for (let index = 0; index < rounds; index++) {
    directRuns.push(await direct());
    proxyRuns.push(await throughProxy());
    if (relayPort !== undefined) relayRuns.push(await throughRelay());
  }
  const relayMs = relayRuns.length === 0 ? undefined : median(relayRuns.map((run) => run.ms));
  const mibPerSecond = (ms: number) => mebibytes / (ms / 1000);
  const directMs = median(directRuns.map((run) => run.ms));
  const proxyMs = median(proxyRuns.map((run) => run.ms));
  // CPU time of both processes together: what the path costs the machine, which the load of
  // others does not stretch the way it stretches wall time.
  const cpuMs = (runs: typeof directRuns) => median(runs.map((run) => run.peerCpuMs + run.proxyCpuMs));
  const log = proxy.log('sbx-bench');
  console.log(
    JSON.stringify({
      bench: 'egress',
      mebibytes,
      rounds,
      directMs: round(directMs),
      proxyMs: round(proxyMs),
      directMiBPerSecond: round(mibPerSecond(directMs)),
      proxyMiBPerSecond: round(mibPerSecond(proxyMs)),
      ratio: round(proxyMs / directMs),
      goalRatio: 2,
      directCpuMs: round(cpuMs(directRuns)),
      proxyCpuMs: round(cpuMs(proxyRuns)),
      proxyCpuMsInProxy: round(median(proxyRuns.map((run) => run.proxyCpuMs))),
      cpuRatio: round(cpuMs(proxyRuns) / cpuMs(directRuns)),
      ...(relayMs === undefined
        ? {}
        : {
            relayMs: round(relayMs),
            relayMiBPerSecond: round(mibPerSecond(relayMs)),
            relayRatio: round(relayMs / directMs),
            relayCpuMs: round(cpuMs(relayRuns)),
            relaySamplesMs: relayRuns.map((run) => round(run.ms, 1)),
          }),
      directSamplesMs: directRuns.map((run) => round(run.ms, 1)),
      proxySamplesMs: proxyRuns.map((run) => round(run.ms, 1)),
      loggedAttempts: log.attempts.length,
      loggedBytesDown: log.attempts.at(-1)?.bytesDown ?? 0,
      load: loadavg().map((value) => round(value, 2)),
    }),
  );
} finally {
  relays.closeAll();
  arrivals.closeAll();
  await app.close();
  peer.kill();
  await rm(directory, { recursive: true, force: true });
}
