/**
 * The span each open rollout's model calls nest under: the span of the runner that opened it
 * (the `traceparent` of its open request, sent with the daemon token). Model calls come from the
 * agent, whose own headers are never read for this: an agent cannot move its calls into another
 * trace, nor make the daemon keep anything for it.
 */
import type { TraceParent } from '../../core/tracing.ts';

/** Open rollouts remembered at most; past it the oldest are forgotten (their calls become roots). */
const MAX_REMEMBERED_ROLLOUTS = 10_000;

export class RolloutTraceParents {
  readonly #parents = new Map<string, TraceParent>();

  remember(rolloutId: string, parent: TraceParent): void {
    this.#parents.delete(rolloutId);
    if (this.#parents.size >= MAX_REMEMBERED_ROLLOUTS) {
      const oldest = this.#parents.keys().next().value;
      if (oldest !== undefined) this.#parents.delete(oldest);
    }
    this.#parents.set(rolloutId, parent);
  }

  parentOf(rolloutId: string): TraceParent | undefined {
    return this.#parents.get(rolloutId);
  }

  forget(rolloutId: string): void {
    this.#parents.delete(rolloutId);
  }
}
