import { homedir } from 'node:os';
import { basename, join } from 'node:path';
import { GymError, isGymError } from '../../core/errors.ts';
import {
  type AgentFile,
  type Harness,
  type HarnessResult,
  type HarnessRunContext,
  RunClock,
  type TrajectoryStep,
} from '../harness.ts';
import { type AgentSource, installAgent } from './agent-install.ts';

// Where agents come from, and the host caches that hold them, live in agent-install.ts; recipes
// and tests keep importing them from here.
export {
  type AgentPlatform,
  ensureAgentOnHost,
  ensureNodeAgentOnHost,
  hostPlatform,
  type InSandboxSource,
  NODE_AGENT_UNPACK,
  NODE_RUNTIME_VERSION,
  type NodeAgentOnHost,
  type NpmHostSource,
  type NpmNodeSource,
  nodeLauncher,
  PLATFORM_PROBE,
  parsePlatformProbe,
} from './agent-install.ts';

export interface AgentRunSettings {
  /** The gateway as the agent reaches it from inside the sandbox, up to `/v1`. */
  baseUrl: string;
  apiKey: string;
  model: string;
  workdir: string;
  instruction: string;
  /** Where the agent keeps its config and session files in the sandbox. */
  homeDir: string;
}

/** What reading a result file the agent wrote can fail with by the agent's doing alone. */
const AGENT_RESULT_FILE_ERRORS = new Set(['FILE_NOT_FOUND', 'PATH_KIND_MISMATCH', 'FILE_TOO_LARGE']);

/** The JSON objects of a JSONL event stream; other lines (banners, logs) are skipped. */
export function parseJsonLines(stdout: string): Array<Record<string, unknown>> {
  return stdout.split('\n').flatMap((line) => {
    if (!line.startsWith('{')) return [];
    try {
      return [JSON.parse(line) as Record<string, unknown>];
    } catch {
      return [];
    }
  });
}

/** Appends a step read from an agent's own log (its timing is not known). */
export function logStep(
  steps: TrajectoryStep[],
  fields: Omit<TrajectoryStep, 'index' | 'startedAt' | 'durationMs'>,
): void {
  steps.push({ index: steps.length, startedAt: '', durationMs: 0, ...fields });
}

export interface ParsedRun {
  finalMessage: string | null;
  steps: TrajectoryStep[];
  /** An error the agent itself reported (a failed turn). */
  error: string | null;
  events: unknown[];
}

export interface InstalledAgentRecipe {
  name: string;
  source: AgentSource;
  /** The agent's executable inside sandboxes (checked before installing). */
  sandboxBinaryPath: string;
  configure(settings: AgentRunSettings): {
    files: Array<{ path: string; content: string; mode?: number }>;
    env: Record<string, string>;
  };
  /** The command line; its first element is the agent's executable (replaced by `binaryPath`). */
  command(settings: AgentRunSettings): string[];
  /** Files the agent writes that `parse` needs (a trajectory file), read after the run. */
  resultFiles?(settings: AgentRunSettings): string[];
  parse(stdout: string, files: Record<string, string>): ParsedRun;
}

export interface InstalledAgentOptions {
  /** Host directory caching installed agents; default `~/.cache/gym/agents`. */
  cacheDir?: string;
  /**
   * The agent's executable in an image that has it preinstalled (say `/usr/local/bin/mini`):
   * used instead of the recipe's path, and never installed; an image without it is an error.
   */
  binaryPath?: string;
}

export function createInstalledAgentHarness(
  recipe: InstalledAgentRecipe,
  options: InstalledAgentOptions = {},
): Harness {
  if (options.binaryPath !== undefined && !options.binaryPath.startsWith('/'))
    throw new GymError(
      'VALIDATION_FAILED',
      `binaryPath must be an absolute path, not "${options.binaryPath}"`,
    );
  const cacheDir = options.cacheDir ?? join(homedir(), '.cache', 'gym', 'agents');
  return {
    name: recipe.name,
    needsModel: true,
    async run({ sandbox, task, model, limits }: HarnessRunContext): Promise<HarnessResult> {
      const clock = new RunClock(limits);
      const base = { steps: 0, costUsd: 0 };
      const fail = (
        outcome: HarnessResult['outcome'],
        message: string,
        trajectory: TrajectoryStep[] = [],
        extra?: Record<string, unknown>,
        agentFiles?: AgentFile[],
      ) =>
        clock.finish({
          ...base,
          outcome,
          submission: null,
          message,
          trajectory,
          steps: trajectory.length,
          ...(extra === undefined ? {} : { extra }),
          ...(agentFiles === undefined ? {} : { agentFiles }),
        });

      if (sandbox.exposeGateway === undefined)
        return fail('agent_error', 'this sandbox cannot reach the gateway (its handle cannot expose it)');
      const preinstalled = options.binaryPath;
      const isInstalled = await sandbox.exec({
        argv: ['test', '-x', preinstalled ?? recipe.sandboxBinaryPath],
        timeoutMs: 10_000,
      });
      if (isInstalled.status === 'sandbox_gone') return fail('sandbox_gone', 'the sandbox went away');
      if (isInstalled.status !== 'ok')
        return fail('infra_error', `checking for ${recipe.name} ended with status ${isInstalled.status}`);
      if (preinstalled !== undefined && isInstalled.exitCode !== 0)
        return fail(
          'agent_error',
          `the image has no executable ${preinstalled} (the harness option binaryPath says ${recipe.name} is preinstalled there)`,
        );
      if (isInstalled.exitCode !== 0) {
        const failed = await installAgent(recipe, sandbox, cacheDir, clock.remainingMs);
        if (failed !== null) return fail(failed.outcome, failed.message);
      }
      // The wall time is the agent's: it counts from here, not from the copy of its files (ours,
      // bounded on its own), so that how fast we install never decides the agent's reward.
      const agentClock = new RunClock(limits);
      const { url } = await sandbox.exposeGateway();
      const settings: AgentRunSettings = {
        baseUrl: `${url}${model.basePath}`,
        apiKey: model.apiKey,
        model: model.model,
        workdir: task.workdir,
        instruction: task.instruction,
        homeDir: `/tmp/gym-agent-${recipe.name}`,
      };
      const { files: configFiles, env } = recipe.configure(settings);
      for (const file of configFiles)
        await sandbox.writeFile(file.path, Buffer.from(file.content), file.mode ?? 0o600);
      const argv = recipe.command(settings);
      if (preinstalled !== undefined) argv[0] = preinstalled;
      const result = await sandbox.exec({
        argv,
        cwd: task.workdir,
        env: { HOME: settings.homeDir, ...env },
        timeoutMs: Math.max(1000, agentClock.remainingMs),
        maxOutputBytes: 32 * 1024 * 1024,
      });
      const files: Record<string, string> = {};
      /** Result files the agent left unreadable (none, a directory, too big): its output, not a fault. */
      const unreadable: Record<string, string> = {};
      // Its output streams and result files are kept with the rollout (the runner bounds them).
      const agentFiles: AgentFile[] = [
        { name: 'stdout.txt', content: Buffer.from(result.stdout) },
        { name: 'stderr.txt', content: Buffer.from(result.stderr) },
      ].filter((file) => file.content.length > 0);
      for (const path of recipe.resultFiles?.(settings) ?? []) {
        // An agent that wrote no such file, or made it something we cannot read (a directory, a
        // file past the read limit), is its business; a daemon that cannot read it is not.
        files[path] = await sandbox.readFile(path).then(
          (content) => {
            agentFiles.push({ name: basename(path), content });
            return content.toString('utf8');
          },
          (error: unknown) => {
            if (isGymError(error) && AGENT_RESULT_FILE_ERRORS.has(error.code)) {
              unreadable[path] = `${error.code}: ${error.message}`;
              return '';
            }
            if (result.status === 'sandbox_gone') return '';
            throw error;
          },
        );
      }
      // The agent's own output may be anything: what its recipe cannot parse is the agent's error.
      let parsed: ParsedRun;
      try {
        parsed = recipe.parse(result.stdout, files);
      } catch (error) {
        parsed = {
          finalMessage: null,
          steps: [],
          error: `${recipe.name}'s output could not be read: ${(error as Error).message}`,
          events: [],
        };
      }
      const extra = {
        ...(Object.keys(unreadable).length === 0 ? {} : { unreadableResultFiles: unreadable }),
        events: parsed.events,
        stderrTail: result.stderr.slice(-4000),
        exitCode: result.exitCode,
      };
      if (result.status === 'sandbox_gone')
        return fail(
          'sandbox_gone',
          'the sandbox went away while the agent ran',
          parsed.steps,
          extra,
          agentFiles,
        );
      // The agent destroyed its own sandbox (its memory, or processes that resisted their kill).
      if (result.sandboxLost === true)
        return fail(
          'agent_error',
          `the agent lost its sandbox: ${result.reason ?? result.status}`,
          parsed.steps,
          extra,
          agentFiles,
        );
      if (result.status === 'timeout')
        return fail(
          'time_limit',
          `the agent ran past ${limits.wallTimeMs} ms and was killed`,
          parsed.steps,
          extra,
          agentFiles,
        );
      if (result.status !== 'ok' || result.exitCode !== 0 || parsed.error !== null) {
        return fail(
          'agent_error',
          parsed.error ??
            `${recipe.name} exited with ${result.exitCode} (${result.status}): ${result.stderr.slice(-1000)}`,
          parsed.steps,
          extra,
          agentFiles,
        );
      }
      return clock.finish({
        ...base,
        outcome: 'submitted',
        submission: parsed.finalMessage ?? '',
        trajectory: parsed.steps,
        steps: parsed.steps.length,
        extra,
        agentFiles,
      });
    },
  };
}
