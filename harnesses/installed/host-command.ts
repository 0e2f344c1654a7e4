/** A command run on the host for an agent's install (npm, pip, debootstrap, tar), and a path check. */
import { spawn } from 'node:child_process';
import { access } from 'node:fs/promises';
import { GymError } from '../../core/errors.ts';

/**
 * Runs `command` to its end; resolves with the tail of what it printed, or fails naming `what`,
 * its exit code and the tail of its errors (both tails bounded, whatever the command prints).
 */
export function runOnHost(command: string, args: string[], what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    let errors = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output = (output + chunk.toString()).slice(-100_000);
    });
    child.stderr.on('data', (chunk: Buffer) => {
      errors = (errors + chunk.toString()).slice(-2000);
    });
    child.on('error', (error) =>
      reject(new GymError('INTERNAL', `${what}: could not start ${command}: ${error.message}`)),
    );
    child.on('close', (code) =>
      code === 0
        ? resolve(output)
        : reject(
            new GymError(
              'INTERNAL',
              `${what} failed (exit ${code}): ${errors.trim() || output.slice(-2000)}`,
            ),
          ),
    );
  });
}

export const pathExists = (path: string): Promise<boolean> =>
  access(path).then(
    () => true,
    () => false,
  );
