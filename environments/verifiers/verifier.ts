import type { ExecResult } from '../../core/schemas/exec.ts';

/** What a verifier returns: the reward, or why there is none. */
/**
 * `verifier_error`: the verifier ran to its end but gave no reward (a Harbor test that wrote no
 * reward file): the rollout goes to the failures file, never into the rewards. `task_error`: the
 * task itself cannot be run as written (a service it declares never became healthy): the agent
 * never had its turn, so there is no reward, and it is not retried as an outage would be.
 */
export type RolloutOutcome =
  | 'reward'
  | 'agent_error'
  | 'infra_error'
  | 'verifier_timeout'
  | 'verifier_error'
  | 'task_error';

export interface Verdict {
  outcome: RolloutOutcome;
  reward: number;
  /** Verifier-specific: FAIL_TO_PASS / PASS_TO_PASS lists, the test log tail, the reason a patch did not apply. */
  details: Record<string, unknown>;
  /**
   * The fields NeMo Gym's resources server for this kind writes at the top level of a rollout line
   * (mcqa: `expected_answer`, `extracted_answer`; swebench: `resolved`, `model_patch`, ...), with its
   * names and types. Absent when NeMo Gym has no such server.
   */
  fields?: Record<string, unknown>;
}

/**
 * Whether a command's end came from outside its sandbox: the sandbox went away, or the command was
 * killed and no exit code says how (the engine lost track of it, or its caller gave up). A kill
 * that left an exit code (137: a SIGKILL from inside, say a test that kills its own runner) and an
 * OOM (the sandbox's own memory limit) are the sandbox's doing, so they are graded.
 */
export function endedFromOutside(result: Pick<ExecResult, 'status' | 'exitCode'>): boolean {
  return result.status === 'sandbox_gone' || (result.status === 'killed' && result.exitCode === null);
}
