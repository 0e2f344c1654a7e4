/**
 * The bookkeeping every model-driven harness loop shares: the conversation, the trajectory,
 * the limits checked before each step, one model call per step, and the result at the end.
 */
import OpenAI from 'openai';
import type {
  HarnessLimits,
  HarnessOutcome,
  HarnessResult,
  ModelEndpoint,
  TrajectoryStep,
} from './harness.ts';
import { RunClock } from './harness.ts';
import { CostMeter, createModelClient, describeModelError } from './model-client.ts';

/** What the upstream answers a request it refuses as it is: the conversation's doing, not an outage. */
const REQUEST_REFUSED_STATUSES = new Set([400, 413, 422]);

/** The status the model upstream answered, when the gateway says so (it relays a failure as 502). */
function upstreamStatusOf(error: InstanceType<typeof OpenAI.APIError>): number | undefined {
  const details = (error.error as { details?: { upstreamStatus?: unknown } } | undefined)?.details;
  return typeof details?.upstreamStatus === 'number' ? details.upstreamStatus : undefined;
}

/**
 * Whether a failed model call is the infrastructure's fault (the gateway or the policy server did
 * not answer, refused the rollout's key, or failed after its retries) rather than the agent's (a
 * request the model rejects, such as one past its context length). The gateway answers 502 for
 * any upstream failure, with the upstream's own status beside it: a refused request (400 past the
 * context length) stays the agent's, or a policy could end any run it is failing as an infra
 * error just by growing its conversation.
 */
export function isInfrastructureFailure(error: unknown): boolean {
  if (error instanceof OpenAI.APIConnectionError) return true;
  if (!(error instanceof OpenAI.APIError)) return true;
  const upstream = error.status === 502 ? upstreamStatusOf(error) : undefined;
  if (upstream !== undefined) return !REQUEST_REFUSED_STATUSES.has(upstream);
  const status = error.status ?? 0;
  return (
    status === 0 || status >= 500 || status === 429 || status === 401 || status === 403 || status === 404
  );
}

export type ChatParams = Omit<OpenAI.Chat.ChatCompletionCreateParamsNonStreaming, 'model' | 'messages'>;

export class ModelLoop {
  readonly clock: RunClock;
  readonly cost: CostMeter;
  readonly trajectory: TrajectoryStep[] = [];
  readonly messages: OpenAI.Chat.ChatCompletionMessageParam[];
  readonly #model: ModelEndpoint;

  constructor(
    model: ModelEndpoint,
    limits: HarnessLimits,
    messages: OpenAI.Chat.ChatCompletionMessageParam[],
  ) {
    this.clock = new RunClock(limits);
    this.cost = new CostMeter(limits);
    this.#model = model;
    this.messages = messages;
  }

  /** The result, with the conversation kept in `extra`. */
  end(outcome: HarnessOutcome, submission: string | null, message?: string): HarnessResult {
    return this.clock.finish({
      outcome,
      submission,
      trajectory: this.trajectory,
      steps: this.trajectory.length,
      costUsd: this.cost.costUsd,
      extra: { messages: this.messages },
      ...(message === undefined ? {} : { message }),
    });
  }

  /** The result that ends the run before another step (steps, wall time, cost), or null to go on. */
  limitReached(): HarnessResult | null {
    const { limits } = this.clock;
    if (this.trajectory.length >= limits.maxSteps)
      return this.end('step_limit', null, `reached ${limits.maxSteps} steps`);
    if (this.clock.remainingMs <= 0) return this.end('time_limit', null, `ran past ${limits.wallTimeMs} ms`);
    if (this.cost.isOverLimit)
      return this.end('cost_limit', null, `spent ${this.cost.costUsd.toFixed(4)} USD`);
    return null;
  }

  /**
   * Opens a step and asks the model once. A failed call (after the gateway's retries) ends the
   * run: `time_limit` if the time ran out meanwhile, else `agent_error`.
   */
  async step(
    params: ChatParams = {},
  ): Promise<{ step: TrajectoryStep; completion: OpenAI.Chat.ChatCompletion } | { result: HarnessResult }> {
    const startedMs = Date.now();
    const step: TrajectoryStep = {
      index: this.trajectory.length,
      startedAt: new Date(startedMs).toISOString(),
      durationMs: 0,
    };
    this.trajectory.push(step);
    try {
      const completion = await createModelClient(this.#model, this.clock.remainingMs).chat.completions.create(
        {
          ...params,
          model: this.#model.model,
          messages: this.messages,
        },
      );
      step.usage = this.cost.add(completion.usage);
      return { step, completion };
    } catch (error) {
      step.error = describeModelError(error);
      step.durationMs = Date.now() - startedMs;
      const outcome =
        this.clock.remainingMs <= 0
          ? 'time_limit'
          : isInfrastructureFailure(error)
            ? 'infra_error'
            : 'agent_error';
      return { result: this.end(outcome, null, step.error) };
    }
  }

  /** Closes a step's duration. */
  finishStep(step: TrajectoryStep): void {
    step.durationMs = Date.now() - Date.parse(step.startedAt);
  }
}
