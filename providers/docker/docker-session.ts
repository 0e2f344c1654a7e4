/**
 * The Docker transport of a session shell (`shared/shell-session.ts` holds the protocol): one
 * `docker exec` of `sh` with stdin attached, its multiplexed output split back into stdout and
 * stderr.
 *
 * With an exec confinement the shell starts through the exec helper and is moved into a cgroup
 * of its own before it reads its first command. A timeout kills that whole cgroup, the shell
 * included (an agent may have taken the shell over), and drops the session: the next command
 * opens a new one. After a command ends normally, what it left running in the background moves
 * to the container's cgroup, so a later timeout spares it, as it would a one-shot exec's jobs.
 * Under gVisor the shell runs traced by the exec helper instead, which lets go of what an ended
 * command left running: a timeout kills the tracer, the shell and the running command with it.
 * Without either, a timeout runs the kill script for the command's tagged processes.
 *
 * A confined shell also asks the helper for pipes (`session-pipes.ts`): once the daemon holds
 * them, commands and output go between the daemon and the shell directly, not through dockerd
 * and the shim; the exec's own stream is then only closed.
 */

import type { Duplex } from 'node:stream';
import type Docker from 'dockerode';
import { GymError } from '../../core/errors.ts';
import { createId, pooledRandomBytes } from '../../core/ids.ts';
import { type SessionKill, ShellSession } from '../shared/shell-session.ts';
import { withTimeout } from '../shared/with-timeout.ts';
import { DockerStreamDemuxer } from './demux.ts';
import {
  confineExec,
  type ExecConfinement,
  GO_BYTE,
  killTagged,
  killTracer,
  ReadyToken,
  sleep,
  streamDone,
  tracerPidOf,
} from './one-shot-exec.ts';
import { openHelperPipes, PIPES_GO_BYTE, SESSION_PIPES_ENV, type SessionPipes } from './session-pipes.ts';

/** How long a confined shell's helper may take to print its ready token before the pipes are given up. */
const PIPES_READY_WAIT_MS = 10_000;

/** A session shell the sandbox's contents did not let start (see `ExecNotStarted`), with the runtime's message. */
export class SessionNotStarted extends Error {
  readonly exitCode: number;
  readonly output: string;

  constructor(exitCode: number, output: string) {
    super(`the session shell could not start (exit ${exitCode}): ${output.trim()}`);
    this.exitCode = exitCode;
    this.output = output;
  }
}

/** Opens a session shell in `container` as `user`, confined when `confinement` is given. */
export async function openDockerSession(
  container: Docker.Container,
  user: string | undefined,
  confinement: ExecConfinement | null = null,
  options: { pipes?: boolean; tracer?: string | null } = {},
): Promise<ShellSession> {
  // Under gVisor: the shell runs traced by the exec helper (`--traced-session`, see gym-exec.c).
  const tracer = confinement === null ? (options.tracer ?? null) : null;
  const askPipes = confinement !== null && options.pipes !== false;
  const sessionId = createId('exec');
  // A confined shell's helper prints this token first thing, after it made its pipes: the daemon
  // opens them only then (its pid can show in the engine before the helper has run a line).
  const readyToken =
    confinement === null && tracer === null ? null : `gym-ready-${pooledRandomBytes(12).toString('hex')}`;
  const exec = await container.exec({
    Cmd:
      tracer !== null
        ? [tracer, '--traced-session', '', 'sh']
        : confinement === null
          ? ['sh']
          : [confinement.helperPath, 'sh'],
    Env: [
      `GYM_SESSION_ID=${sessionId}`,
      ...(readyToken === null ? [] : [`GYM_EXEC_READY=${readyToken}`]),
      ...(askPipes ? [SESSION_PIPES_ENV] : []),
    ],
    AttachStdin: true,
    AttachStdout: true,
    AttachStderr: true,
    Tty: false,
    ...(user === undefined ? {} : { User: user }),
  });
  const stream = (await exec.start({ hijack: true, stdin: true })) as Duplex;
  // The exec's output: the ready token first, then (on the engine's stream) the shell's.
  let deliver: (name: 'stdout' | 'stderr', payload: Buffer) => void = () => {};
  const ready = new ReadyToken(readyToken, (name, payload) => deliver(name, payload));
  const demuxer = new DockerStreamDemuxer((name, payload) => ready.push(name, payload));
  stream.on('data', (chunk: Buffer) => demuxer.push(chunk));
  stream.on('error', () => {});
  const ended = streamDone(stream);
  let pipes: SessionPipes | null = null;
  let kill: SessionKill = {
    kind: 'tagged',
    kill: (execId, commandUser) => killTagged(container, execId, 'tagged-only', commandUser),
  };
  if (tracer !== null) {
    // The tracer's end takes the shell and all the session's commands run; what ended commands
    // left in the background the tracer has let go of already, so it lives on.
    const tracerPid = () => tracerPidOf(ready, ended);
    kill = {
      kind: 'whole-session',
      kill: async (drop) => {
        const outcome = await killTracer(container, tracer, tracerPid);
        drop();
        return outcome;
      },
      releaseBackground: async () => {},
    };
  }
  if (confinement !== null) {
    const confined = await confineExec(exec, confinement, `gym-${sessionId}`, {
      seen: Promise.race([ready.seen, ended]),
      get nsPid() {
        return ready.nsPid;
      },
    });
    if ('failure' in confined && confined.notStarted !== undefined) {
      // The runtime refused to start the shell (a user the sandbox lacks): a result for the
      // command that asked for it, with the runtime's message.
      const said: Buffer[] = [];
      deliver = (_name, payload) => said.push(payload);
      await withTimeout(ended, 5_000);
      stream.destroy();
      ready.flush();
      throw new SessionNotStarted(confined.notStarted, Buffer.concat(said).toString('utf8'));
    }
    if ('failure' in confined) {
      // Fail closed: an unconfined shell's commands could outlive their timeouts. Closing its
      // stdin before the go byte makes the helper exit (125) without running anything.
      stream.end();
      stream.destroy();
      throw new GymError(
        'PROVIDER_ERROR',
        'could not move the session shell into its own cgroup; it was not started',
        { details: { reason: confined.failure } },
      );
    }
    const { cgroup } = confinement;
    // The shell's host pid is what stays in the cgroup between commands.
    const keep = new Set([confined.pid]);
    kill = {
      kind: 'whole-session',
      kill: async (drop) => {
        await cgroup.kill(confined.cgroup).catch(() => {});
        drop();
        await cgroup.remove(confined.cgroup);
        return 'killed' as const;
      },
      releaseBackground: () => cgroup.evacuate(confined.cgroup, keep),
    };
    // Opened after the token and before the go byte: the helper holds the pipes' other ends
    // until then. A token that does not come (bounded) leaves the shell on the engine's stream.
    if (
      askPipes &&
      (await Promise.race([
        ready.seen.then(() => true),
        ended.then(() => false),
        sleep(PIPES_READY_WAIT_MS).then(() => false),
      ]))
    )
      pipes = openHelperPipes(confined.pid);
    // On the pipes the exec's stream carries nothing after the go byte (the helper puts the
    // shell's stdio on the pipes): it ends once the byte is flushed, not before.
    if (pipes === null) stream.write(GO_BYTE);
    else stream.end(PIPES_GO_BYTE, () => stream.destroy());
  }
  if (pipes !== null) return pipedSession(pipes, user, kill);
  const session = new ShellSession(
    {
      write: (text) => stream.write(text),
      close: () => stream.destroy(),
    },
    { user, kill },
  );
  deliver = (name, payload) => session.receive(name, payload);
  const lost = () => {
    ready.flush();
    // How the shell's exec exited says whether it ever started (the runtime's 126 for a user the
    // sandbox lacks): asked once, bounded, as the session is lost anyway.
    void withTimeout(exec.inspect(), 2_000).then(
      (inspected) =>
        session.channelLost(
          inspected === null || inspected.Running || inspected.ExitCode === null
            ? undefined
            : inspected.ExitCode,
        ),
      () => session.channelLost(),
    );
  };
  if (stream.destroyed || stream.readableEnded) lost();
  stream.once('end', lost);
  stream.once('close', lost);
  return session;
}

/**
 * A session over the helper's pipes. The exec's stream carries nothing once the shell runs on
 * the pipes (the helper replaced its stdio) and is closed after the go byte; the shell is lost
 * when both of its output pipes end (it exited, and no job it left holds them), as the engine's
 * stream would end.
 */
function pipedSession(pipes: SessionPipes, user: string | undefined, kill: SessionKill): ShellSession {
  const { stdin, stdout, stderr } = pipes;
  const session = new ShellSession(
    {
      write: (text) => stdin.write(text),
      close: () => {
        stdin.destroy();
        stdout.destroy();
        stderr.destroy();
      },
    },
    { user, kill },
  );
  // A write after the shell died fails with EPIPE; the lost channel says so.
  stdin.on('error', () => {});
  let open = 2;
  const ended = () => {
    open -= 1;
    if (open > 0) return;
    // Nothing reads the shell's input any more: let go of it too, so a session that died on its
    // own (the agent killed its shell) holds no descriptor after it.
    stdin.destroy();
    session.channelLost();
  };
  for (const [name, pipe] of [
    ['stdout', stdout],
    ['stderr', stderr],
  ] as const) {
    pipe.on('data', (chunk: Buffer) => session.receive(name, chunk));
    pipe.on('error', () => {});
    pipe.once('close', ended);
  }
  return session;
}
