/** One model call with the task's conversation (or instruction); the answer is the submission. No sandbox needed. */
import { type Harness, RunClock } from '../harness.ts';
import { CostMeter, createModelClient, describeModelError } from '../model-client.ts';
import { isInfrastructureFailure } from '../model-loop.ts';

export function createSingleTurnHarness(): Harness {
  return {
    name: 'single-turn',
    needsModel: true,
    async run({ task, model, limits }) {
      const clock = new RunClock(limits);
      const cost = new CostMeter(limits);
      const startedAt = new Date().toISOString();
      try {
        const completion = await createModelClient(model, clock.remainingMs).chat.completions.create({
          ...task.sampling,
          model: model.model,
          // The row's own conversation when it has one (NeMo Gym's rows: a system prompt, few-shot turns).
          messages: task.messages ?? [{ role: 'user', content: task.instruction }],
        });
        const content = completion.choices[0]?.message.content ?? '';
        const usage = cost.add(completion.usage);
        return clock.finish({
          outcome: 'submitted',
          submission: content,
          trajectory: [
            { index: 0, startedAt, durationMs: Date.now() - clock.startedMs, assistant: content, usage },
          ],
          steps: 1,
          costUsd: cost.costUsd,
        });
      } catch (error) {
        // The gateway or the policy server failing is infra (retried), never a reward of 0.
        return clock.finish({
          outcome: isInfrastructureFailure(error) ? 'infra_error' : 'agent_error',
          submission: null,
          message: describeModelError(error),
          trajectory: [],
          steps: 1,
          costUsd: cost.costUsd,
        });
      }
    },
  };
}
