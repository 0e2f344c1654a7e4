/**
 * A Python agent brought to the sandbox from the host: a self-contained CPython runtime (Debian
 * 13's python3.13 with its shared libraries and standard library, started through its own dynamic
 * loader, so any task image's C library and Python stay as they are) with the agent's pinned
 * wheels installed offline. Its folder is bind-mounted read-only at `/opt/gym-agents/<name>`, or
 * copied in as a tarball where a provider cannot bind.
 */
export interface PythonHostSource {
  kind: 'python-host';
  /** The runtime's folder name: `/opt/gym-agents/<name>` in sandboxes. */
  name: string;
  /** The agent's version, as its lock file pins it (names the cached runtime). */
  version: string;
  /** The pinned requirements with hashes, a file in harnesses/installed/python/. */
  lockFile: string;
  /** Files of harnesses/installed/python/ copied into the runtime, `to` relative to its root. */
  files?: Array<{ from: string; to: string }>;
  /**
   * Launchers made in the runtime's `bin/`: each runs `<rt>/bin/python <rt>/<argument>...` with
   * the arguments given here (paths relative to the runtime's root), then the command's own.
   */
  launchers?: Record<string, string[]>;
}
