/**
 * The apptainer provider over SSH against a raw ssh2 exec on the same host, in one run: a real
 * OpenSSH server on 127.0.0.9 stands for a compute node and the stand-in for `apptainer` (see
 * docs/providers/apptainer.md). Prints one JSON line: raw `true` over ssh2, the provider's
 * one-shot exec of `true`, its session exec of `true` and its create, p50 and p90 in ms, and
 * the provider's paths against the raw exec. Each one-shot exec is one SSH channel plus the
 * apptainer command; with the stand-in that command is a Node process, so the overhead here is
 * mostly the stand-in's start. A session exec is a write to a shell already running in the
 * instance over a held channel: no channel, no apptainer command, one round trip.
 * The enroot provider (stand-in `enroot`, on its own sshd on 127.0.0.13) is measured in the same
 * run: its create (`enroot create` unpacks the image, a detached `enroot start`, a wait for the
 * keeper), its one-shot exec (the host's busybox nsenter into the keeper's namespaces) and its
 * session exec (a write to a shell already entered there, over a held channel).
 *
 *   npm run bench:ssh
 */
import { silentLogger } from '../core/logger.ts';
import { ExecRequestSchema } from '../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../core/schemas/sandbox.ts';
import { ApptainerProvider } from '../providers/apptainer/apptainer-provider.ts';
import { EnrootProvider } from '../providers/enroot/enroot-provider.ts';
import { DEFAULT_TARGET, SshConnection } from '../providers/ssh/connection.ts';
import { BUSYBOX_REFERENCE } from '../test/fixtures/busybox-root.ts';
import { testContext } from '../test/fixtures/provider-context.ts';
import { enrootNode } from '../test/hpc/enroot-node.ts';
import { computeNode } from '../test/hpc/node.ts';
import { percentile, round, timeSequential } from './stats.ts';

const node = await computeNode('127.0.0.9', 27000 + (process.pid % 1000));
const raw = new SshConnection(
  {
    ...DEFAULT_TARGET,
    host: node.host.host,
    port: node.host.port,
    username: 'root',
    privateKeyPath: node.host.privateKeyPath,
    knownHostsPath: node.host.knownHostsPath,
  },
  silentLogger,
);
const provider = new ApptainerProvider({ hosts: [node.host] }, testContext());
const enrootHost = await enrootNode('127.0.0.13', 29000 + (process.pid % 1000));
const enroot = new EnrootProvider({ hosts: [enrootHost.host] }, testContext());
const summary = (samples: number[]) => ({
  p50: round(percentile(samples, 0.5)),
  p90: round(percentile(samples, 0.9)),
});
try {
  const rawExec = await timeSequential(30, 3, () => raw.exec('true'));
  const created: string[] = [];
  const create = await timeSequential(5, 0, async () => {
    created.push((await provider.create(SandboxSpecSchema.parse({ image: BUSYBOX_REFERENCE }))).id);
  });
  const request = ExecRequestSchema.parse({ argv: ['true'] });
  const oneShot = await timeSequential(30, 3, () => provider.exec(created[0]!, request));
  const inSession = ExecRequestSchema.parse({ argv: ['true'], session: 'bench' });
  const session = await timeSequential(100, 3, async () => {
    const result = await provider.exec(created[0]!, inSession);
    if (result.status !== 'ok' || result.exitCode !== 0)
      throw new Error(`session exec: ${JSON.stringify(result)}`);
  });
  await Promise.all(created.map((id) => provider.destroy(id)));
  const enrootCreated: string[] = [];
  const enrootCreate = await timeSequential(5, 0, async () => {
    enrootCreated.push((await enroot.create(SandboxSpecSchema.parse({ image: BUSYBOX_REFERENCE }))).id);
  });
  const enrootOneShot = await timeSequential(30, 3, async () => {
    const result = await enroot.exec(enrootCreated[0]!, request);
    if (result.status !== 'ok' || result.exitCode !== 0)
      throw new Error(`enroot exec: ${JSON.stringify(result)}`);
  });
  const enrootSession = await timeSequential(100, 3, async () => {
    const result = await enroot.exec(enrootCreated[0]!, inSession);
    if (result.status !== 'ok' || result.exitCode !== 0)
      throw new Error(`enroot session exec: ${JSON.stringify(result)}`);
  });
  await Promise.all(enrootCreated.map((id) => enroot.destroy(id)));
  const rawP50 = percentile(rawExec, 0.5);
  console.log(
    JSON.stringify({
      bench: 'ssh',
      provider: 'apptainer (stand-in)',
      rawSshExecMs: summary(rawExec),
      oneShotExecMs: summary(oneShot),
      createMs: summary(create),
      sessionExecMs: summary(session),
      oneShotOverRawSsh: round(percentile(oneShot, 0.5) / rawP50, 2),
      sessionOverRawSsh: round(percentile(session, 0.5) / rawP50, 4),
      enroot: {
        provider: 'enroot (stand-in)',
        oneShotExecMs: summary(enrootOneShot),
        createMs: summary(enrootCreate),
        sessionExecMs: summary(enrootSession),
        oneShotOverRawSsh: round(percentile(enrootOneShot, 0.5) / rawP50, 2),
        sessionOverRawSsh: round(percentile(enrootSession, 0.5) / rawP50, 4),
      },
    }),
  );
} finally {
  raw.close();
  await provider.close();
  await enroot.close();
  await node.cleanup();
  await enrootHost.cleanup();
}
