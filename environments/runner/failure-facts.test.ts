import { describe, expect, it } from 'vitest';
import { GymError } from '../../core/errors.ts';
import type { HarnessResult } from '../../harnesses/harness.ts';
import { failureFacts, MAX_FAILURE_REASON_CHARS } from './failure-facts.ts';
import { faultVerdict, type RolloutContext } from './rollout-phases.ts';
import { buildTrainingCapture } from './training-response.ts';

const harness = (message: string | null): HarnessResult =>
  ({ outcome: 'agent_error', submission: null, message, trajectory: [] }) as unknown as HarnessResult;

describe('failureFacts', () => {
  it('a reward is sound: not masked, no reason', () => {
    expect(failureFacts({ outcome: 'reward', reward: 0, details: {} }, undefined, undefined)).toEqual({
      mask_sample: false,
      failure_reason: null,
    });
  });

  it('an infrastructure fault masks its false 0 and says why', () => {
    expect(
      failureFacts(
        { outcome: 'infra_error', reward: 0, details: { reason: 'PROVIDER_UNAVAILABLE: engine gone' } },
        undefined,
        undefined,
      ),
    ).toEqual({ mask_sample: true, failure_reason: 'infra_error: PROVIDER_UNAVAILABLE: engine gone' });
  });

  it.each(['verifier_timeout', 'verifier_error', 'task_error'] as const)('a %s is masked', (outcome) => {
    const facts = failureFacts(
      { outcome, reward: 0, details: { reason: 'tests hung' } },
      undefined,
      undefined,
    );
    expect(facts).toEqual({ mask_sample: true, failure_reason: `${outcome}: tests hung` });
  });

  it("an agent's own failure is a valid 0: named, not masked", () => {
    const facts = failureFacts(
      { outcome: 'agent_error', reward: 0, details: {} },
      harness('step limit'),
      undefined,
    );
    expect(facts).toEqual({ mask_sample: false, failure_reason: 'agent_error: step limit' });
  });

  it('a reward whose token ids were lost is masked with the capture reason', () => {
    const capture = buildTrainingCapture([], 'the records file is gone');
    expect(capture.maskSample).toBe(true);
    const facts = failureFacts({ outcome: 'reward', reward: 1, details: {} }, undefined, capture);
    expect(facts.mask_sample).toBe(true);
    expect(facts.failure_reason).toMatch(/^token capture: .*the records file is gone/);
  });

  it('keeps a reason within NeMo Gym bound', () => {
    const facts = failureFacts(
      { outcome: 'infra_error', reward: 0, details: { reason: 'x'.repeat(5000) } },
      undefined,
      undefined,
    );
    expect(facts.failure_reason).toHaveLength(MAX_FAILURE_REASON_CHARS);
  });
});

describe('faultVerdict', () => {
  const context = {
    image: null,
    row: {},
    options: { environment: { implementation: {} } },
  } as unknown as RolloutContext;

  it("makes a task's service that never became healthy a task error, not an outage to retry", () => {
    const verdict = faultVerdict(
      context,
      new GymError('SERVICE_UNHEALTHY', 'service db is unhealthy: its health check failed its retries'),
    );
    expect(verdict).toEqual({
      outcome: 'task_error',
      reward: 0,
      details: { reason: 'service db is unhealthy: its health check failed its retries' },
    });
  });

  it('keeps a provider fault an infra error', () => {
    expect(faultVerdict(context, new GymError('PROVIDER_UNAVAILABLE', 'engine gone')).outcome).toBe(
      'infra_error',
    );
  });
});
