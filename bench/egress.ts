/**
 * What the egress proxy costs a download: 100 MiB from a host on loopback through the daemon's
 * proxy (CONNECT over its unix socket, as a sandbox's relay reaches it) against the same download
 * straight from that host, in one run; the host and the client are another process. The relay inside a sandbox is the gateway relay's own
 * cost and is not counted here. Goal: through the proxy within 2x of direct.
 *
 *   npm run bench:egress          (BENCH_EGRESS_MIB=100, BENCH_EGRESS_ROUNDS=3 by default)
 */

import { fork } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify from 'fastify';
import { silentLogger } from '../core/logger.ts';
import { AddressGuard } from '../daemon/egress/addresses.ts';
import { EgressConfigSchema } from '../daemon/egress/config.ts';
import { EgressCredentials } from '../daemon/egress/credentials.ts';
import { EgressProxy } from '../daemon/egress/proxy.ts';
import { round } from './stats.ts';

const mebibytes = Number(process.env.BENCH_EGRESS_MIB ?? 100);
const rounds = Number(process.env.BENCH_EGRESS_ROUNDS ?? 3);
const total = mebibytes * 1024 * 1024;
// The host and the downloading client run in a process of their own, as they would.
const peer = fork(new URL('./egress-peer.ts', import.meta.url).pathname, {
  env: { ...process.env, BENCH_EGRESS_BYTES: String(total) },
});
const answers: Array<(answer: { ms: number }) => void> = [];
peer.on('message', (message: { ready?: boolean; ms?: number }) =>
  answers.shift()?.(message as { ms: number }),
);
const ask = (command: Record<string, unknown>) =>
  new Promise<{ ms: number }>((resolve) => {
    answers.push(resolve);
    if (Object.keys(command).length > 0) peer.send(command);
  });
await ask({});

const directory = await mkdtemp(join(tmpdir(), 'gym-bench-egress-'));
const socketPath = join(directory, 'gateway.sock');
const credentials = new EgressCredentials('bench-token');
const proxy = new EgressProxy({
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
await app.listen({ path: socketPath });
const authorization = `Basic ${Buffer.from(`sbx-bench:${credentials.secretFor('sbx-bench')}`).toString('base64')}`;

const direct = async () => (await ask({ kind: 'direct' })).ms;
const throughProxy = async () => (await ask({ kind: 'proxy', socketPath, authorization })).ms;

try {
  const directMs: number[] = [];
  const proxyMs: number[] = [];
  for (let index = 0; index < rounds; index++) {
    directMs.push(await direct());
    proxyMs.push(await throughProxy());
  }
  const best = (samples: number[]) => Math.min(...samples);
  const mibPerSecond = (ms: number) => mebibytes / (ms / 1000);
  const log = proxy.log('sbx-bench');
  console.log(
    JSON.stringify({
      bench: 'egress',
      mebibytes,
      rounds,
      directMs: round(best(directMs)),
      proxyMs: round(best(proxyMs)),
      directMiBPerSecond: round(mibPerSecond(best(directMs))),
      proxyMiBPerSecond: round(mibPerSecond(best(proxyMs))),
      ratio: round(best(proxyMs) / best(directMs)),
      goalRatio: 2,
      loggedAttempts: log.attempts.length,
      loggedBytesDown: log.attempts.at(-1)?.bytesDown ?? 0,
    }),
  );
} finally {
  await app.close();
  peer.kill();
  await rm(directory, { recursive: true, force: true });
}
