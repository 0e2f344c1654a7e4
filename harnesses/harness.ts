/**
 * The harness contract: drive one agent against one sandbox until it submits or hits a limit,
 * and hand back what happened. A harness sees a sandbox only through `SandboxHandle` (never a
 * provider) and a model only through its rollout's gateway endpoint.
 */

import { isGymError } from '../core/errors.ts';
import type { Logger } from '../core/logger.ts';
import type { ExecRequestInput, ExecResult } from '../core/schemas/exec.ts';

/** 16 MiB: far more than any result, trajectory or source file a harness reads back needs. */
export const DEFAULT_READ_FILE_MAX_BYTES = 16 * 1024 * 1024;

/**
 * Whether a file operation failed because the sandbox's own file system refused it (full, or a
 * read-only place): the engine reports that as a provider error, but the agent caused it, so it
 * is the agent's to see (and to be graded for), never an infra error.
 */
export function isSandboxFilesystemRefusal(error: unknown): boolean {
  return (
    isGymError(error, 'PROVIDER_ERROR') &&
    /no space left on device|read-only file system|disk quota exceeded/i.test(error.message)
  );
}

/** What a harness may do to its sandbox. */
export interface SandboxHandle {
  readonly id: string;
  exec(request: ExecRequestInput): Promise<ExecResult>;
  /** Bytes in memory, or a stream with its exact size (large agent binaries). */
  writeFile(
    path: string,
    content: Buffer | { stream: import('node:stream').Readable; sizeBytes: number },
    mode?: number,
  ): Promise<void>;
  /**
   * The file's bytes, read up to `maxBytes` (default {@link DEFAULT_READ_FILE_MAX_BYTES}): a
   * larger file stops the read and throws FILE_TOO_LARGE, so an agent's output cannot exhaust
   * the runner's memory. Ask for a small limit where a small file is expected (a reward).
   */
  readFile(path: string, options?: { maxBytes?: number }): Promise<Buffer>;
  /**
   * Makes the model gateway reachable from inside the sandbox, for agent CLIs that run there, and
   * answers the URL they use (its origin: the rollout's `basePath` goes after it). The provider
   * chooses it; it stays the same for the sandbox's life. Optional: not every provider can.
   */
  exposeGateway?(): Promise<{ url: string }>;
  /**
   * Kills every process in the sandbox but its keeper (the sandbox stays ready), so that nothing
   * the agent left running acts while a verifier judges. Optional: not every provider can; a
   * verifier that needs it reports an infra error without it.
   */
  stopProcesses?(): Promise<{ killed: number }>;
  /**
   * Which files of a verifier's toolchain (the always-checked tools and `tools`) differ from the
   * sandbox's image, seen from outside the sandbox. Optional; absent, or CAPABILITY_UNSUPPORTED,
   * where the provider has no such view.
   */
  checkToolchain?(
    tools: ReadonlyArray<string>,
    /** The folders the verifier's python runs in (see `ToolchainCheckRequest.workdirs`). */
    workdirs?: ReadonlyArray<string>,
  ): Promise<import('../core/schemas/toolchain.ts').ToolchainCheckResult>;
}

export interface HarnessTask {
  id: string;
  /** What the agent is asked to do (a SWE problem statement, a terminal instruction). */
  instruction: string;
  /** Where the work happens inside the sandbox. */
  workdir: string;
  /** The reference solution as a unified diff (the oracle applies it). */
  goldPatch?: string;
  /** The reference solution as a shell script (the oracle runs it), for tasks without a patch. */
  solution?: string;
  /** Files the oracle writes into the sandbox before it runs `solution` (a Harbor task's /solution). */
  solutionFiles?: Array<{ path: string; content: Buffer; mode: number }>;
  /** Environment of the reference solution (a Harbor task's [solution] env). */
  solutionEnv?: Record<string, string>;
  /** The expected answer of a question (the oracle submits it). */
  goldAnswer?: string;
  /**
   * What is graded after the agent: `diff`, the changes of the git repository at `workdir` (a SWE
   * task), or `state`, the sandbox as the agent leaves it (a script or Harbor task, whose workdir
   * may be no repository). Harnesses that tell the agent how to submit go by it; absent: `diff`.
   */
  graded?: 'diff' | 'state';
  /**
   * The conversation the row gives (NeMo Gym's `responses_create_params.input`, as Chat
   * Completions messages). Harnesses that send a conversation send this one (with their own
   * system prompt first when it has none); harnesses that take one prompt use `instruction`.
   */
  messages?: Array<{ role: 'system' | 'user' | 'assistant'; content: string }>;
  /** Sampling settings the row asks for (NeMo Gym's `temperature`, `top_p`, `max_output_tokens`). */
  sampling?: { temperature?: number; top_p?: number; max_tokens?: number };
  metadata?: Record<string, unknown>;
}

/** The rollout's OpenAI-compatible endpoint on the daemon's gateway. */
export interface ModelEndpoint {
  /** Up to and including `/v1` (`http://127.0.0.1:7380/v1/gateway/<rollout>/v1`). */
  baseUrl: string;
  /** The rollout's key (sent as the API key). */
  apiKey: string;
  model: string;
  /** The path part of baseUrl, for agents reaching the gateway at another origin (`exposeGateway`). */
  basePath: string;
}

export interface HarnessLimits {
  /** Model calls at most. */
  maxSteps: number;
  wallTimeMs: number;
  /** Stop when the cost reaches this (needs prices; 0 = no cost limit). */
  maxCostUsd: number;
  pricePerMillionInputTokens: number;
  pricePerMillionOutputTokens: number;
  /** Observations longer than this are shown as head and tail. */
  maxObservationChars: number;
  /** One command's timeout (capped by the time left). */
  commandTimeoutMs: number;
}

export const DEFAULT_LIMITS: HarnessLimits = {
  maxSteps: 50,
  wallTimeMs: 30 * 60_000,
  maxCostUsd: 0,
  pricePerMillionInputTokens: 0,
  pricePerMillionOutputTokens: 0,
  maxObservationChars: 10_000,
  commandTimeoutMs: 120_000,
};

/**
 * How a harness run ended. `sandbox_gone` and `infra_error` (the daemon, the provider or the model
 * gateway failed, or an infrastructure step timed out) are never the agent's doing: the runner
 * records them as infra errors and retries, and never grades what was left.
 */
export type HarnessOutcome =
  | 'submitted'
  | 'step_limit'
  | 'time_limit'
  | 'cost_limit'
  | 'agent_error'
  | 'sandbox_gone'
  | 'infra_error';

export interface TrajectoryStep {
  index: number;
  startedAt: string;
  durationMs: number;
  /** What the model said (its reasoning and action text). */
  assistant?: string;
  /** The action taken: a shell command, or a tool call. */
  action?: { tool: string; arguments: Record<string, unknown> };
  /** What the action produced, as fed back to the model. */
  observation?: string;
  exitCode?: number | null;
  /** A format error or failed call, fed back or fatal. */
  error?: string;
  usage?: { inputTokens: number; outputTokens: number };
}

export interface HarnessResult {
  outcome: HarnessOutcome;
  /** The final output (a patch, the final message); null when none was submitted. */
  submission: string | null;
  /** Why it ended, for anything but a clean submission. */
  message?: string;
  trajectory: TrajectoryStep[];
  steps: number;
  costUsd: number;
  timings: { startedAt: string; durationMs: number };
  /** Agent-specific extras (an agent CLI's own event log, say). */
  extra?: Record<string, unknown>;
  /**
   * The agent's own files, kept with the rollout (an agent CLI's output stream, the trajectory
   * file it wrote): the runner writes each beside the rollouts file, cut at a size limit, since
   * the agent wrote them.
   */
  agentFiles?: AgentFile[];
}

/** One of the agent's own files; `name` is a plain file name the harness chose (`trajectory.json`). */
export interface AgentFile {
  name: string;
  content: Buffer;
}

export interface HarnessRunContext {
  sandbox: SandboxHandle;
  task: HarnessTask;
  model: ModelEndpoint;
  limits: HarnessLimits;
  logger: Logger;
  signal?: AbortSignal;
}

export interface Harness {
  readonly name: string;
  /** Whether the harness calls a model (the oracle does not). */
  readonly needsModel: boolean;
  /** Only the oracle reads the gold patch; every other harness is never given it. */
  readonly usesGoldPatch?: boolean;
  run(context: HarnessRunContext): Promise<HarnessResult>;
}

export type HarnessFactory = (options: unknown) => Harness | Promise<Harness>;

/** Builds a result's timing and cost fields from a start time; shared by every harness. */
export class RunClock {
  readonly startedMs = Date.now();
  readonly limits: HarnessLimits;
  readonly #deadlineMs: number;

  constructor(limits: HarnessLimits) {
    this.limits = limits;
    this.#deadlineMs = this.startedMs + limits.wallTimeMs;
  }

  get remainingMs(): number {
    return this.#deadlineMs - Date.now();
  }

  finish(result: Omit<HarnessResult, 'timings'>): HarnessResult {
    return {
      ...result,
      timings: { startedAt: new Date(this.startedMs).toISOString(), durationMs: Date.now() - this.startedMs },
    };
  }
}

/** Shows long output as head and tail with how much was left out, as mini-swe-agent does. */
export function clipObservation(text: string, maxChars: number): string {
  if (text.length <= maxChars) return text;
  const half = Math.floor(maxChars / 2);
  return `${text.slice(0, half)}\n[... ${text.length - 2 * half} characters elided; use head, tail, grep or redirect to a file ...]\n${text.slice(-half)}`;
}
