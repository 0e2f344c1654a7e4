/**
 * A POSIX shell script that kills every process carrying `GYM_EXEC_ID=<id>` in its environment,
 * and, in `session` mode, every process in the same session as one of them.
 *
 * Why the environment and not only the process group: a command can leave its group (`setsid`,
 * job control in a nested shell) but it and its children keep the environment they were started
 * with. Why also the session in one-shot mode: `docker exec` and `kubectl exec` make the command
 * a session leader, so a child that cleared its environment is still found by its session.
 *
 * Each pass first stops every match, then kills them: killing one at a time lets a parent shell
 * run its next command (`sleep 9; echo never` would print) between its child's death and its own.
 * Passes repeat until one finds nothing, so processes forked during a pass die in the next.
 * It needs only `sh`, `kill` and `tr`, which every image with a shell has.
 *
 * Arguments: `$1` the exec id, `$2` `session` to kill whole sessions too.
 */
export const KILL_SCRIPT = `
id="$1"; mode="$2"; pass=0
while [ "$pass" -lt 50 ]; do
  matches=""; sessions=""
  for dir in /proc/[0-9]*; do
    pid="\${dir#/proc/}"
    [ "$pid" = "$$" ] && continue
    environment=$(tr '\\000' '\\n' < "$dir/environ" 2>/dev/null) || continue
    case "
$environment
" in
      *"
GYM_EXEC_ID=$id
"*)
        kill -STOP "$pid" 2>/dev/null && matches="$matches $pid"
        if [ "$mode" = session ]; then
          read -r stat < "$dir/stat" 2>/dev/null || stat=""
          rest="\${stat##*) }"
          set -- $rest
          [ -n "$4" ] && [ "$4" != 0 ] && [ "$4" != 1 ] && sessions="$sessions $4"
        fi
        ;;
    esac
  done
  [ -z "$matches" ] && exit 0
  for session in $sessions; do kill -9 -- "-$session" 2>/dev/null; done
  for pid in $matches; do kill -9 "$pid" 2>/dev/null; done
  pass=$((pass + 1))
done
exit 1
`;

export const EXEC_ID_ENV = 'GYM_EXEC_ID';
