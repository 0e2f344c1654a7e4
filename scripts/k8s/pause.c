/*
 * The sandbox ("pause") container of the test cluster's Pods: it holds the Pod's namespaces,
 * reaps children it inherits as PID 1, and exits on SIGINT or SIGTERM. Built static and made an
 * image by scripts/k8s/images.sh, so containerd never pulls one from a registry.
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int signal_number) {
  (void)signal_number;
  _exit(0);
}

static void on_child(int signal_number) {
  (void)signal_number;
  while (waitpid(-1, 0, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction action = {0};
  action.sa_handler = on_stop;
  sigaction(SIGINT, &action, 0);
  sigaction(SIGTERM, &action, 0);
  action.sa_handler = on_child;
  action.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  sigaction(SIGCHLD, &action, 0);
  for (;;) pause();
}
