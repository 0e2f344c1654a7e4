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
 * Without one, a timeout runs the kill script for the command's tagged processes.
 */

import type { Duplex } from 'node:stream';
import type Docker from 'dockerode';
import { GymError } from '../../core/errors.ts';
import { createId } from '../../core/ids.ts';
import { type SessionKill, ShellSession } from '../shared/shell-session.ts';
import { DockerStreamDemuxer } from './demux.ts';
import { confineExec, type ExecConfinement, GO_BYTE, killTagged } from './one-shot-exec.ts';

/** Opens a session shell in `container` as `user`, confined when `confinement` is given. */
export async function openDockerSession(
  container: Docker.Container,
  user: string | undefined,
  confinement: ExecConfinement | null = null,
): Promise<ShellSession> {
  const sessionId = createId('exec');
  const exec = await container.exec({
    Cmd: confinement === null ? ['sh'] : [confinement.helperPath, 'sh'],
    Env: [`GYM_SESSION_ID=${sessionId}`],
    AttachStdin: true,
    AttachStdout: true,
    AttachStderr: true,
    Tty: false,
    ...(user === undefined ? {} : { User: user }),
  });
  const stream = (await exec.start({ hijack: true, stdin: true })) as Duplex;
  let kill: SessionKill = {
    kind: 'tagged',
    kill: (execId, commandUser) => killTagged(container, execId, 'tagged-only', commandUser),
  };
  if (confinement !== null) {
    const confined = await confineExec(exec, confinement, `gym-${sessionId}`);
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
      },
      releaseBackground: () => cgroup.evacuate(confined.cgroup, keep),
    };
    stream.write(GO_BYTE);
  }
  const session = new ShellSession(
    {
      write: (text) => stream.write(text),
      close: () => stream.destroy(),
    },
    { user, kill },
  );
  const demuxer = new DockerStreamDemuxer((name, payload) => session.receive(name, payload));
  stream.on('data', (chunk: Buffer) => demuxer.push(chunk));
  stream.on('error', () => {});
  const lost = () => session.channelLost();
  stream.once('end', lost);
  stream.once('close', lost);
  return session;
}
