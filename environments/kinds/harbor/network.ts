/**
 * Harbor's network policy per phase, read from task.toml, and what this run gives each phase.
 *
 * Harbor (task.toml schema 1.4): `[environment] network_mode` is the baseline of the agent's
 * sandbox (and of a shared verifier); `[agent]` and `[verifier]` may override it for their phase;
 * a separate verifier's baseline is `[verifier.environment]`'s, else a copy of `[environment]`'s.
 * Modes are `public`, `no-network` and `allowlist` (with `allowed_hosts`; none listed: no egress).
 * Older files say `allow_internet = true | false` on a baseline section, which counts only where
 * that section sets no `network_mode`.
 *
 * Where we differ: Harbor's baseline defaults to `public`; a task here that declares nothing runs
 * with no network (our default), and the rollout says so. A task that declares more than the
 * operator allows (`taskNetwork` in the daemon's configuration) is refused with the reason,
 * unless the operator chose to run such tasks under its own cap; either way the rollout records
 * both what the task declared and what it got, so a 0 earned without the network the task needed
 * is never read as a real 0. No egress proxy exists yet, so an allowlist with hosts is more than
 * `none` and cannot be granted as such.
 */
import { z } from 'zod';
import { GymError } from '../../../core/errors.ts';
import { type TaskNetworkPolicy, TaskNetworkPolicySchema } from '../../../core/schemas/task-network.ts';

export type { TaskNetworkPolicy };

/** One phase's policy as the task declares it. */
export interface DeclaredPolicy {
  mode: 'public' | 'no-network' | 'allowlist';
  /** Only with `allowlist`; empty means no egress at all. */
  allowed_hosts?: string[];
}

/** What the task declares for the agent's run and for its tests; null where it declares nothing. */
export interface DeclaredNetwork {
  agent: DeclaredPolicy | null;
  verifier: DeclaredPolicy | null;
}

/** The network a sandbox is given here: none (loopback only) or public egress. */
export type AppliedNetwork = 'none' | 'public';

export const DEFAULT_TASK_NETWORK: TaskNetworkPolicy = TaskNetworkPolicySchema.parse({});

const ModeSchema = z.enum(['public', 'no-network', 'allowlist']);
const HostsSchema = z.array(z.string().min(1)).optional();

/** The network keys of a baseline section ([environment], [verifier.environment]). */
export const BaselineNetworkFields = {
  network_mode: ModeSchema.optional(),
  allowed_hosts: HostsSchema,
  allow_internet: z.boolean().optional(),
};

/** The network keys of a phase override ([agent], [verifier]). */
export const PhaseNetworkFields = {
  network_mode: ModeSchema.optional(),
  allowed_hosts: HostsSchema,
};

interface NetworkSection {
  network_mode?: DeclaredPolicy['mode'] | undefined;
  allowed_hosts?: string[] | undefined;
  allow_internet?: boolean | undefined;
}

function sectionPolicy(section: NetworkSection | undefined, where: string): DeclaredPolicy | null {
  if (section === undefined) return null;
  if (section.allowed_hosts !== undefined && section.network_mode !== 'allowlist')
    throw new GymError(
      'VALIDATION_FAILED',
      `${where}: allowed_hosts is only valid with network_mode = "allowlist"`,
    );
  if (section.network_mode !== undefined)
    return section.network_mode === 'allowlist'
      ? { mode: 'allowlist', allowed_hosts: section.allowed_hosts ?? [] }
      : { mode: section.network_mode };
  if (section.allow_internet !== undefined) return { mode: section.allow_internet ? 'public' : 'no-network' };
  return null;
}

/**
 * The policy of each phase as Harbor resolves it: a phase override, else its baseline
 * (`[environment]`, or a separate verifier's own environment, else a copy of `[environment]`).
 */
export function declaredNetwork(config: {
  environment: NetworkSection;
  agent: NetworkSection;
  verifier: NetworkSection & { environment?: NetworkSection | undefined };
  separateVerifier: boolean;
}): DeclaredNetwork {
  const baseline = sectionPolicy(config.environment, '[environment]');
  const verifierBaseline = config.separateVerifier
    ? (sectionPolicy(config.verifier.environment, '[verifier.environment]') ?? baseline)
    : baseline;
  return {
    agent: sectionPolicy({ ...config.agent, allow_internet: undefined }, '[agent]') ?? baseline,
    verifier:
      sectionPolicy({ ...config.verifier, allow_internet: undefined }, '[verifier]') ?? verifierBaseline,
  };
}

/** What a declared policy needs: none (no-network, an allowlist of no host), or more. */
function needs(policy: DeclaredPolicy | null): 'none' | 'public' | 'allowlist' {
  if (policy === null || policy.mode === 'no-network') return 'none';
  if (policy.mode === 'allowlist') return (policy.allowed_hosts ?? []).length === 0 ? 'none' : 'allowlist';
  return 'public';
}

const describePolicy = (policy: DeclaredPolicy) =>
  policy.mode === 'allowlist' ? `allowlist [${(policy.allowed_hosts ?? []).join(', ')}]` : policy.mode;

export interface NetworkDecision {
  /** Per phase, what the sandbox gets; one value for both (one sandbox cannot change its network). */
  applied: { agent: AppliedNetwork; verifier: AppliedNetwork };
  /** Why the task is refused, when it is. */
  refused?: string;
  /** Each phase given less than it declared, said in the rollout. */
  capped: string[];
}

/**
 * What the task's phases get under the operator's policy. A phase that needs more than the
 * maximum (public over `none`; an allowlist, which nothing here enforces yet) is refused, or
 * capped when the operator says so. With a shared verifier both phases run in one sandbox, whose
 * network is set when it starts: phases that would get different networks are refused too (as
 * Harbor refuses them on providers that cannot switch), or capped to the lesser.
 */
export function decideNetwork(
  declared: DeclaredNetwork,
  operator: TaskNetworkPolicy,
  separateVerifier: boolean,
): NetworkDecision {
  const capped: string[] = [];
  const reasons: string[] = [];
  const grant = (phase: 'agent' | 'verifier'): AppliedNetwork => {
    const policy = declared[phase];
    const need = needs(policy);
    if (need === 'none') return 'none';
    if (need === 'public' && operator.maximum === 'public') return 'public';
    const why =
      need === 'allowlist'
        ? `the ${phase} phase declares network_mode ${describePolicy(policy!)}, and no egress proxy here can enforce an allowlist`
        : `the ${phase} phase declares network_mode public, and the operator's taskNetwork.maximum is ${operator.maximum}`;
    reasons.push(why);
    capped.push(
      `${why}: ran with ${operator.maximum === 'public' && need === 'allowlist' ? 'none' : operator.maximum}`,
    );
    // An allowlist is never widened to public: the task would get more than it asked for.
    return need === 'allowlist' ? 'none' : operator.maximum;
  };
  let agent = grant('agent');
  let verifier = grant('verifier');
  if (!separateVerifier && agent !== verifier) {
    const why = `the agent phase would get ${agent} and the verifier phase ${verifier}, but they share one sandbox, whose network is set when it starts`;
    reasons.push(why);
    capped.push(`${why}: both ran with none`);
    agent = verifier = 'none';
  }
  if (reasons.length > 0 && operator.overMaximum === 'refuse')
    return {
      applied: { agent, verifier },
      refused: `needs network this run does not give: ${reasons.join('; ')} (the operator can run such tasks under its own cap: taskNetwork.overMaximum = "cap" in GYM_CONFIG)`,
      capped: [],
    };
  return { applied: { agent, verifier }, capped };
}

/** What the sandbox spec says for an applied network (`public` is the provider's bridge). */
export function sandboxNetwork(applied: AppliedNetwork): 'none' | 'bridge' {
  return applied === 'public' ? 'bridge' : 'none';
}
