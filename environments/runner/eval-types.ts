/**
 * What an evaluation run is given and what it reports: shared by the run's pieces (plan,
 * schedule, rollout, metrics) so none of them imports another's front file.
 */
import type { GymClient } from '../../client/client.ts';
import type { Logger } from '../../core/logger.ts';
import type { Tracing } from '../../core/tracing.ts';
import type { Harness, HarnessLimits } from '../../harnesses/harness.ts';
import type { LoadedEnvironment } from '../environment.ts';
import type { RolloutOutcome } from '../verifiers/verifier.ts';
import type { outputPaths } from './files.ts';

export interface EvalOptions {
  client: GymClient;
  environment: LoadedEnvironment;
  rows: Array<Record<string, unknown>>;
  harness: Harness;
  harnessName: string;
  /** The model name agents ask for (the gateway may replace it with the policy model). */
  modelName: string;
  numRepeats: number;
  concurrency: number;
  output: string;
  resume: boolean;
  /** Infra errors retried per rollout before it goes to the failures file for good. */
  maxInfraAttempts: number;
  /**
   * Serve agent sandboxes from warm pools, one per image that several rollouts share, sized to
   * the concurrency, so set-up overlaps with work. Off by default: measured on a 2-core host,
   * where CPU is the bottleneck, pools cost 15-25% of throughput; they pay where creates are slow
   * (large images, Kubernetes).
   */
  usePools?: boolean;
  /**
   * Run each task's setup once and fork its repeats from it (`gym eval run --fork-setup`,
   * `fork-setup.ts`): the setup command runs in one sandbox per task, which is snapshotted, and
   * every repeat's sandbox is a child of it. With `usePools` the pools serve the setup sandboxes.
   * Off by default.
   */
  forkSetup?: boolean;
  /**
   * The model upstream of this run's rollouts (`gym eval run --policy-base-url`): each rollout is
   * opened with it, so it applies on a daemon already running with another (or no) upstream.
   * Default: the daemon's configured gateway upstream.
   */
  upstream?: { baseUrl: string; apiKey?: string; model?: string };
  /**
   * The run asked for exact token ids (`gym eval run --token-ids`, or `token_id_capture.enabled`
   * in env.yaml): each rollout's upstream is asked for them (`requestTokenIds`, when the run
   * names its upstream), and each line's `response.output` is its training response, with
   * `_ng_token_capture` and `mask_sample` beside it (`training-response.ts`). Off: lines as before.
   */
  tokenIds?: boolean;
  limits?: Partial<HarnessLimits>;
  logger: Logger;
  /**
   * Spans of each rollout and its phases (docs/tracing.md); the client's requests carry their
   * `traceparent`, so a traced daemon's spans nest under them. Default: off.
   */
  tracing?: Tracing;
  onProgress?: (progress: EvalProgress) => void;
}

export interface EvalProgress {
  done: number;
  total: number;
  skipped: number;
  /**
   * The rewards in the rollouts file so far (a resumed run's earlier ones included), and how many:
   * their mean is the `mean/reward` the run ends with.
   */
  rewardSum: number;
  rewarded: number;
  infraErrors: number;
  /** Rollouts whose verifier ran out of time: in the failures file, never a reward. */
  verifierTimeouts: number;
  /** The rollout that finished last, whatever its end (reward null when it earned none). */
  last?: { task: unknown; rollout: unknown; outcome: RolloutOutcome; reward: number | null };
}

export interface EvalSummary {
  rollouts: number;
  failures: number;
  metrics: Record<string, number>;
  paths: ReturnType<typeof outputPaths>;
  durationMs: number;
}

export interface Timings {
  sandboxMs: number;
  agentMs: number;
  verifyMs: number;
  totalMs: number;
}
