/**
 * Runs a program to its end from the repository's root and collects what it printed, both
 * streams in one text in the order they came: the host-side integration tests run the real
 * frameworks (pytest, `harbor`, `mini`, SWE-ReX's client) this way against a daemon that lives in
 * the test's own event loop, so the run must not block it (no spawnSync).
 */
import { spawn } from 'node:child_process';

const REPOSITORY = new URL('..', import.meta.url).pathname;

export function collectProcess(
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: REPOSITORY, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, output }));
  });
}
