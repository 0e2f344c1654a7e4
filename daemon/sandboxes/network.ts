/**
 * A sandbox's egress policy: set at create (the spec's `network` object) or at run time (the
 * runner switches between agent and verifier phases), capped by the operator's configuration,
 * kept with the sandbox's record, and carried out by the egress proxy. A change applies to new
 * connections and cuts the open ones: an agent's tunnel opened under one phase does not outlive it.
 */
import { GymError } from '../../core/errors.ts';
import {
  type NetworkPolicy,
  type NetworkPolicyInput,
  NetworkPolicySchema,
} from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import type { EgressConfig } from '../egress/config.ts';
import type { EgressAttempt } from '../egress/log.ts';
import { requireWithinCap } from '../egress/policy.ts';
import type { EgressProxy } from '../egress/proxy.ts';
import type { SandboxRecord, StateStore } from '../state-store.ts';

/** The policy a sandbox has when none was set: nothing. */
const NO_NETWORK: NetworkPolicy = { mode: 'none', allowedHosts: [] };

export interface NetworkView {
  policy: NetworkPolicy;
  /** The proxy URL its commands get in HTTP_PROXY (credential masked); null while it has none. */
  proxy: string | null;
}

export class SandboxNetwork {
  readonly #store: StateStore;
  readonly #config: EgressConfig;
  readonly #proxy: EgressProxy | undefined;

  constructor(options: { store: StateStore; config: EgressConfig; proxy: EgressProxy | undefined }) {
    this.#store = options.store;
    this.#config = options.config;
    this.#proxy = options.proxy;
  }

  /**
   * Parses a policy and checks it against the operator's cap, before anything is made for it.
   * @throws GymError `VALIDATION_FAILED`, `FORBIDDEN_BY_CONFIG`.
   */
  check(input: NetworkPolicyInput | unknown): NetworkPolicy {
    const policy = parseOrThrow(NetworkPolicySchema, input, 'network policy');
    requireWithinCap(policy, this.#config);
    return policy;
  }

  /**
   * Gives the sandbox the policy: recorded, then every open connection is cut. `expose` gives
   * the sandbox gateway reach (the proxy rides the gateway relay) when the policy opens anything.
   * @throws GymError `FORBIDDEN_BY_CONFIG`, `CAPABILITY_UNSUPPORTED` (no reach on its provider).
   */
  async set(record: SandboxRecord, input: unknown, expose: () => Promise<unknown>): Promise<NetworkView> {
    const policy = this.check(input);
    if (policy.mode !== 'none' && this.#proxy === undefined) {
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        'this daemon serves no egress proxy (it is not listening)',
        {
          details: { capability: 'egress' },
        },
      );
    }
    if (policy.mode !== 'none') await expose();
    const current = this.#store.get(record.id) ?? record;
    await this.#store.put({ ...current, egress: policy });
    this.#proxy?.cut(record.id, 'the sandbox network policy changed');
    return this.view(this.#store.get(record.id) ?? { ...current, egress: policy });
  }

  view(record: SandboxRecord): NetworkView {
    const policy = record.egress ?? NO_NETWORK;
    const environment = this.environment(record);
    return {
      policy,
      proxy:
        environment.HTTP_PROXY === undefined
          ? null
          : environment.HTTP_PROXY.replace(/:[0-9a-f]{64}@/, ':***@'),
    };
  }

  /** What a command in the sandbox gets to use the proxy; empty while its policy opens nothing. */
  environment(record: SandboxRecord): Record<string, string> {
    if (
      this.#proxy === undefined ||
      record.gatewayUrl === null ||
      (record.egress ?? NO_NETWORK).mode === 'none'
    ) {
      return {};
    }
    return this.#proxy.environment(record.id, record.gatewayUrl);
  }

  log(record: SandboxRecord): { attempts: EgressAttempt[]; dropped: number } {
    return this.#proxy?.log(record.id) ?? { attempts: [], dropped: 0 };
  }

  /** Cuts and forgets a removed sandbox's traffic. */
  forget(sandboxId: string): void {
    this.#proxy?.forget(sandboxId);
  }
}
