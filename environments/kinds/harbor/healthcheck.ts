/**
 * A Harbor task's `[environment.healthcheck]`: its shell command run in the agent's sandbox before
 * the agent starts, as Harbor's own environments run it (Docker's HEALTHCHECK semantics): a pass
 * ends the wait; a failure during the start period is not counted and is tried again after
 * `start_interval_sec`; after it, `retries` failures in a row fail the task, `interval_sec` apart.
 * Each try may take `timeout_sec`. (Named for the merge with the sandbox-wide service health
 * checks of issue 35's item 2, which may take it over.)
 */
import { GymError } from '../../../core/errors.ts';
import type { SandboxHandle } from '../../../harnesses/harness.ts';
import type { HarborRow } from './task-row.ts';

export type HarborHealthcheck = NonNullable<HarborRow['healthcheck']>;

/** Waiting between tries; a parameter so tests need not sleep. */
export type Pause = (milliseconds: number) => Promise<void>;

const pauseFor: Pause = (milliseconds) => new Promise((resolve) => setTimeout(resolve, milliseconds));

/**
 * @throws GymError `SERVICE_UNHEALTHY` naming the command, the tries and the last failure's output when the check fails
 *   its retries.
 */
export async function runHarborHealthcheck(
  sandbox: Pick<SandboxHandle, 'exec'>,
  check: HarborHealthcheck,
  options: { cwd?: string; now?: () => number; pause?: Pause } = {},
): Promise<{ tries: number }> {
  const now = options.now ?? Date.now;
  const pause = options.pause ?? pauseFor;
  const startPeriodEnds = now() + check.start_period_sec * 1000;
  let failures = 0;
  for (let tries = 1; ; tries += 1) {
    const isStarting = now() < startPeriodEnds;
    const result = await sandbox.exec({
      command: check.command,
      timeoutMs: Math.max(1, Math.round(check.timeout_sec * 1000)),
      ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
    });
    if (result.status === 'ok' && result.exitCode === 0) return { tries };
    if (result.status === 'sandbox_gone') throw new Error('the sandbox was lost while its health check ran');
    if (isStarting) {
      await pause(check.start_interval_sec * 1000);
      continue;
    }
    failures += 1;
    if (failures >= check.retries) {
      const output = `${result.stdout}${result.stderr}`.trim().slice(-500);
      // The task's fault (its own check of its own service), not an outage: a task error.
      throw new GymError(
        'SERVICE_UNHEALTHY',
        `the task's [environment.healthcheck] failed ${failures} times in a row (${result.status === 'timeout' ? `timed out after ${check.timeout_sec} s` : `exit ${result.exitCode}`}): ${check.command}${output === '' ? '' : `; its output ends: ${output}`}`,
      );
    }
    await pause(check.interval_sec * 1000);
  }
}
