/**
 * Warm pools for a run's agent sandboxes (`usePools`): defined before the first rollout, removed
 * after the last.
 */
import { createHash } from 'node:crypto';
import type { EvalOptions } from './eval-types.ts';
import { sharesSetup } from './fork-setup.ts';

/**
 * One pool per image that several rollouts use (named by a hash of its spec): as many idle as
 * the concurrency allows, and never more members in all than that image's rollouts, so a pool
 * never makes a sandbox no rollout will use. With `--fork-setup` the pools serve the setup
 * sandboxes, one per task with a setup command (its repeats are forks of it), so such a task
 * counts once.
 */
export async function definePools(
  options: EvalOptions,
  pending: Array<Record<string, unknown>>,
): Promise<Map<string, string>> {
  const counts = new Map<string, number>();
  const sandboxUsers =
    options.forkSetup === true
      ? pending.filter(
          (row, index) =>
            !sharesSetup(row) || index === 0 || pending[index - 1]!._ng_task_index !== row._ng_task_index,
        )
      : pending;
  for (const row of sandboxUsers) {
    const image = options.environment.implementation.image(row, options.environment);
    if (image !== null) counts.set(image, (counts.get(image) ?? 0) + 1);
  }
  const pools = new Map<string, string>();
  for (const [image, count] of counts) {
    // An image a single rollout uses gains nothing from a pool: its sandbox is made when needed.
    if (count < 2) continue;
    const spec = { ...(options.environment.sandbox as object), image, labels: { role: 'agent' } };
    const name = `eval-${createHash('sha256').update(JSON.stringify(spec)).digest('hex').slice(0, 16)}`;
    const idle = Math.min(options.concurrency, count);
    await options.client.definePool(name, { spec, minIdle: idle, maxIdle: idle, maxTotal: count });
    pools.set(image, name);
  }
  return pools;
}

/** Removes the run's pools; a pool that will not go is the daemon's to collect, not the run's failure. */
export async function removePools(options: EvalOptions, pools: ReadonlyMap<string, string>): Promise<void> {
  await Promise.all([...pools.values()].map((pool) => options.client.removePool(pool).catch(() => {})));
}
