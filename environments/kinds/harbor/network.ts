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
 * Each phase's policy becomes the sandbox's egress policy (the daemon's proxy, docs/egress.md):
 * the sandbox is created with the environment phase's, the runner switches to the agent's before
 * the agent runs and to the verifier's before the tests (a switch cuts open connections). The
 * sandbox itself never gets an engine network.
 *
 * Where we differ: Harbor's baseline defaults to `public`; a task here that declares nothing runs
 * with no network (our default), and the rollout says so. `public` and each allow-listed host are
 * capped by the operator's `egress` configuration (`allowPublic`, `allowedHosts`): a task that
 * declares more is refused before any sandbox starts, with the phase, the host and the setting
 * named (an invalid row of the run: never a reward, never retried), unless the operator chose to
 * run such tasks under its cap (`taskNetwork.overMaximum = "cap"`: the phase keeps only what the
 * cap allows, and the rollout records what it declared and what it got).
 */
import { z } from 'zod';
import { GymError } from '../../../core/errors.ts';
import type { NetworkPolicy } from '../../../core/schemas/sandbox.ts';
import { AllowedHostSchema } from '../../../core/schemas/sandbox.ts';
import { type TaskNetworkPolicy, TaskNetworkPolicySchema } from '../../../core/schemas/task-network.ts';
import type { EgressConfig } from '../../../daemon/egress/config.ts';
import { requireWithinCap } from '../../../daemon/egress/policy.ts';

export type { TaskNetworkPolicy };

/** One phase's policy as the task declares it. */
export interface DeclaredPolicy {
  mode: 'public' | 'no-network' | 'allowlist';
  /** Only with `allowlist`; empty means no egress at all. */
  allowed_hosts?: string[];
}

/**
 * What the task declares for its sandbox's start (`environment`: the baseline, absent in rows read
 * before it was kept), the agent's run and its tests; null where it declares nothing.
 */
export interface DeclaredNetwork {
  environment?: DeclaredPolicy | null;
  agent: DeclaredPolicy | null;
  verifier: DeclaredPolicy | null;
}

/** The phases of a rollout whose network a task declares. */
export type NetworkPhase = 'environment' | 'agent' | 'verifier';
export const NETWORK_PHASES: readonly NetworkPhase[] = ['environment', 'agent', 'verifier'];

/** The part of the operator's `egress` configuration that caps what a policy may open. */
export type EgressCap = Pick<EgressConfig, 'allowPublic' | 'allowedHosts'>;

/** What the operator's configuration says of tasks' network: the egress cap, and what to do over it. */
export interface OperatorNetwork {
  taskNetwork: TaskNetworkPolicy;
  egress: EgressCap;
}

/** Nothing opened: the default cap, as the daemon's. */
export const DEFAULT_EGRESS_CAP: EgressCap = { allowPublic: false, allowedHosts: [] };

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
    environment: baseline,
    agent: sectionPolicy({ ...config.agent, allow_internet: undefined }, '[agent]') ?? baseline,
    verifier:
      sectionPolicy({ ...config.verifier, allow_internet: undefined }, '[verifier]') ?? verifierBaseline,
  };
}

const NO_NETWORK: NetworkPolicy = { mode: 'none', allowedHosts: [] };

const describePolicy = (policy: DeclaredPolicy) =>
  policy.mode === 'allowlist' ? `allowlist [${(policy.allowed_hosts ?? []).join(', ')}]` : policy.mode;

/**
 * A declared policy as the sandbox's egress policy: `no-network` (or nothing) is `none`, an
 * allowlist of no host is `none`, host names are lower-cased (an entry with no port opens 80 and
 * 443, as Harbor's do).
 * @throws GymError `VALIDATION_FAILED` for an entry the proxy cannot take (a URL, a path).
 */
export function egressPolicyOf(policy: DeclaredPolicy | null, where: string): NetworkPolicy {
  if (policy === null || policy.mode === 'no-network') return NO_NETWORK;
  if (policy.mode === 'public') return { mode: 'public', allowedHosts: [] };
  const hosts = (policy.allowed_hosts ?? []).map((host) => host.trim().toLowerCase());
  if (hosts.length === 0) return NO_NETWORK;
  for (const host of hosts)
    if (!AllowedHostSchema.safeParse(host).success)
      throw new GymError(
        'VALIDATION_FAILED',
        `${where}: allowed_hosts entry "${host}" is not a host name, a "*.suffix" or an IP literal (optionally with :port)`,
      );
  return { mode: 'allowlist', allowedHosts: [...new Set(hosts)] };
}

/** Why the cap refuses a policy, or undefined when it allows it. */
function capRefusal(policy: NetworkPolicy, cap: EgressCap): string | undefined {
  try {
    requireWithinCap(policy, cap);
    return undefined;
  } catch (error) {
    return (error as Error).message;
  }
}

/** The most of a policy the cap allows: the allow-listed hosts it covers; public over a closed cap is none. */
function capped(policy: NetworkPolicy, cap: EgressCap): NetworkPolicy {
  if (policy.mode !== 'allowlist') return NO_NETWORK;
  const kept = policy.allowedHosts.filter(
    (host) => capRefusal({ mode: 'allowlist', allowedHosts: [host] }, cap) === undefined,
  );
  return kept.length === 0 ? NO_NETWORK : { mode: 'allowlist', allowedHosts: kept };
}

export interface NetworkDecision {
  /** Per phase, the sandbox's egress policy. */
  applied: Record<NetworkPhase, NetworkPolicy>;
  /** Why the task is refused, when it is. */
  refused?: string;
  /** Each phase given less than it declared, said in the rollout. */
  capped: string[];
}

const SECTION: Record<NetworkPhase, string> = {
  environment: '[environment]',
  agent: '[agent]',
  verifier: '[verifier]',
};

/**
 * What the task's phases get under the operator's cap. A phase whose policy the operator's `egress`
 * configuration does not allow is refused (the task fails before any sandbox starts), or capped
 * to what the cap allows when the operator says so (`taskNetwork.overMaximum = "cap"`).
 * @throws GymError `VALIDATION_FAILED` for an allowed_hosts entry no proxy can take.
 */
export function decideNetwork(declared: DeclaredNetwork, operator: OperatorNetwork): NetworkDecision {
  const reasons: string[] = [];
  const cappedNotes: string[] = [];
  const decide = (phase: NetworkPhase): NetworkPolicy => {
    // Rows read before the baseline was kept: the agent's phase is the closest to the start.
    const policy =
      phase === 'environment' && declared.environment === undefined ? declared.agent : declared[phase];
    const wanted = egressPolicyOf(policy ?? null, `task.toml ${SECTION[phase]}`);
    const refusal = capRefusal(wanted, operator.egress);
    if (refusal === undefined) return wanted;
    const given = capped(wanted, operator.egress);
    const why = `the ${phase} phase declares network_mode ${describePolicy(policy!)}, beyond the operator's egress configuration (${refusal})`;
    reasons.push(why);
    cappedNotes.push(
      `${why}: ran with ${given.mode === 'none' ? 'none' : `allowlist [${given.allowedHosts.join(', ')}]`}`,
    );
    return given;
  };
  const applied = {
    environment: decide('environment'),
    agent: decide('agent'),
    verifier: decide('verifier'),
  };
  if (reasons.length > 0 && operator.taskNetwork.overMaximum === 'refuse')
    return {
      applied,
      refused: `needs network the operator does not allow: ${reasons.join('; ')} (the operator can widen egress.allowedHosts or egress.allowPublic in GYM_CONFIG, or run such tasks under its cap: taskNetwork.overMaximum = "cap")`,
      capped: [],
    };
  return { applied, capped: cappedNotes };
}

/** Whether a policy opens anything at all. */
export const opensAnything = (policy: NetworkPolicy) => policy.mode !== 'none';
