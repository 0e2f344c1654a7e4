/**
 * A rollout's egress records: every attempt its sandboxes made through the daemon's proxy
 * (docs/egress.md), tagged with the phase it was made in, kept in full under
 * `X_network_logs/<rollout id>.json` beside the rollouts file and summed up in the rollout line
 * (`_gym.network`). The daemon keeps a sandbox's log only while the sandbox lives, so it is read
 * just before each sandbox is destroyed.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import type { GymClient } from '../../client/client.ts';
import type { EgressAttemptRecord, NetworkLog } from '../../core/schemas/api.ts';

export type RolloutNetworkPhase = 'environment' | 'agent' | 'verifier';

/** One sandbox's log, its attempts tagged with their phase. */
interface SandboxNetworkLog {
  role: 'agent' | 'verifier';
  sandboxId: string;
  /** When each phase's policy took effect on this sandbox (ISO times), in order. */
  phases: Array<{ phase: RolloutNetworkPhase; from: string }>;
  attempts: Array<EgressAttemptRecord & { phase: RolloutNetworkPhase }>;
  dropped: number;
  /** Why the log could not be read, when it could not. */
  error?: string;
}

/** What the rollout line says of its network: counts, refusals, and where the full log is. */
export interface NetworkSummary {
  /** Relative to the rollouts file's folder. */
  log?: string;
  log_error?: string;
  attempts: number;
  allowed: number;
  refused: number;
  /** Attempts the daemon's bounded log let go (counted, not listed). */
  dropped: number;
  bytes_up: number;
  bytes_down: number;
  /** Per phase: attempts and refusals. */
  phases: Partial<Record<RolloutNetworkPhase, { attempts: number; refused: number }>>;
  /** The distinct `host:port` refused, first 20, with the first reason of each. */
  refused_targets: Array<{ target: string; phase: RolloutNetworkPhase; reason: string | null }>;
}

const MAX_REFUSED_LISTED = 20;

/** Collects one rollout's egress records as its phases go. */
export class RolloutNetworkRecords {
  readonly #client: GymClient;
  readonly #logs: SandboxNetworkLog[] = [];
  readonly #phases = new Map<string, Array<{ phase: RolloutNetworkPhase; from: string }>>();

  constructor(client: GymClient) {
    this.#client = client;
  }

  /** A sandbox's policy for `phase` took effect now (at create, or by a switch). */
  mark(sandboxId: string, phase: RolloutNetworkPhase): void {
    const phases = this.#phases.get(sandboxId) ?? [];
    phases.push({ phase, from: new Date().toISOString() });
    this.#phases.set(sandboxId, phases);
  }

  /** Whether any sandbox of the rollout had a phase marked (its kind declares network). */
  get tracked(): boolean {
    return this.#phases.size > 0;
  }

  /** Reads a sandbox's log from the daemon, before the sandbox is destroyed; never throws. */
  async read(sandboxId: string, role: SandboxNetworkLog['role']): Promise<void> {
    const phases = this.#phases.get(sandboxId);
    if (phases === undefined) return;
    let log: NetworkLog;
    try {
      log = await this.#client.networkLog(sandboxId);
    } catch (error) {
      this.#logs.push({ role, sandboxId, phases, attempts: [], dropped: 0, error: String(error) });
      return;
    }
    const phaseAt = (at: string) => {
      let current = phases[0]!.phase;
      for (const mark of phases) if (mark.from <= at) current = mark.phase;
      return current;
    };
    this.#logs.push({
      role,
      sandboxId,
      phases,
      attempts: log.attempts.map((attempt) => ({ ...attempt, phase: phaseAt(attempt.at) })),
      dropped: log.dropped,
    });
  }

  /**
   * Writes the full log under `folder` and answers the rollout line's summary; undefined when the
   * rollout tracked no network. A host that cannot write the file loses it, not the rollout.
   */
  async keep(folder: string, rolloutId: string): Promise<NetworkSummary | undefined> {
    if (!this.tracked) return undefined;
    const attempts = this.#logs.flatMap((log) => log.attempts);
    const phases: NetworkSummary['phases'] = {};
    const refused: NetworkSummary['refused_targets'] = [];
    for (const attempt of attempts) {
      const counts = phases[attempt.phase] ?? { attempts: 0, refused: 0 };
      counts.attempts += 1;
      if (attempt.verdict === 'refused') {
        counts.refused += 1;
        const target = `${attempt.host}:${attempt.port}`;
        if (refused.length < MAX_REFUSED_LISTED && !refused.some((entry) => entry.target === target))
          refused.push({ target, phase: attempt.phase, reason: attempt.reason ?? null });
      }
      phases[attempt.phase] = counts;
    }
    const summary: NetworkSummary = {
      attempts: attempts.length,
      allowed: attempts.filter((attempt) => attempt.verdict === 'allowed').length,
      refused: attempts.filter((attempt) => attempt.verdict === 'refused').length,
      dropped: this.#logs.reduce((sum, log) => sum + log.dropped, 0),
      bytes_up: attempts.reduce((sum, attempt) => sum + attempt.bytesUp, 0),
      bytes_down: attempts.reduce((sum, attempt) => sum + attempt.bytesDown, 0),
      phases,
      refused_targets: refused,
    };
    const errors = this.#logs.flatMap((log) =>
      log.error === undefined ? [] : [`${log.role}: ${log.error}`],
    );
    if (errors.length > 0) summary.log_error = errors.join('; ');
    const path = join(folder, `${rolloutId.replace(/[^A-Za-z0-9._-]/g, '_')}.json`);
    try {
      await mkdir(folder, { recursive: true });
      await writeFile(path, `${JSON.stringify({ rolloutId, sandboxes: this.#logs }, null, 1)}\n`);
      summary.log = relative(dirname(folder), path);
    } catch (error) {
      summary.log_error = [summary.log_error, `writing ${path}: ${String(error)}`].filter(Boolean).join('; ');
    }
    return summary;
  }

  /** The refusals of a phase, for a verdict that must say why the tests could not reach a host. */
  refusedIn(phase: RolloutNetworkPhase): Array<{ target: string; reason: string | null }> {
    return this.#logs
      .flatMap((log) => log.attempts)
      .filter((attempt) => attempt.phase === phase && attempt.verdict === 'refused')
      .map((attempt) => ({ target: `${attempt.host}:${attempt.port}`, reason: attempt.reason ?? null }));
  }
}
