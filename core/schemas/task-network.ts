/**
 * The operator's network policy for benchmark tasks: set in the daemon's configuration
 * (`taskNetwork`) and read by the environments that run such tasks (Harbor), so both take it from
 * here rather than one from the other.
 */
import { z } from 'zod';

/**
 * What becomes of a benchmark task whose declared network is more than the operator's `egress`
 * configuration allows (`taskNetwork`). The cap itself is `egress` (`allowPublic`,
 * `allowedHosts`): each phase's policy goes through the daemon's egress proxy.
 */
export const TaskNetworkPolicySchema = z
  .object({
    /**
     * No longer read: it once gave `public` tasks the engine's bridge network. Kept so that
     * configuration files that set it still load; `egress.allowPublic` decides `public` now.
     */
    maximum: z.enum(['none', 'public']).default('none'),
    /**
     * A task that declares more than `egress` allows: `refuse` (default: its failure line says why,
     * before any sandbox starts) or `cap` (each phase keeps what the cap allows, and its rollout
     * records what it declared and what it got).
     */
    overMaximum: z.enum(['refuse', 'cap']).default('refuse'),
  })
  .strict();
export type TaskNetworkPolicy = z.output<typeof TaskNetworkPolicySchema>;
