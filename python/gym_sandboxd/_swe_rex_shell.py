"""The shell side of the SWE-ReX runtime (``swe_rex``): scripts run in the sandbox, and their markers.

SWE-ReX keeps one interactive bash per session, so ``cd``, ``export``, functions and aliases carry
from one command to the next. The daemon runs every command in a fresh process (its timeout kills
every process the command started, which a long-lived shell would escape), so a session here is a
state file in the sandbox instead: each command is one exec of :data:`SESSION_SCRIPT`, which loads
the state, runs the command in the current shell and writes the state back when it ends.

Every command carries a run id, made once per call on the client: the script claims it with an
exclusive create before anything else, so the same request sent twice (a retry after a connection
that broke after the daemon had it) runs the command once and reports the second as a replay.

The scripts talk to the client on stderr only (the command's own stderr joins its stdout, as on
SWE-ReX's terminal), in lines that carry the run id, which the command cannot know in advance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# Where sessions keep their state in the sandbox (one folder per session, made by the script).
STATE_ROOT = "/tmp/.gym-swe-rex"
# The prompt SWE-ReX's own bash sessions set and answer as `expect_string` when a command ended.
PS1 = "SHELLPS1PREFIX"
# Exit codes of the scripts themselves (the command's own never reach them: these exit before it runs).
REPLAYED_EXIT = 240
SYNTAX_EXIT = 241

# $1 state folder, $2 run id, $3 the command, $4 `fifo` for standard input from a named pipe next
# to the run's claim (input sent later: `is_interactive_command`), else none. Variables of bash's own (or of this script: `__gym_*`)
# are not carried over; the rest are, with their attributes (exported, arrays, integers, read-only).
# Few processes of its own (each is a fork on a busy host): the claim is an exclusive create
# (`set -C`), the names come from `${!X*}` expansions rather than `$(compgen -v)`.
SESSION_SCRIPT = r"""
__gym_d=$1 __gym_run=$2 __gym_cmd=$3 __gym_input=$4
set --
[ -d "$__gym_d/runs" ] || mkdir -p "$__gym_d/runs" 2>/dev/null
set -C
if ! { : >"$__gym_d/runs/$__gym_run"; } 2>/dev/null; then
  printf 'gym-swe-rex:%s:replayed\n' "$__gym_run" >&2; exit 240
fi
set +C
printf 'gym-swe-rex:%s:pid %s\n' "$__gym_run" "$$" >&2
if ! bash -n <<<"$__gym_cmd" 2>"$__gym_d/runs/$__gym_run"; then
  printf 'gym-swe-rex:%s:syntax\n' "$__gym_run" >&2; cat "$__gym_d/runs/$__gym_run" >&2; exit 241
fi
if [ "$__gym_input" = fifo ] && mkfifo -m 600 "$__gym_d/runs/$__gym_run.in" 2>/dev/null; then
  exec 2>&1 0<>"$__gym_d/runs/$__gym_run.in"
else
  exec 2>&1 </dev/null
fi
__gym_save() {
  __gym_rc=$?
  {
    printf 'cd -- %q 2>/dev/null\n' "$PWD"
    for __gym_n in ${!A*} ${!B*} ${!C*} ${!D*} ${!E*} ${!F*} ${!G*} ${!H*} ${!I*} ${!J*} ${!K*} ${!L*} ${!M*} ${!N*} ${!O*} ${!P*} ${!Q*} ${!R*} ${!S*} ${!T*} ${!U*} ${!V*} ${!W*} ${!X*} ${!Y*} ${!Z*} ${!a*} ${!b*} ${!c*} ${!d*} ${!e*} ${!f*} ${!g*} ${!h*} ${!i*} ${!j*} ${!k*} ${!l*} ${!m*} ${!n*} ${!o*} ${!p*} ${!q*} ${!r*} ${!s*} ${!t*} ${!u*} ${!v*} ${!w*} ${!x*} ${!y*} ${!z*} ${!_*}; do
      case $__gym_n in
        BASH*|SHELLOPTS|PPID|UID|EUID|GROUPS|FUNCNAME|PIPESTATUS|LINENO|RANDOM|SRANDOM|SECONDS|EPOCH*|HISTCMD|DIRSTACK|COMP*|_|__gym_*|SHLVL|PWD|OLDPWD|OPTIND|OPTERR) ;;
        *) declare -p "$__gym_n" ;;
      esac
    done
    declare -f
    alias -p
    set +o
    shopt -p
    umask -p
  } >"$__gym_d/state.new" 2>/dev/null && mv -f "$__gym_d/state.new" "$__gym_d/state"
  exit "$__gym_rc"
}
shopt -s expand_aliases
if [ -f "$__gym_d/state" ]; then . "$__gym_d/state" >/dev/null 2>&1; fi
trap __gym_save EXIT
eval "$__gym_cmd"
"""

# $1 marker folder, $2 run id, $3 1 to merge stderr into stdout; then the program and its arguments.
EXECUTE_SCRIPT = r"""
mkdir -p "$1" 2>/dev/null
if ! mkdir "$1/$2" 2>/dev/null; then printf 'gym-swe-rex:%s:replayed\n' "$2" >&2; exit 240; fi
if [ "$3" = 1 ]; then exec 2>&1; fi
shift 3
exec "$@"
"""

# $1 the pid of a session command, $2 a signal: to it and every process below it (SIGINT: as
# Ctrl-C at a terminal; background jobs of a non-interactive shell ignore it, as they do there).
SIGNAL_SCRIPT = r"""
__gym_tree() {
  for __gym_c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do __gym_tree "$__gym_c"; done
  kill -"$__gym_sig" "$1" 2>/dev/null
}
__gym_sig=$2
__gym_tree "$1"
"""


def session_argv(state_dir: str, run_id: str, command: str, *, takes_input: bool = False) -> list[str]:
    input_mode = "fifo" if takes_input else "none"
    return ["bash", "-c", SESSION_SCRIPT, "gym-swe-rex", state_dir, run_id, command, input_mode]


def input_path(state_dir: str, run_id: str) -> str:
    """The named pipe a command started with ``takes_input`` reads its standard input from."""
    return f"{state_dir}/runs/{run_id}.in"


# $1 the named pipe, $2 a line. Opened read-write, so the write never waits for a reader (the
# program may have ended); the pipe holds the line until one reads it.
SEND_SCRIPT = r"""[ -p "$1" ] && printf '%s\n' "$2" 1<>"$1" """


def send_argv(pipe: str, line: str) -> list[str]:
    return ["sh", "-c", SEND_SCRIPT, "gym-swe-rex", pipe, line]


def execute_argv(
    marker_dir: str,
    run_id: str,
    command: str | Sequence[str],
    *,
    shell: bool,
    env: Mapping[str, str] | None,
    merge_output: bool,
) -> list[str]:
    """The argv of SWE-ReX's ``Command`` as ``subprocess.run`` reads it, inside the idempotent wrapper.

    ``shell`` runs a string with ``/bin/sh -c`` (a list: its first item is the script, the rest the
    shell's own arguments); without it a string is the program's name. ``env`` replaces the whole
    environment, as ``subprocess.run(env=...)`` does.
    """
    if isinstance(command, str):
        program = ["/bin/sh", "-c", command] if shell else [command]
    else:
        program = ["/bin/sh", "-c", *command] if shell else list(command)
    if env is not None:
        program = ["env", "-i", *(f"{key}={value}" for key, value in env.items()), *program]
    return ["sh", "-c", EXECUTE_SCRIPT, "gym-swe-rex", marker_dir, run_id, "1" if merge_output else "0", *program]


def signal_argv(pid: int, signal: str) -> list[str]:
    """Sends ``signal`` (``INT``, ``KILL``) to the process ``pid`` and everything it started."""
    return ["sh", "-c", SIGNAL_SCRIPT, "gym-swe-rex", str(pid), signal]


class Control:
    """What the script said on stderr about one run: its pid, a replay, a syntax error."""

    def __init__(self, run_id: str, stderr: str) -> None:
        prefix = f"gym-swe-rex:{run_id}:"
        self.pid: int | None = None
        self.replayed = False
        self.syntax_error: str | None = None
        lines = stderr.split("\n")
        for index, line in enumerate(lines):
            if not line.startswith(prefix):
                continue
            what = line[len(prefix) :]
            if what == "replayed":
                self.replayed = True
            elif what.startswith("pid ") and what[4:].isdigit() and self.pid is None:
                # The script's own line comes first, before the command could write anything.
                self.pid = int(what[4:])
            elif what == "syntax":
                self.syntax_error = "\n".join(lines[index + 1 :])
                break
