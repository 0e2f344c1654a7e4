/**
 * A new Pod's start, watched until it is Ready: fast failure on what will not resolve by itself
 * (an image that cannot be pulled, a container the runtime cannot start, a Pod that ended), and
 * patience with a Pod the scheduler cannot place yet (a cluster autoscaler may add a node).
 */

import type { V1Pod } from '@kubernetes/client-node';
import { GymError } from '../../core/errors.ts';
import { isReady } from './pod-status.ts';
import type { Pods } from './pods.ts';

/** Waiting reasons that mean the image cannot be had. */
const IMAGE_REASONS = new Set(['ErrImagePull', 'ImagePullBackOff', 'InvalidImageName', 'ErrImageNeverPull']);
/** Waiting reasons that will not resolve by themselves. */
const FATAL_REASONS = new Set([
  'CreateContainerConfigError',
  'CreateContainerError',
  'RunContainerError',
  'CrashLoopBackOff',
]);

/**
 * Polls the Pod until Ready, failing fast on what will not resolve (image, runtime); a Pod the
 * scheduler cannot place fails only at the deadline, with the scheduler's reason.
 */
export async function waitPodRunning(
  pods: Pods,
  id: string,
  image: string,
  createTimeoutMs: number,
  /** What else fails the start, read from each status (the Pod's services: `pod-services.ts`). */
  problem: (pod: V1Pod) => GymError | null = () => null,
): Promise<void> {
  const deadline = performance.now() + createTimeoutMs;
  let last = 'no status yet';
  /** The scheduler's message while the Pod is Unschedulable, else null. */
  let unscheduled: string | null = null;
  for (let attempt = 0; performance.now() < deadline; attempt++) {
    const pod = await pods.read(id);
    const failure = problem(pod);
    if (failure !== null) throw failure;
    if (isReady(pod)) return;
    const waiting = pod.status?.containerStatuses?.[0]?.state?.waiting;
    const terminated = pod.status?.containerStatuses?.[0]?.state?.terminated;
    const unschedulable = pod.status?.conditions?.find(
      (condition) =>
        condition.type === 'PodScheduled' &&
        condition.status === 'False' &&
        condition.reason === 'Unschedulable',
    );
    if (waiting?.reason !== undefined && IMAGE_REASONS.has(waiting.reason)) {
      throw new GymError(
        'IMAGE_NOT_FOUND',
        `image ${image} cannot be pulled (${waiting.reason}): ${waiting.message ?? ''}`,
        {
          details: { image, reason: waiting.reason },
        },
      );
    }
    if (waiting?.reason !== undefined && FATAL_REASONS.has(waiting.reason)) {
      throw new GymError(
        'SANDBOX_START_FAILED',
        `the Pod's container cannot start (${waiting.reason}): ${waiting.message ?? ''}`,
        {
          details: { sandboxId: id, reason: waiting.reason },
        },
      );
    }
    if (terminated !== undefined || pod.status?.phase === 'Failed' || pod.status?.phase === 'Succeeded') {
      throw new GymError(
        'SANDBOX_START_FAILED',
        `the Pod ended before it was ready (${terminated?.reason ?? pod.status?.reason ?? pod.status?.phase}, exit ${terminated?.exitCode ?? '?'})`,
        { details: { sandboxId: id, reason: terminated?.reason ?? pod.status?.reason ?? null } },
      );
    }
    // Unschedulable now may be schedulable soon (a cluster autoscaler adding a node): wait
    // until the deadline, and say the scheduler's reason if it comes.
    unscheduled = unschedulable?.message ?? (unschedulable === undefined ? null : 'no reason given');
    last = `${pod.status?.phase ?? 'unknown'}${waiting?.reason === undefined ? '' : ` (${waiting.reason})`}`;
    await new Promise((resolve) => setTimeout(resolve, Math.min(50 * 2 ** attempt, 500)));
  }
  if (unscheduled !== null) {
    throw new GymError(
      'SANDBOX_START_FAILED',
      `the Pod could not be scheduled within ${createTimeoutMs} ms: ${unscheduled}`,
      { details: { sandboxId: id, reason: 'Unschedulable', message: unscheduled } },
    );
  }
  throw new GymError(
    'SANDBOX_START_FAILED',
    `the Pod was not ready within ${createTimeoutMs} ms (last: ${last})`,
    {
      details: { sandboxId: id },
    },
  );
}
