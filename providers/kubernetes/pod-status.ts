/**
 * What a Pod's status says of its sandbox: its state, whether it is Ready, and whether the OOM
 * killer ended its container.
 */
import type { V1ContainerStatus, V1Pod } from '@kubernetes/client-node';
import type { SandboxState } from '../../core/schemas/sandbox.ts';
import type { SandboxLoss } from '../shared/abnormal-end.ts';
import { SANDBOX_CONTAINER } from './pod-manifest.ts';

export function podState(pod: V1Pod): SandboxState {
  if (pod.metadata?.deletionTimestamp !== undefined && pod.metadata.deletionTimestamp !== null)
    return 'destroying';
  switch (pod.status?.phase) {
    case 'Pending':
      return 'creating';
    case 'Running':
      return isReady(pod) ? 'ready' : 'creating';
    default:
      return 'failed';
  }
}

export function sandboxContainer(pod: V1Pod): V1ContainerStatus | undefined {
  return pod.status?.containerStatuses?.find((status) => status.name === SANDBOX_CONTAINER);
}

/**
 * A Pod whose sandbox container the OOM killer ended (with `memory.oom.group`, every process of
 * it): the Pod does not restart, so the sandbox is lost, by what ran in it.
 */
export const POD_OOM_LOSS: SandboxLoss = {
  lost: 'oom',
  reason: "the sandbox ran out of memory and the kernel's OOM killer ended its container, so the Pod is lost",
};

/**
 * The sandbox's container ended because the OOM killer killed it whole (`memory.oom.group`).
 * Only its current state counts: with `restartPolicy: Never` it is never restarted, so there is
 * no earlier run (`lastState`) to confuse with this one.
 */
export function endedOutOfMemory(pod: V1Pod): boolean {
  return sandboxContainer(pod)?.state?.terminated?.reason === 'OOMKilled';
}

export function isReady(pod: V1Pod): boolean {
  return (
    pod.status?.phase === 'Running' &&
    pod.status.conditions?.some((condition) => condition.type === 'Ready' && condition.status === 'True') ===
      true
  );
}
