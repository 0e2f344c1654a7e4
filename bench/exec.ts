/**
 * Exec latency, three ways in one run against one sandbox: dockerode's exec called directly (the
 * baseline), the provider's one-shot exec, and the provider's session exec. Session execs run
 * twice, interleaved in rounds: over the exec helper's pipes (the default) and through the
 * engine's exec stream (`sessionPipes: false`, as before the pipes), each with the CPU it cost
 * this process, dockerd, containerd and the container's shim. Prints progress on stderr and one
 * JSON line on stdout.
 *
 *   npm run bench:exec            (BENCH_EXEC_COUNT=200 by default)
 */
import { tmpdir } from 'node:os';
import type { Duplex } from 'node:stream';
import { systemClock } from '../core/clock.ts';
import { createId } from '../core/ids.ts';
import { silentLogger } from '../core/logger.ts';
import { ExecRequestSchema } from '../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../core/schemas/sandbox.ts';
import { imageReference } from '../images/build.ts';
import { findImageDefinition } from '../images/definitions.ts';
import { DockerProvider } from '../providers/docker/docker-provider.ts';
import { createDockerClient } from '../providers/docker/index.ts';
import { pidsNamed, processSeconds, readOrNull } from './eval-cost.ts';
import { percentile, round, timeSequential } from './stats.ts';

const count = Number(process.env.BENCH_EXEC_COUNT ?? 200);
const warmup = 10;
const docker = createDockerClient();
const context = {
  namespace: 'bench',
  daemonId: createId('daemon'),
  logger: silentLogger,
  clock: systemClock,
  maxLifetimeSeconds: 3600,
  // The Docker provider keeps no state of its own.
  stateDirectory: tmpdir(),
};
/** `--runtime runsc`: the same figures under gVisor (docs/isolation-tiers.md); default the engine's runc. */
const runtimeAt = process.argv.indexOf('--runtime');
const runtime = runtimeAt === -1 ? 'runc' : (process.argv[runtimeAt + 1] ?? 'runc');
const runtimeOptions = runtime === 'runc' ? {} : { runtime };
const provider = new DockerProvider(docker, context, runtimeOptions);
const engineSessions = new DockerProvider(docker, context, { ...runtimeOptions, sessionPipes: false });
const image = await imageReference(findImageDefinition('busybox')!);
const sandbox = await provider.create(SandboxSpecSchema.parse({ image, ttlSeconds: 600 }));
const container = docker.getContainer(provider.containerName(sandbox.id));
const containerId = (await container.inspect()).Id;

/**
 * The processes whose CPU a session exec costs: this one, dockerd, containerd and the sandbox's
 * shim. Found once, before timing: scanning /proc in every round would charge the scan to `self`.
 */
const cpuPids: Array<number | 'self'> = [
  'self',
  ...(await pidsNamed(['dockerd', 'containerd'])),
  ...(await pidsNamed(['containerd-shim', 'containerd-shim-runc-v2'])).filter((pid) =>
    (readOrNull(`/proc/${pid}/cmdline`) ?? '').split('\0').includes(containerId),
  ),
];

/** CPU-seconds so far of `cpuPids`. */
async function engineAndSelfSeconds(): Promise<number> {
  let sum = 0;
  for (const pid of cpuPids) sum += (await processSeconds(pid)) ?? 0;
  return sum;
}

/** Times `count` sequential calls and adds the CPU they cost to `cpu.seconds`. */
async function timedWithCpu(
  count_: number,
  warmup_: number,
  call: () => Promise<unknown>,
  cpu: { seconds: number },
) {
  for (let index = 0; index < warmup_; index += 1) await call();
  const before = await engineAndSelfSeconds();
  const times = await timeSequential(count_, 0, call);
  cpu.seconds += (await engineAndSelfSeconds()) - before;
  return times;
}

/** What a caller of dockerode does for one command: create, start attached, read to the end, inspect. */
async function dockerodeExec(): Promise<number | null> {
  const exec = await container.exec({ Cmd: ['true'], AttachStdout: true, AttachStderr: true });
  const stream = (await exec.start({ hijack: true, stdin: false })) as Duplex;
  await new Promise<void>((resolve) => {
    stream.on('data', () => {});
    stream.once('end', resolve);
    stream.once('close', resolve);
  });
  return (await exec.inspect()).ExitCode;
}

try {
  const oneShotRequest = ExecRequestSchema.parse({ argv: ['true'] });
  const sessionRequest = ExecRequestSchema.parse({ argv: ['true'], session: 'bench' });
  process.stderr.write(`bench:exec: ${count} sequential \`true\` per mode\n`);
  // Interleave the two docker-exec modes in rounds so drift in the engine's speed hits both alike.
  const direct: number[] = [];
  const oneShot: number[] = [];
  const rounds = 4;
  for (let round_ = 0; round_ < rounds; round_ += 1) {
    direct.push(...(await timeSequential(count / rounds, round_ === 0 ? warmup : 0, dockerodeExec)));
    oneShot.push(
      ...(await timeSequential(count / rounds, round_ === 0 ? warmup : 0, () =>
        provider.exec(sandbox.id, oneShotRequest),
      )),
    );
  }
  // The two session transports, interleaved in rounds, each in a session of its own.
  const session: number[] = [];
  const engineSession: number[] = [];
  const sessionCpu = { seconds: 0 };
  const engineSessionCpu = { seconds: 0 };
  const engineRequest = ExecRequestSchema.parse({ argv: ['true'], session: 'bench-engine' });
  // Few, long rounds: /proc counts CPU in 10 ms ticks, and a short round is mostly rounding.
  const sessionRounds = 4;
  for (let round_ = 0; round_ < sessionRounds; round_ += 1) {
    const first = round_ === 0 ? warmup : 0;
    session.push(
      ...(await timedWithCpu(
        count / sessionRounds,
        first,
        () => provider.exec(sandbox.id, sessionRequest),
        sessionCpu,
      )),
    );
    engineSession.push(
      ...(await timedWithCpu(
        count / sessionRounds,
        first,
        () => engineSessions.exec(sandbox.id, engineRequest),
        engineSessionCpu,
      )),
    );
  }
  const dockerExecP50Ms = percentile(direct, 0.5);
  const oneShotP50Ms = percentile(oneShot, 0.5);
  const sessionP50Ms = percentile(session, 0.5);
  console.log(
    JSON.stringify({
      bench: 'exec',
      runtime,
      count,
      dockerExecP50Ms: round(dockerExecP50Ms),
      dockerExecP99Ms: round(percentile(direct, 0.99)),
      oneShotP50Ms: round(oneShotP50Ms),
      oneShotP99Ms: round(percentile(oneShot, 0.99)),
      sessionP50Ms: round(sessionP50Ms),
      sessionP99Ms: round(percentile(session, 0.99)),
      sessionSpeedup: round(dockerExecP50Ms / sessionP50Ms, 1),
      engineSessionP50Ms: round(percentile(engineSession, 0.5)),
      engineSessionP99Ms: round(percentile(engineSession, 0.99)),
      // CPU-ms per session exec of this process, dockerd, containerd and the shim.
      sessionCpuMs: round((sessionCpu.seconds * 1000) / session.length),
      engineSessionCpuMs: round((engineSessionCpu.seconds * 1000) / engineSession.length),
      pipesOverEngineCpu: round(
        sessionCpu.seconds / session.length / (engineSessionCpu.seconds / engineSession.length),
      ),
      oneShotOverhead: round(oneShotP50Ms / dockerExecP50Ms - 1),
    }),
  );
} finally {
  await provider.destroy(sandbox.id);
  await provider.close();
  await engineSessions.close();
}
