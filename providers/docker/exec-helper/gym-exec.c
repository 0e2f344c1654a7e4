/*
 * gym-exec: the trusted first process of every exec the Docker provider runs.
 *
 * It waits for one byte on stdin, the daemon's "go", sent only after the daemon has moved this
 * process into the exec's own cgroup; then it replaces itself with the command. Everything the
 * command starts is therefore born inside that cgroup, and a timeout kills all of it with
 * cgroup.kill, whatever the command does to its environment, session or the sandbox's binaries.
 *
 * When GYM_EXEC_READY is set, its value is written to stdout first, followed by this process's pid
 * in its own pid namespace as 10 decimal digits (and the variable is removed before the command
 * runs): the daemon learns that the process exists, and which host process it is, without asking
 * the engine.
 *
 * Until it runs the command it is not dumpable: no other process of the sandbox (same uid or not)
 * may ptrace it or open its /proc/PID/fd/0 to send the go byte early.
 *
 * When GYM_EXEC_PIPES is set (a session shell), it also makes three pipes before the ready token
 * and holds the daemon's ends at fds 3 (the command's stdin, to write), 4 (its stdout, to read)
 * and 5 (its stderr, to read), the command's ends at 6, 7 and 8. The daemon, root on the host,
 * opens /proc/PID/fd/3, 4 and 5 while this process waits (only it may: this process is not
 * dumpable), then sends the go byte `p`: the command runs on the pipes and its input and output
 * no longer pass through the engine. Any other go byte (the daemon could not open them) closes
 * the pipes and the command runs on the exec's own stdio, as without the variable.
 *
 * `gym-exec --keeper` is the container's PID 1 instead: it keeps the sandbox alive, reaps every
 * orphan, and never forks or runs anything from the sandbox's filesystem (an idle shell loop
 * would run the sandbox's own `sleep`, which an agent can replace). Signals sent from inside the
 * sandbox do not reach it (PID 1 of a pid namespace only gets those it waits for, and it ignores
 * any whose sender is visible in its namespace); SIGTERM or SIGINT from outside (docker stop)
 * ends it, and with it the sandbox. SIGUSR1 from outside (`docker kill -s USR1`) makes it kill
 * every other process of the sandbox, repeated until none is left: how the daemon stops a
 * sandbox's processes where the host cannot see them one by one (gVisor, whose guest processes
 * live in its own kernel). Nothing in the sandbox can resist a SIGKILL its PID 1 sends.
 *
 * `gym-exec --traced DIR PROGRAM [ARGS...]` is the first process of a command under gVisor, where
 * the host cannot tell the guest's processes apart (no cgroup of the command's own) and the guest
 * kernel has no child subreaper: it forks the command and traces it (ptrace, seized before the
 * command runs), with every process it forks, clones or vforks traced from birth and killed by
 * the kernel when this tracer exits (PTRACE_O_EXITKILL). Nothing the command starts can leave
 * (only a tracer detaches; a process with neither CAP_SYS_PTRACE nor a dumpable target cannot
 * attach to this one). A timeout kills the tracer (`--kill-tracer PID`, PID from the ready
 * token), and with it all the command started. When the command itself ends, what it left running
 * is detached first, so background jobs outlive it as they would elsewhere; then the tracer exits
 * with the command's status. `--traced-session` does the same for a session shell: each process
 * the shell starts begins a group (a command and all it starts), detached when that process ends,
 * so what an ended command left in the background survives a later command's timeout, which kills
 * the shell too. The cost: a traced process cannot be traced again (strace or gdb inside fail),
 * and each fork stops for the tracer.
 *
 * `gym-exec --others` prints one line per process of the sandbox but PID 1 and itself (its pid, a
 * space, its command line with spaces for NULs): the daemon's view of what still runs where the
 * host's `ps` cannot see into the sandbox (gVisor), read by no program of the sandbox's own.
 * `gym-exec --host-fd-holders` prints the same for the processes holding a host file descriptor
 * (`pid comm`), which a live snapshot under gVisor could not restore.
 *
 * Usage: gym-exec PROGRAM [ARGS...]   (PROGRAM is looked up in PATH; argv[0] stays PROGRAM)
 *        gym-exec --keeper
 *        gym-exec --others | --host-fd-holders
 *        gym-exec --exec DIR PROGRAM [ARGS...]
 *        gym-exec --traced DIR PROGRAM [ARGS...] | --traced-session DIR PROGRAM [ARGS...]
 *        gym-exec --kill-tracer PID
 *
 * `--exec` enters DIR (unless empty) and runs PROGRAM at once, without a go byte: the first
 * process of a gVisor exec, whose runtime gives it the exec's capabilities as they are, even for a
 * user other than root (runc's execve drops them); this execve drops them as Linux does. And a DIR
 * that is not a directory is refused here (exit 126), where that runtime would run in `/`.
 * Exit: 125 when stdin ends before the go byte (nothing ran), else as `docker exec` reports a
 * command that cannot start: 127 when it is not found, 126 when it cannot be executed.
 * Built statically (`cc -static -Os`), so it runs in any image, with or without a libc.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

static void write_all(int fd, const char *bytes, size_t length) {
  while (length > 0) {
    ssize_t written = write(fd, bytes, length);
    if (written < 0) {
      if (errno == EINTR) continue;
      return;
    }
    bytes += written;
    length -= (size_t)written;
  }
}

/* The pipes of GYM_EXEC_PIPES: the daemon's ends first, then the command's, at fixed fds. */
enum { PIPE_FIRST_FD = 3, PIPE_LAST_FD = 8 };

static int make_pipes(void) {
  int in[2], out[2], err[2];
  if (pipe(in) != 0 || pipe(out) != 0 || pipe(err) != 0) return -1;
  /* Low fds first: dup2 onto 3..8 must not close a pipe end still to be placed. */
  int ends[6] = {in[1], out[0], err[0], in[0], out[1], err[1]};
  int moved[6];
  for (int i = 0; i < 6; i++) {
    moved[i] = fcntl(ends[i], F_DUPFD, 16);
    if (moved[i] < 0) return -1;
    close(ends[i]);
  }
  for (int i = 0; i < 6; i++) {
    if (dup2(moved[i], PIPE_FIRST_FD + i) < 0) return -1;
    close(moved[i]);
  }
  return 0;
}

static int use_pipes(void) {
  for (int i = 0; i < 3; i++)
    if (dup2(PIPE_FIRST_FD + 3 + i, i) < 0) return -1;
  return 0;
}

static void close_pipes(void) {
  for (int fd = PIPE_FIRST_FD; fd <= PIPE_LAST_FD; fd++) close(fd);
}

/* How many processes of the pid namespace /proc shows besides this one (zombies included). */
static int count_others(void) {
  DIR *proc = opendir("/proc");
  if (proc == NULL) return -1;
  int count = 0;
  struct dirent *entry;
  while ((entry = readdir(proc)) != NULL) {
    char *end;
    long pid = strtol(entry->d_name, &end, 10);
    if (*end == '\0' && pid > 0 && pid != (long)getpid()) count++;
  }
  closedir(proc);
  return count;
}

/*
 * Kills every process of the pid namespace but this one (kill(-1) spares the caller, PID 1 here),
 * reaping as it goes, until /proc shows no other: a process forked during one round dies in the
 * next, and a killed one never forks again. (gVisor's kill(-1) does not answer ESRCH when it
 * found nothing, so /proc is what says the sandbox is quiet.)
 */
static void stop_others(void) {
  for (int round = 0; round < 5000; round++) {
    kill(-1, SIGKILL);
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    if (count_others() == 0) return;
    usleep(1000);
  }
}

/*
 * Prints `PID TEXT` for every process but PID 1 and this one that `keep` accepts (all when NULL),
 * TEXT its /proc/PID/NAME with NULs and newlines as spaces, trailing ones dropped.
 */
static int list_processes(const char *name, int (*keep)(long pid)) {
  DIR *proc = opendir("/proc");
  if (proc == NULL) return 1;
  struct dirent *entry;
  while ((entry = readdir(proc)) != NULL) {
    char *end;
    long pid = strtol(entry->d_name, &end, 10);
    if (*end != '\0' || pid <= 1 || pid == (long)getpid() || (keep != NULL && !keep(pid))) continue;
    char path[64], line[4096];
    snprintf(path, sizeof path, "/proc/%ld/%s", pid, name);
    int fd = open(path, O_RDONLY);
    ssize_t length = fd < 0 ? 0 : read(fd, line, sizeof line - 1);
    if (fd >= 0) close(fd);
    if (length < 0) length = 0;
    for (ssize_t i = 0; i < length; i++)
      if (line[i] == '\0' || line[i] == '\n') line[i] = ' ';
    while (length > 0 && line[length - 1] == ' ') length--;
    line[length] = '\0';
    printf("%ld %s\n", pid, line);
  }
  closedir(proc);
  return 0;
}

/* Whether process PID holds a host file descriptor (gVisor shows one as `host:[N]`). */
static int holds_host_fd(long pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/fd", pid);
  DIR *fds = opendir(path);
  if (fds == NULL) return 0;
  struct dirent *entry;
  int holds = 0;
  while (!holds && (entry = readdir(fds)) != NULL) {
    if (entry->d_name[0] == '.') continue;
    char link[320], target[256];
    snprintf(link, sizeof link, "/proc/%ld/fd/%s", pid, entry->d_name);
    ssize_t length = readlink(link, target, sizeof target - 1);
    if (length <= 0) continue;
    target[length] = '\0';
    holds = strncmp(target, "host:", 5) == 0;
  }
  closedir(fds);
  return holds;
}

/* The ready token of GYM_EXEC_READY and this process's pid, on stdout; the variable is removed. */
static void announce_ready(void) {
  const char *ready = getenv("GYM_EXEC_READY");
  if (ready == NULL) return;
  char pid[16];
  snprintf(pid, sizeof pid, "%010d", (int)getpid());
  write_all(STDOUT_FILENO, ready, strlen(ready));
  write_all(STDOUT_FILENO, pid, 10);
  unsetenv("GYM_EXEC_READY");
}

/* Enters DIR (unless empty) and runs the program; returns only when it cannot (126, 127). */
static int run_program(const char *dir, char **argv) {
  if (dir[0] != '\0' && chdir(dir) != 0) {
    fprintf(stderr, "gym-exec: cannot enter %s: %s\n", dir, strerror(errno));
    return 126;
  }
  execvp(argv[0], argv);
  int error = errno;
  fprintf(stderr, "gym-exec: %s: %s\n", argv[0], strerror(error));
  return error == ENOENT || error == ENOTDIR ? 127 : 126;
}

static int keep(void) {
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, NULL);
  for (;;) {
    siginfo_t info;
    int signal_number = sigwaitinfo(&all, &info);
    if (signal_number < 0) continue;
    if (signal_number == SIGCHLD) {
      while (waitpid(-1, NULL, WNOHANG) > 0) {
      }
      continue;
    }
    /* si_pid is 0 for a sender outside this pid namespace: the engine stopping the sandbox. */
    if ((signal_number == SIGTERM || signal_number == SIGINT) && info.si_pid == 0) return 0;
    if (signal_number == SIGUSR1 && info.si_pid == 0) stop_others();
  }
}

/* What the tracer knows of one traced process: its group (the process whose end releases it). */
struct tracee {
  pid_t pid;
  pid_t group;
  int releasing;
};

enum { MAX_TRACEES = 65536 };
static struct tracee tracees[MAX_TRACEES];
static int tracee_count;

static struct tracee *find_tracee(pid_t pid) {
  for (int i = 0; i < tracee_count; i++)
    if (tracees[i].pid == pid) return &tracees[i];
  return NULL;
}

static struct tracee *add_tracee(pid_t pid, pid_t group, int releasing) {
  struct tracee *found = find_tracee(pid);
  if (found == NULL && tracee_count < MAX_TRACEES) found = &tracees[tracee_count++];
  if (found != NULL) *found = (struct tracee){pid, group, releasing};
  return found;
}

static void drop_tracee(pid_t pid) {
  struct tracee *found = find_tracee(pid);
  if (found != NULL) *found = tracees[--tracee_count];
}

/* Lets go of every process of `group` (all of them when group is 0): each is detached at its next stop. */
static void release(pid_t group) {
  for (int i = 0; i < tracee_count; i++)
    if ((group == 0 || tracees[i].group == group) && !tracees[i].releasing) {
      tracees[i].releasing = 1;
      ptrace(PTRACE_INTERRUPT, tracees[i].pid, 0, 0);
    }
}

static int is_stop_signal(int signal_number) {
  return signal_number == SIGSTOP || signal_number == SIGTSTP || signal_number == SIGTTIN ||
         signal_number == SIGTTOU;
}

static int trace(const char *dir, char **argv, int is_session) {
  int gate[2];
  if (pipe(gate) != 0) return 125;
  /*
   * gVisor lets only a dumpable tracer seize, and tracing goes on once it is not dumpable again:
   * dumpable from here to the seize only (a process of the sandbox that attached meanwhile makes
   * the seize fail, and the command never runs).
   */
  prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
  pid_t command = fork();
  if (command < 0) return 125;
  if (command == 0) {
    char go;
    close(gate[1]);
    /* Runs only once the tracer holds it: nothing it forks is ever untraced. */
    if (read(gate[0], &go, 1) != 0) _exit(125);
    close(gate[0]);
    _exit(run_program(dir, argv));
  }
  close(gate[0]);
  /* Should anything else have traced it first, the seize fails and the command never runs. */
  long options = PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACECLONE | PTRACE_O_EXITKILL;
  int seized = ptrace(PTRACE_SEIZE, command, 0, options);
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  if (seized != 0) {
    fprintf(stderr, "gym-exec: cannot trace the command: %s\n", strerror(errno));
    kill(command, SIGKILL);
    return 125;
  }
  add_tracee(command, command, 0);
  close(gate[1]);
  /* Signals the command's process group gets (kill 0) are the command's, not the tracer's. */
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  int command_status = -1;
  for (;;) {
    if (command_status != -1 && tracee_count == 0) break;
    int status;
    pid_t pid = waitpid(-1, &status, __WALL);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    struct tracee *traced = find_tracee(pid);
    if (WIFEXITED(status) || WIFSIGNALED(status)) {
      pid_t group = traced == NULL ? 0 : traced->group;
      drop_tracee(pid);
      if (pid == command) {
        command_status = status;
        release(0);
      } else if (is_session && group == pid)
        release(group);
      continue;
    }
    if (!WIFSTOPPED(status)) continue;
    int signal_number = WSTOPSIG(status), event = status >> 16;
    if (traced == NULL) {
      /* A new process's first stop can come before its parent's fork event. */
      traced = add_tracee(pid, pid, command_status != -1);
      if (traced == NULL) {
        kill(pid, SIGKILL);
        continue;
      }
    }
    if (event == PTRACE_EVENT_FORK || event == PTRACE_EVENT_VFORK || event == PTRACE_EVENT_CLONE) {
      unsigned long child = 0;
      ptrace(PTRACE_GETEVENTMSG, pid, 0, &child);
      /* A session shell's child begins a group; anything else's belongs to its parent's. */
      pid_t group = is_session && pid == command ? (pid_t)child : traced->group;
      if (add_tracee((pid_t)child, group, traced->releasing) == NULL) kill((pid_t)child, SIGKILL);
      ptrace(PTRACE_CONT, pid, 0, 0);
      continue;
    }
    int inject = event == 0 ? signal_number : 0;
    if (traced->releasing) {
      if (ptrace(PTRACE_DETACH, pid, 0, inject) == 0 || errno == ESRCH) drop_tracee(pid);
      continue;
    }
    if (event == PTRACE_EVENT_STOP && is_stop_signal(signal_number)) {
      if (ptrace(PTRACE_LISTEN, pid, 0, 0) == 0) continue;
    }
    ptrace(PTRACE_CONT, pid, 0, inject);
  }
  if (command_status == -1) return 125;
  return WIFEXITED(command_status) ? WEXITSTATUS(command_status) : 128 + WTERMSIG(command_status);
}

/* Kills a tracer (and so, by the kernel, all it traces) and waits, bounded, for it to be gone. */
static int kill_tracer(const char *text) {
  char *end;
  long pid = strtol(text, &end, 10);
  if (*end != '\0' || pid <= 1) return 2;
  if (kill((pid_t)pid, SIGKILL) != 0) return errno == ESRCH ? 0 : 1;
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  for (int attempt = 0; attempt < 5000; attempt++) {
    char stat[512];
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t length = read(fd, stat, sizeof stat - 1);
    close(fd);
    if (length <= 0) return 0;
    stat[length] = '\0';
    char *state = strrchr(stat, ')');
    if (state != NULL && (state[2] == 'Z' || state[2] == 'X')) return 0;
    usleep(1000);
  }
  return 1;
}

int main(int argc, char **argv) {
  char go;
  ssize_t count;
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  if (argc == 2 && strcmp(argv[1], "--keeper") == 0) return keep();
  if (argc == 2 && strcmp(argv[1], "--others") == 0) return list_processes("cmdline", NULL);
  /*
   * `PID COMM` of the processes that hold a host file descriptor: under gVisor a checkpoint of
   * one (holding the stream of an exec that has ended) cannot be restored, so a live snapshot
   * asks first; from the host's read-only helper, not the image's tools, which the sandbox can
   * replace.
   */
  if (argc == 2 && strcmp(argv[1], "--host-fd-holders") == 0) return list_processes("comm", holds_host_fd);
  if (argc >= 4 && strcmp(argv[1], "--exec") == 0) return run_program(argv[2], argv + 3);
  if (argc == 3 && strcmp(argv[1], "--kill-tracer") == 0) return kill_tracer(argv[2]);
  int is_session = argc >= 4 && strcmp(argv[1], "--traced-session") == 0;
  if (is_session || (argc >= 4 && strcmp(argv[1], "--traced") == 0)) {
    announce_ready();
    return trace(argv[2], argv + 3, is_session);
  }
  if (argc < 2) {
    fputs("usage: gym-exec PROGRAM [ARGS...]\n", stderr);
    return 125;
  }
  int piped = getenv("GYM_EXEC_PIPES") != NULL;
  unsetenv("GYM_EXEC_PIPES");
  if (piped && make_pipes() != 0) {
    fputs("gym-exec: could not make the session's pipes\n", stderr);
    return 125;
  }
  announce_ready();
  do {
    count = read(STDIN_FILENO, &go, 1);
  } while (count < 0 && errno == EINTR);
  if (count != 1) return 125;
  if (piped) {
    if (go == 'p' && use_pipes() != 0) return 125;
    close_pipes();
  }
  execvp(argv[1], argv + 1);
  int error = errno;
  fprintf(stderr, "gym-exec: %s: %s\n", argv[1], strerror(error));
  return error == ENOENT || error == ENOTDIR ? 127 : 126;
}
