/**
 * The oracle: applies the task's gold patch and submits. It needs no model, so it proves the
 * rest of the pipeline (sandbox, verifier, records) on its own.
 */
import type { Harness, HarnessResult, HarnessRunContext, TrajectoryStep } from '../harness.ts';
import { RunClock } from '../harness.ts';
import { execWithPatchFile } from '../patch-input.ts';

const PATCH_PATH = '/tmp/gym-oracle.patch';

/**
 * The reference is known to work: when it did not run to its end (a timeout, a kill from outside,
 * an OOM) that is the infrastructure's doing, never the agent's, and nothing is graded.
 */
function cutShort(clock: RunClock, step: TrajectoryStep, what: string, status: string): HarnessResult {
  return clock.finish({
    trajectory: [step],
    steps: 1,
    costUsd: 0,
    outcome: 'infra_error',
    submission: null,
    message: `${what} ended with status ${status}`,
  });
}

export function createOracleHarness(): Harness {
  return {
    name: 'oracle',
    needsModel: false,
    usesGoldPatch: true,
    async run({ sandbox, task, limits }: HarnessRunContext): Promise<HarnessResult> {
      const clock = new RunClock(limits);
      const base = { trajectory: [], steps: 0, costUsd: 0 };
      if (task.goldAnswer !== undefined)
        return clock.finish({ ...base, outcome: 'submitted', submission: task.goldAnswer });
      if (task.solution !== undefined && task.solution.trim() !== '') {
        for (const file of task.solutionFiles ?? [])
          await sandbox.writeFile(file.path, file.content, file.mode);
        const ran = await sandbox.exec({
          command: task.solution,
          cwd: task.workdir,
          ...(task.solutionEnv === undefined ? {} : { env: task.solutionEnv }),
          timeoutMs: Math.max(1000, Math.min(limits.commandTimeoutMs, clock.remainingMs)),
        });
        const step = {
          index: 0,
          startedAt: new Date(clock.startedMs).toISOString(),
          durationMs: ran.durationMs,
          action: { tool: 'bash', arguments: { command: task.solution } },
          observation: `${ran.stdout}${ran.stderr}`,
          exitCode: ran.exitCode,
        };
        if (ran.status === 'sandbox_gone')
          return clock.finish({ ...base, trajectory: [step], outcome: 'sandbox_gone', submission: null });
        if (ran.status !== 'ok') return cutShort(clock, step, 'the reference solution', ran.status);
        const isOk = ran.status === 'ok' && ran.exitCode === 0;
        return clock.finish({
          ...base,
          trajectory: [step],
          steps: 1,
          outcome: isOk ? 'submitted' : 'agent_error',
          submission: isOk ? task.solution : null,
          ...(isOk ? {} : { message: `the reference solution failed: ${ran.stderr.slice(-1000)}` }),
        });
      }
      if (task.goldPatch === undefined || task.goldPatch.trim() === '') {
        return clock.finish({
          ...base,
          outcome: 'agent_error',
          submission: null,
          message: `task ${task.id} has no gold patch for the oracle`,
        });
      }
      // git apply first (exact); patch with fuzz as the fallback, as SWE-bench's harness does.
      // The sandbox is the oracle's own: its shell may write the patch file (one exec, no upload).
      const applied = await execWithPatchFile(sandbox, task.goldPatch, PATCH_PATH, {
        command: `git apply --verbose ${PATCH_PATH} || patch --batch --fuzz=5 -p1 -i ${PATCH_PATH}`,
        cwd: task.workdir,
        timeoutMs: Math.max(1000, Math.min(limits.commandTimeoutMs, clock.remainingMs)),
      });
      const step = {
        index: 0,
        startedAt: new Date(clock.startedMs).toISOString(),
        durationMs: applied.durationMs,
        action: { tool: 'apply_patch', arguments: { path: PATCH_PATH } },
        observation: `${applied.stdout}${applied.stderr}`,
        exitCode: applied.exitCode,
      };
      if (applied.status === 'sandbox_gone')
        return clock.finish({ ...base, trajectory: [step], outcome: 'sandbox_gone', submission: null });
      if (applied.status !== 'ok') return cutShort(clock, step, 'applying the gold patch', applied.status);
      if (applied.exitCode !== 0) {
        return clock.finish({
          ...base,
          trajectory: [step],
          steps: 1,
          outcome: 'agent_error',
          submission: null,
          message: `the gold patch did not apply: ${applied.stderr.slice(-1000)}`,
        });
      }
      return clock.finish({
        ...base,
        trajectory: [step],
        steps: 1,
        outcome: 'submitted',
        submission: task.goldPatch,
      });
    },
  };
}
