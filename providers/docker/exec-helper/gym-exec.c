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
 * `gym-exec --others` prints one line per process of the sandbox but PID 1 and itself (its pid, a
 * space, its command line with spaces for NULs): the daemon's view of what still runs where the
 * host's `ps` cannot see into the sandbox (gVisor), read by no program of the sandbox's own.
 *
 * Usage: gym-exec PROGRAM [ARGS...]   (PROGRAM is looked up in PATH; argv[0] stays PROGRAM)
 *        gym-exec --keeper
 *        gym-exec --others
 *        gym-exec --exec DIR PROGRAM [ARGS...]
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

static int list_others(void) {
  DIR *proc = opendir("/proc");
  if (proc == NULL) return 1;
  struct dirent *entry;
  while ((entry = readdir(proc)) != NULL) {
    char *end;
    long pid = strtol(entry->d_name, &end, 10);
    if (*end != '\0' || pid <= 1 || pid == (long)getpid()) continue;
    char path[64], line[4096];
    snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
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

int main(int argc, char **argv) {
  char go;
  ssize_t count;
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  if (argc == 2 && strcmp(argv[1], "--keeper") == 0) return keep();
  if (argc == 2 && strcmp(argv[1], "--others") == 0) return list_others();
  if (argc >= 4 && strcmp(argv[1], "--exec") == 0) {
    if (argv[2][0] != '\0' && chdir(argv[2]) != 0) {
      fprintf(stderr, "gym-exec: cannot enter %s: %s\n", argv[2], strerror(errno));
      return 126;
    }
    execvp(argv[3], argv + 3);
    int error = errno;
    fprintf(stderr, "gym-exec: %s: %s\n", argv[3], strerror(error));
    return error == ENOENT || error == ENOTDIR ? 127 : 126;
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
  const char *ready = getenv("GYM_EXEC_READY");
  if (ready != NULL) {
    char pid[16];
    snprintf(pid, sizeof pid, "%010d", (int)getpid());
    write_all(STDOUT_FILENO, ready, strlen(ready));
    write_all(STDOUT_FILENO, pid, 10);
    unsetenv("GYM_EXEC_READY");
  }
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
