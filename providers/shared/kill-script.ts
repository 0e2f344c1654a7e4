import { shellJoin } from './shell.ts';

/**
 * A POSIX shell script that kills every process carrying `GYM_EXEC_ID=<id>` in its environment,
 * and, when asked (`tagged-and-their-sessions`), every process in the same session as one of them.
 *
 * Why the environment and not only the process group: a command can leave its group (`setsid`,
 * job control in a nested shell) but it and its children keep the environment they were started
 * with. Why also the session in one-shot mode: `docker exec` and `kubectl exec` make the command
 * a session leader, so a child that cleared its environment is still found by its session.
 *
 * Each pass first stops every match, then kills them: killing one at a time lets a parent shell
 * run its next command (`sleep 9; echo never` would print) between its child's death and its own.
 * Passes repeat until one finds nothing, so processes forked during a pass die in the next.
 * It needs only `sh` and its builtins (`read`, `kill`): no other program of the sandbox's, which
 * the agent may have replaced. `read` drops the NUL separators of /proc/<pid>/environ, so the tag
 * is found as a substring; exec ids are random and of one length, so one never contains another.
 *
 * This is the weaker guarantee, used only where a provider cannot confine a command from outside
 * (Docker does, with cgroups; see `docker/exec-cgroups.ts`): a process that cleared its
 * environment and left its session (`env -i setsid ...`), or an agent that replaced `/bin/sh`,
 * escapes it. An agent running as the script's user can also stop or kill it, or fork faster
 * than 50 passes kill: a provider that runs it for a timeout treats anything but exit 0 in time
 * as a failed kill and kills the whole sandbox from outside (see {@link KillOutcome}).
 *
 * A process group is killed as `kill -9 "-$session"`, never with `--` before it: dash (the `sh`
 * of Debian and Ubuntu images) takes `--` there for a pid and fails, killing no session at all.
 *
 * Arguments: `$1` the exec id, `$2` `with-sessions` to kill whole sessions too. Build them with
 * `killScriptArgv`.
 */
export const KILL_SCRIPT = `
id="$1"; mode="$2"; pass=0
while [ "$pass" -lt 50 ]; do
  matches=""; sessions=""
  for dir in /proc/[0-9]*; do
    pid="\${dir#/proc/}"
    [ "$pid" = "$$" ] && continue
    environment=""; line=""
    { while IFS= read -r line; do environment="$environment $line"; done; } 2>/dev/null < "$dir/environ" || continue
    environment="$environment $line"
    case "$environment" in
      *"GYM_EXEC_ID=$id"*)
        kill -STOP "$pid" 2>/dev/null && matches="$matches $pid"
        if [ "$mode" = with-sessions ]; then
          read -r stat < "$dir/stat" 2>/dev/null || stat=""
          rest="\${stat##*) }"
          set -- $rest
          [ -n "$4" ] && [ "$4" != 0 ] && [ "$4" != 1 ] && sessions="$sessions $4"
        fi
        ;;
    esac
  done
  [ -z "$matches" ] && exit 0
  for session in $sessions; do kill -9 "-$session" 2>/dev/null; done
  for pid in $matches; do kill -9 "$pid" 2>/dev/null; done
  pass=$((pass + 1))
done
exit 1
`;

export const EXEC_ID_ENV = 'GYM_EXEC_ID';

/**
 * What a timeout kill reaches: the processes tagged with the exec id only (a command of a session
 * shell), or those and every process of their sessions (a one-shot command, its own session leader).
 */
export type KillReach = 'tagged-only' | 'tagged-and-their-sessions';

/**
 * How a timeout kill through the kill script inside a sandbox ended.
 *
 * - `killed`: the script exited 0 in time, so its last pass found no tagged process.
 * - `sandbox_killed`: it did not (the agent stopped or killed it, it ran 50 passes against a fork
 *   loop and gave up, the exec channel failed), so nothing proves the command is dead; the
 *   provider killed the whole sandbox from outside (the engine, the kubelet), which nothing in
 *   the sandbox can resist. The command's processes resisted their kill, so the loss is its own:
 *   the result is `timeout` (or `killed` for a cancel) with `sandboxLost` and
 *   {@link KILL_FAILED_REASON} (the note in stderr too), never `sandbox_gone`, and the daemon
 *   forgets the sandbox.
 */
export type KillOutcome = 'killed' | 'sandbox_killed';

/** Added to a command's stderr when its timeout kill did not take effect and the sandbox was killed. */
export const KILL_FAILED_NOTE = Buffer.from(
  '\n[gym: the timeout kill did not take effect inside the sandbox (stopped, killed or outrun); the sandbox was killed]\n',
);

/** The `reason` of a result whose sandbox was killed because the command resisted its kill. */
export const KILL_FAILED_REASON =
  "the command's processes resisted their kill (stopped, killed or outran the kill script), so the provider killed the sandbox";

/** The command that runs the kill script for one exec inside a sandbox (through any exec channel). */
export function killScriptArgv(execId: string, reach: KillReach): string[] {
  return [
    'sh',
    '-c',
    KILL_SCRIPT,
    'gym-kill',
    execId,
    reach === 'tagged-and-their-sessions' ? 'with-sessions' : 'tagged-only',
  ];
}

/**
 * The kill script run on the host, outside the sandbox (`$1`: a file of the sandbox's pid
 * namespace, `$2`: the exec id, `$3`: `with-sessions` or `tagged-only`). Where the agent runs as
 * the same user as a kill script inside its sandbox, it can stop that script (SIGSTOP) before it
 * kills anything, and the command and its exec never end; nothing in the sandbox can touch a
 * process of the host. Every process of the host's /proc in that pid namespace whose environment
 * carries the id is stopped, then killed (with the process groups of the sessions it leads
 * there), repeated while any is found. Builtins only (`[ -ef ]` compares the namespaces), so no
 * fork per process; `kill -9` of a process of the same user needs no privilege.
 */
export const HOST_KILL_SCRIPT = `
ns="$1"; id="$2"; mode="$3"; pass=0
while [ "$pass" -lt 50 ]; do
  matches=""; sessions=""
  for dir in /proc/[0-9]*; do
    [ "$dir/ns/pid" -ef "$ns" ] || continue
    environment=""; line=""
    { while IFS= read -r line; do environment="$environment $line"; done; } 2>/dev/null < "$dir/environ" || continue
    environment="$environment $line"
    case "$environment" in
      *"GYM_EXEC_ID=$id"*)
        pid="\${dir#/proc/}"
        kill -STOP "$pid" 2>/dev/null && matches="$matches $pid"
        if [ "$mode" = with-sessions ]; then
          read -r stat < "$dir/stat" 2>/dev/null || stat=""
          rest="\${stat##*) }"
          set -- $rest
          [ -n "$4" ] && [ "/proc/$4/ns/pid" -ef "$ns" ] && sessions="$sessions $4"
        fi
        ;;
    esac
  done
  [ -z "$matches" ] && exit 0
  for session in $sessions; do kill -9 "-$session" 2>/dev/null; done
  for pid in $matches; do kill -9 "$pid" 2>/dev/null; done
  pass=$((pass + 1))
done
exit 1
`;

/** The host command that runs {@link HOST_KILL_SCRIPT} with the host's static busybox. */
export function hostKillScriptArgv(
  busybox: string,
  pidNamespace: string,
  execId: string,
  reach: KillReach,
): string[] {
  return [
    busybox,
    'sh',
    '-c',
    HOST_KILL_SCRIPT,
    'gym-kill',
    pidNamespace,
    execId,
    reach === 'tagged-and-their-sessions' ? 'with-sessions' : 'tagged-only',
  ];
}

/**
 * The escalation of a host-side kill that did not take effect (a fork loop that outran its 50
 * passes), run on the host (`$1`: a file of the sandbox's pid namespace): SIGKILL to that
 * namespace's init (the process there whose innermost pid is 1), after which the kernel kills
 * every process of the namespace at once, forks included. The sandbox ends with it. Exits 0 once
 * no process of the namespace is left (bounded), 1 otherwise; at once for its own namespace (the
 * host's, when a host process took a dead init's pid: nothing of the sandbox is left there).
 */
export const HOST_KILL_NAMESPACE_SCRIPT = `
ns="$1"; pass=0
[ "$ns" -ef /proc/self/ns/pid ] && exit 0
while [ "$pass" -lt 100 ]; do
  left=0
  for dir in /proc/[0-9]*; do
    [ "$dir/ns/pid" -ef "$ns" ] || continue
    left=1
    while read -r key rest; do
      if [ "$key" = NSpid: ]; then set -- $rest; for inner; do :; done; [ "$inner" = 1 ] && kill -9 "\${dir#/proc/}" 2>/dev/null; fi
    done < "$dir/status" 2>/dev/null
  done
  [ "$left" = 0 ] && exit 0
  pass=$((pass + 1))
  sleep 0.05 2>/dev/null || :
done
exit 1
`;

/** The host command that runs {@link HOST_KILL_NAMESPACE_SCRIPT} with the host's static busybox. */
export function hostKillNamespaceArgv(busybox: string, pidNamespace: string): string[] {
  return [busybox, 'sh', '-c', HOST_KILL_NAMESPACE_SCRIPT, 'gym-kill-sandbox', pidNamespace];
}

/**
 * Stops every process of a sandbox but its init, run on the host (`$1`: a file of the sandbox's
 * pid namespace, `$2`: the init's host pid): each process of the host's /proc in that namespace
 * is stopped, then killed, repeated while any is found (nothing forks while stopped). A zombie
 * is already dead (its parent reaps it, or never will): it is not counted, where a loop that
 * counted it ran out of rounds and failed the stop (an init that does not reap, or a loaded host
 * slow to). The init is held stopped while the rounds run and let go on at the end: an init
 * that starts a child again as soon as one dies (Enroot's keeper and its `sleep`) won round after
 * round, and the stop ended only by the luck of a round falling between a death and the next
 * start (a SIGSTOP from the host reaches a namespace's init, which takes no signal from inside).
 * Prints how many it killed. Run inside the
 * sandbox, as the agent's user, the agent could stop it before it ran and the call would never
 * return. A namespace that is the script's own (the host's: the
 * sandbox's init died and a host process took its pid, which wraps within minutes where
 * pid_max is 32768) is nothing of a sandbox: it stops nothing, where it would have stopped every
 * process of the host, itself among them.
 */
export const HOST_STOP_SCRIPT = `
ns="$1"; init="$2"; killed=0; pass=0; seen=""
[ "$ns" -ef /proc/self/ns/pid ] && { echo 0; exit 0; }
held=""
[ "$init" != 0 ] && [ /proc/"$init"/ns/pid -ef "$ns" ] && kill -STOP "$init" 2>/dev/null && held=1
trap '[ -n "$held" ] && kill -CONT "$init" 2>/dev/null' EXIT
while [ "$pass" -lt 50 ]; do
  matches=""
  for dir in /proc/[0-9]*; do
    pid="\${dir#/proc/}"
    [ "$pid" = "$init" ] && continue
    [ "$dir/ns/pid" -ef "$ns" ] || continue
    state=""
    while read -r key value rest; do [ "$key" = State: ] && { state="$value"; break; }; done < "$dir/status" 2>/dev/null
    case "$state" in Z|X) continue ;; esac
    kill -STOP "$pid" 2>/dev/null && matches="$matches $pid"
  done
  [ -z "$matches" ] && { echo "$killed"; exit 0; }
  for pid in $matches; do
    kill -9 "$pid" 2>/dev/null || continue
    case " $seen " in *" $pid "*) ;; *) seen="$seen $pid"; killed=$((killed + 1)) ;; esac
  done
  pass=$((pass + 1))
done
echo "$killed"
exit 1
`;

/** The host command that runs {@link HOST_STOP_SCRIPT} with the host's static busybox. */
export function hostStopScriptArgv(busybox: string, pidNamespace: string, initPid: number): string[] {
  return [busybox, 'sh', '-c', HOST_STOP_SCRIPT, 'gym-stop', pidNamespace, String(initPid)];
}

/** Where a host-side kill acts: a pid namespace on the host, after a guard that it is still the sandbox's. */
export interface KillScope {
  /** `/proc/<pid>/ns/pid_for_children` of the sandbox's init, on the host. */
  namespace: string;
  /** Shell lines run first that `exit 0` when the namespace is no longer the sandbox's ('' for none). */
  guard: string;
}

/**
 * Kills the processes carrying `tag` in `scope` from the host, with the host's busybox over its
 * /proc (a kill script inside would run as the agent's user, who could stop it before it killed
 * anything); `run` runs one shell line on the host, `scope` finds where. When it gives up (a fork loop outran its
 * passes) the whole namespace goes, which no fork outruns, and `onEscalate` is told first.
 * A scope of null (nothing runs) or a host that does not answer is `killed`: its commands end as it does.
 */
export async function killTaggedOnHost(
  run: (line: string) => Promise<{ code: number | null }>,
  busybox: string,
  scope: () => Promise<KillScope | null>,
  tag: string,
  reach: KillReach,
  onEscalate: () => void = () => {},
): Promise<KillOutcome> {
  try {
    const found = await scope();
    if (found === null) return 'killed';
    const { guard, namespace } = found;
    const ran = await run(`${guard}exec ${shellJoin(hostKillScriptArgv(busybox, namespace, tag, reach))}`);
    if (ran.code === 0) return 'killed';
    onEscalate();
    await run(`${guard}exec ${shellJoin(hostKillNamespaceArgv(busybox, namespace))}`).catch(() => null);
    return 'sandbox_killed';
  } catch {
    return 'killed';
  }
}
