/**
 * Fork (`POST /v1/sandboxes/{id}/fork`): a snapshot of the parent now, then `count` children
 * created from it through the lifecycle, so admission and the per-daemon caps apply to each as to
 * any create. A child starts from the parent's spec (image `snapshot:<id>`, the request's
 * overrides) and nothing else of it: not the exec environment a pool claim or a rollout gave the
 * parent (its keys), not its gateway reach or egress policy (a child gets its own when asked).
 * All or nothing: if one child cannot be made, the others and the snapshot are removed and the
 * error is thrown.
 */
import type { Logger } from '../../core/logger.ts';
import type { Sandbox } from '../../core/schemas/api.ts';
import type { SandboxSpec } from '../../core/schemas/sandbox.ts';
import { ForkRequestSchema, type SnapshotInfo, snapshotRef } from '../../core/schemas/snapshot.ts';
import { parseOrThrow } from '../../core/validate.ts';
import type { SandboxLifecycle } from '../sandboxes/lifecycle.ts';
import { RESERVED_LABEL_PREFIX, requireUserLabels } from './labels.ts';
import { requireLiveFork, type SnapshotService } from './snapshots.ts';

export interface ForkResult {
  snapshot: SnapshotInfo;
  sandboxes: Sandbox[];
}

/** Without the reserved labels (a parent that is itself a child carries its own lineage labels). */
function userLabels(labels: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(labels).filter(([key]) => !key.startsWith(RESERVED_LABEL_PREFIX)));
}

/**
 * @throws GymError `VALIDATION_FAILED`, `SANDBOX_NOT_FOUND`, `CAPABILITY_UNSUPPORTED` (`live`),
 *   what a snapshot throws (`CAPACITY_EXCEEDED`, `SNAPSHOT_TOO_LARGE`) and what a create throws.
 */
export async function forkSandbox(
  deps: { lifecycle: SandboxLifecycle; snapshots: SnapshotService; logger: Logger },
  parentId: string,
  input: unknown,
): Promise<ForkResult> {
  const request = parseOrThrow(ForkRequestSchema, input ?? {}, 'fork request');
  requireUserLabels(request.labels, 'fork request');
  const parent = deps.lifecycle.record(parentId);
  // Refused before anything is made: never answered with a files-only fork.
  if (request.live) requireLiveFork(deps.lifecycle.provider(parent.provider), parent.provider);
  // Checked against the child spec before the snapshot is made, so a bad override costs nothing.
  const childSpec: SandboxSpec = {
    ...parent.spec,
    image: 'placeholder',
    provider: parent.provider,
    files: [],
    labels: { ...userLabels(parent.spec.labels), ...request.labels },
    env: { ...parent.spec.env, ...request.env },
    ttlSeconds: request.ttlSeconds ?? parent.spec.ttlSeconds,
  };
  deps.lifecycle.parseSpec(childSpec);
  const snapshot = await deps.snapshots.create(parentId, {
    ttlSeconds: request.snapshotTtlSeconds,
    live: request.live,
  });
  const spec = { ...childSpec, image: snapshotRef(snapshot.id) };
  const made = await Promise.allSettled(
    Array.from({ length: request.count }, (_unused, forkIndex) =>
      deps.lifecycle.create(spec, { lineage: { parent: parentId, snapshot: snapshot.id, forkIndex } }),
    ),
  );
  const failed = made.find((outcome) => outcome.status === 'rejected');
  if (failed !== undefined) {
    const children = made.flatMap((outcome) => (outcome.status === 'fulfilled' ? [outcome.value.id] : []));
    await Promise.all(children.map((id) => deps.lifecycle.destroy(id, 'fork-failed').catch(() => {})));
    await deps.snapshots
      .delete(snapshot.id)
      .catch((error: unknown) =>
        deps.logger.warn(
          { snapshotId: snapshot.id, error: String(error) },
          'could not remove the snapshot of a failed fork; the reaper will',
        ),
      );
    deps.logger.warn(
      { sandboxId: parentId, count: request.count, made: children.length, error: String(failed.reason) },
      'fork failed; its children were destroyed',
    );
    throw failed.reason;
  }
  const sandboxes = made.map((outcome) => (outcome as PromiseFulfilledResult<Sandbox>).value);
  deps.logger.info(
    { sandboxId: parentId, snapshotId: snapshot.id, children: sandboxes.map((child) => child.id) },
    'sandbox forked',
  );
  return { snapshot, sandboxes };
}
