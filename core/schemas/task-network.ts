/**
 * The operator's network policy for benchmark tasks: set in the daemon's configuration
 * (`taskNetwork`) and read by the environments that run such tasks (Harbor), so both take it from
 * here rather than one from the other.
 */
import { z } from 'zod';

/**
 * What network a benchmark task may declare and still run (`taskNetwork`): the most any task
 * sandbox is given, and what becomes of a task that declares more.
 */
export const TaskNetworkPolicySchema = z
  .object({
    /**
     * `none` (default): no task sandbox gets a network. `public`: a task that declares `public`
     * gets the provider's bridge (Docker's `bridge` network; a Docker engine started with
     * `--bridge=none` has none, and the sandbox's create fails).
     */
    maximum: z.enum(['none', 'public']).default('none'),
    /**
     * A task that declares more than `maximum`: `refuse` (default: its failure line says why) or
     * `cap` (it runs with `maximum`, and its rollout records what it declared and what it got).
     */
    overMaximum: z.enum(['refuse', 'cap']).default('refuse'),
  })
  .strict();
export type TaskNetworkPolicy = z.output<typeof TaskNetworkPolicySchema>;
