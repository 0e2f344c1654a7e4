/**
 * The SSH transport of a session shell (`../shared/shell-session.ts` holds the protocol): one
 * long-lived SSH channel running the shell (for apptainer, `apptainer exec instance://NAME ...
 * sh`), its stdin kept open between commands. The channel holds its slot on the host's pool for
 * the session's life (see `pool.ts`). A timeout runs the kill script for the command's exec id
 * only (the shell shares the commands' session and must live), then drops the session if its
 * markers do not come. The gateway relay runs over such a channel too.
 */
import { GatewayRelay, type OpenRelayChannel } from '../shared/gateway-relay.ts';
import type { KillOutcome } from '../shared/kill-script.ts';
import { ShellSession } from '../shared/shell-session.ts';
import type { RemoteExecOptions, RemoteProcess } from './connection.ts';

/** What can start a held command on a host: an `SshConnection` or an `SshPool` (which keeps a channel free for short commands). */
export interface ChannelStarter {
  start(
    command: string,
    options: Omit<RemoteExecOptions, 'stdin'> & { held?: boolean },
  ): Promise<RemoteProcess>;
}

/**
 * Opens the shell by running `command` (a shell line for the host that ends in the sandbox's
 * shell reading commands on stdin). `killTagged` kills the processes tagged with one exec id.
 */
export async function openSshSession(
  host: ChannelStarter,
  command: string,
  killTagged: (execId: string) => Promise<KillOutcome>,
): Promise<ShellSession> {
  let session: ShellSession | null = null;
  const started = await host.start(command, {
    held: true,
    onStdout: (chunk) => session?.receive('stdout', chunk),
    onStderr: (chunk) => session?.receive('stderr', chunk),
  });
  session = new ShellSession(
    {
      write: (text) => started.write(text),
      close: () => started.close(),
    },
    { user: undefined, kill: { kind: 'tagged', kill: (execId) => killTagged(execId) } },
  );
  const opened = session;
  const lost = () => opened.channelLost();
  started.done.then(lost, lost);
  return opened;
}

/**
 * Starts the gateway relay (`../shared/gateway-relay.ts`) by running `command` on the host (a
 * shell line that ends in the relay binary inside the sandbox, with its port) over one held
 * channel, and resolves once it listens.
 */
/** The relay's channel: `command` held open over SSH, its stdin and stdout the relay's frames. */
export function sshRelayChannel(host: ChannelStarter, command: string): OpenRelayChannel {
  return async (io) => {
    const started = await host.start(command, { held: true, onStdout: io.onStdout });
    io.stdin.pipe(started.stdin);
    return {
      done: started.done.catch(() => null),
      pause: () => started.pause(),
      resume: () => started.resume(),
      abandon: () => started.close(),
    };
  };
}

export function startSshRelay(
  host: ChannelStarter,
  command: string,
  where: { label: string; details: Record<string, unknown> },
  socketPath: string,
  maxConnections: number,
  stats: { refusedTotal: number },
): Promise<GatewayRelay> {
  return GatewayRelay.start(sshRelayChannel(host, command), where, socketPath, maxConnections, stats);
}
