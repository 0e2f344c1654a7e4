/** What a verifier returns: the reward, or why there is none. */
export type RolloutOutcome = 'reward' | 'agent_error' | 'infra_error' | 'verifier_timeout';

export interface Verdict {
  outcome: RolloutOutcome;
  reward: number;
  /** Verifier-specific: FAIL_TO_PASS / PASS_TO_PASS lists, the test log tail, the reason a patch did not apply. */
  details: Record<string, unknown>;
}
