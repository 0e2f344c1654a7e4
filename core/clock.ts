/** Time as a dependency, so leases and deadlines can be tested without sleeping. */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
  /** A monotonic reading in milliseconds, for durations. */
  monotonicMs(): number;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  monotonicMs: () => performance.now(),
};
