/**
 * The Kubernetes transport of a session shell (`../shared/shell-session.ts` holds the protocol):
 * one long-lived pods/exec stream whose stdin stays open between commands (v4 or v5: it is never
 * ended, only dropped). A timeout
 * runs the kill script for the command's exec id (not the session's processes: the shell shares
 * their session), then drops the session if its markers do not come (or, when the script did not
 * take effect and the Pod was killed instead, at once).
 */
import { PassThrough } from 'node:stream';
import type { KubeConfig } from '@kubernetes/client-node';
import type { KillOutcome } from '../shared/kill-script.ts';
import { ShellSession } from '../shared/shell-session.ts';
import { type PodTarget, startPodExec } from './pod-exec.ts';

/**
 * Opens the shell: `sh` through `wrapper` (which applies the user), reading commands on stdin.
 * `killTagged` kills the processes tagged with one exec id (`tagged-only`).
 */
export async function openPodSession(
  kubeConfig: KubeConfig,
  target: PodTarget,
  wrapper: string[],
  killTagged: (execId: string) => Promise<KillOutcome>,
): Promise<ShellSession> {
  const input = new PassThrough();
  let session: ShellSession | null = null;
  const exec = await startPodExec(kubeConfig, target, [...wrapper, 'sh'], {
    stdin: input,
    // A session never ends its stdin (close drops the stream), so it works on v4 too.
    keepStdinOpen: true,
    onStdout: (chunk) => session?.receive('stdout', chunk),
    onStderr: (chunk) => session?.receive('stderr', chunk),
  });
  session = new ShellSession(
    {
      write: (text) => input.write(text),
      close: () => {
        input.end();
        exec.abandon();
      },
    },
    { user: undefined, kill: { kind: 'tagged', kill: (execId) => killTagged(execId) } },
  );
  const opened = session;
  exec.done.then((end) => opened.channelLost(end.kind === 'exited' ? end.exitCode : undefined));
  return opened;
}
