/**
 * A session shell's input and output without the engine in the way.
 *
 * Through `docker exec`, every command of a session and its output pass through dockerd and the
 * exec's containerd-shim, each copying them once more: under load (1000 sandboxes, 32 clients)
 * those copies cost the machine more CPU than the daemon itself. When the exec helper is asked
 * for pipes (`GYM_EXEC_PIPES`, see `exec-helper/gym-exec.c`) it makes three before it announces
 * itself and holds the daemon's ends at fds 3, 4 and 5. The daemon, root on the Docker host,
 * opens them through `/proc/PID/fd` while the helper waits for its go byte (the helper is not
 * dumpable, so no process of the sandbox can), and the shell then reads and writes the kernel's
 * pipes directly. The engine still starts the shell (namespaces, user, capabilities, seccomp,
 * AppArmor: everything `docker exec` sets up is the same); only the bytes take a shorter way.
 *
 * When the pipes cannot be opened (a helper from before this change still mounted in an older
 * sandbox, a daemon that is not root) the shell stays on the exec's own stdio.
 */

import { closeSync, constants, fstatSync, openSync } from 'node:fs';
import { Socket } from 'node:net';

/** Asks the helper for pipes. */
export const SESSION_PIPES_ENV = 'GYM_EXEC_PIPES=1';
/** The go byte that tells the helper the daemon holds its pipes: run the command on them. */
export const PIPES_GO_BYTE = Buffer.from('p');

/** The helper's fds that hold the daemon's ends: the command's stdin, stdout and stderr. */
const STDIN_FD = 3;
const STDOUT_FD = 4;
const STDERR_FD = 5;

export interface SessionPipes {
  stdin: Socket;
  stdout: Socket;
  stderr: Socket;
}

/**
 * Opens the daemon's ends of the pipes the helper with host pid `pid` holds, or null when it
 * holds none or they cannot be opened (then nothing stays open).
 */
export function openHelperPipes(pid: number, procRoot = '/proc'): SessionPipes | null {
  const opened: number[] = [];
  const open = (fd: number, flags: number): number => {
    const handle = openSync(`${procRoot}/${pid}/fd/${fd}`, flags | constants.O_NONBLOCK);
    opened.push(handle);
    // Only a pipe: an older helper's fd 3 could be anything the engine left open.
    if (!fstatSync(handle).isFIFO()) throw new Error(`fd ${fd} of ${pid} is not a pipe`);
    return handle;
  };
  try {
    const stdin = open(STDIN_FD, constants.O_WRONLY);
    const stdout = open(STDOUT_FD, constants.O_RDONLY);
    const stderr = open(STDERR_FD, constants.O_RDONLY);
    return {
      stdin: new Socket({ fd: stdin, readable: false, writable: true }),
      stdout: new Socket({ fd: stdout, readable: true, writable: false }),
      stderr: new Socket({ fd: stderr, readable: true, writable: false }),
    };
  } catch {
    for (const handle of opened) closeSync(handle);
    return null;
  }
}
