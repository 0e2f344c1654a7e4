import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { GymClient } from '../../../client/client.ts';
import { GymError, isGymError } from '../../../core/errors.ts';
import type { Logger } from '../../../core/logger.ts';
import { createTracing, tracingConfigFromEnvironment } from '../../../core/tracing.ts';
import { configFromEnvironment, type DaemonConfig, loadConfig } from '../../../daemon/config.ts';
import { type RunningDaemon, startDaemon } from '../../../daemon/daemon.ts';
import { type LoadedEnvironment, loadEnvironment, readRows } from '../../../environments/environment.ts';
import { inferEnvironment } from '../../../environments/infer-format.ts';
import { type EvalProgress, runEval } from '../../../environments/runner/eval.ts';
import { exportTrajectories, formatsOf } from '../../../environments/runner/trajectory-files.ts';
import type { Harness } from '../../../harnesses/harness.ts';
import { HarnessRegistry } from '../../../harnesses/registry.ts';
import { type CommandOf, UsageError } from '../../command.ts';
import { connect, resolveStateDir } from '../../connect.ts';
import { readEnvYaml } from '../../env-yaml.ts';
import { commandLogger } from '../../log-output.ts';
import { formatDuration, remainingAtRate, startTicker } from '../../progress.ts';
import type { evalRun } from './definitions.ts';

interface PolicyConfig {
  baseUrl?: string;
  apiKey?: string;
  model?: string;
  /**
   * Ask the upstream for exact token ids and write training responses (`--token-ids`, or NeMo
   * Gym's `token_id_capture: {enabled: true}` in env.yaml).
   */
  tokenIds?: boolean;
}

/**
 * Whether env.yaml turns token capture on, as NeMo Gym reads `token_id_capture.enabled` (a
 * boolean, or its text as `${oc.env:...}` leaves it).
 */
function isTokenCaptureEnabled(fromFile: Record<string, unknown>): boolean {
  const block = fromFile.token_id_capture;
  if (typeof block !== 'object' || block === null) return false;
  const enabled = (block as Record<string, unknown>).enabled;
  if (enabled === true) return true;
  if (enabled === undefined || enabled === false || enabled === null) return false;
  if (typeof enabled === 'string' && /^(true|false)$/i.test(enabled)) return enabled.toLowerCase() === 'true';
  throw new GymError(
    'VALIDATION_FAILED',
    `env.yaml token_id_capture.enabled must be true or false, not ${JSON.stringify(enabled)}`,
  );
}

/**
 * The run's policy as each rollout's options: every rollout opens with this run's upstream, so
 * --policy-* and env.yaml apply on a running daemon too (its configured upstream stays the
 * default of other runs).
 */
export function policyRunOptions(policy: PolicyConfig): {
  upstream?: { baseUrl: string; apiKey?: string; model?: string };
  tokenIds?: true;
} {
  return {
    ...(policy.baseUrl === undefined
      ? {}
      : {
          upstream: {
            baseUrl: policy.baseUrl,
            ...(policy.apiKey ? { apiKey: policy.apiKey } : {}),
            ...(policy.model ? { model: policy.model } : {}),
          },
        }),
    ...(policy.tokenIds === true ? { tokenIds: true as const } : {}),
  };
}

/** Where a policy setting came from: a flag, the file given with --env-yaml, or a ./env.yaml only found. */
type PolicySource = 'flag' | 'env-yaml' | 'found';

/**
 * How far the operator vouched for each source. Flags and a file named with --env-yaml are the
 * operator's own choice (such a file may read the host environment, so it is trusted with the
 * keys in it anyway); a ./env.yaml that was only found in the current directory is whoever
 * wrote the folder's. The daemon's own upstream (GYM_CONFIG, GYM_POLICY_*) never mixes with
 * these: a run's URL replaces it whole, key included (evalDaemonConfig, the gateway's per-rollout
 * upstream).
 */
const TRUST: Readonly<Record<PolicySource, number>> = { found: 0, 'env-yaml': 1, flag: 1 };

const SOURCE_NAMES: Readonly<Record<PolicySource, (key: string) => string>> = {
  flag: (key) => `--${key.replaceAll('_', '-')}`,
  'env-yaml': (key) => `${key} in the file given with --env-yaml`,
  found: (key) => `${key} in ./env.yaml (only found in the current directory)`,
};

/**
 * NeMo Gym's env.yaml keys (policy_base_url, policy_api_key, policy_model_name; `${oc.env:VAR}`
 * resolved), then flags. Which file was read is said on stderr. A ./env.yaml that was only found
 * (not given with --env-yaml) may not read the host environment: a downloaded folder's env.yaml
 * could otherwise send `${oc.env:OPENAI_API_KEY}` to its own policy_base_url. For the same
 * reason a key never goes to a URL from a less trusted source than its own (a
 * --policy-api-key with a found file's policy_base_url is refused): mixing sources must not
 * get round the guard on found files.
 *
 * @throws GymError VALIDATION_FAILED when the key would go to a less trusted source's URL.
 */
export async function policyConfig(
  path: string | undefined,
  flags: PolicyConfig,
  env: Readonly<Record<string, string | undefined>>,
  stderr: NodeJS.WritableStream,
  cwd = process.cwd(),
): Promise<PolicyConfig> {
  const found = path === undefined && existsSync(join(cwd, 'env.yaml'));
  const candidate = path ?? (found ? join(cwd, 'env.yaml') : undefined);
  if (candidate !== undefined)
    stderr.write(
      found
        ? `gym: reading ${candidate} (found in the current directory; it may not use \${oc.env:...} unless given with --env-yaml)\n`
        : `gym: reading ${candidate} (--env-yaml)\n`,
    );
  const fromFile = candidate === undefined ? {} : await readEnvYaml(candidate, found ? null : env);
  const fileSource: PolicySource = found ? 'found' : 'env-yaml';
  const pick = (
    flag: string | undefined,
    key: string,
  ): { value: string; source: PolicySource } | undefined => {
    if (flag !== undefined) return { value: flag, source: 'flag' };
    const value = fromFile[key];
    return typeof value === 'string' ? { value, source: fileSource } : undefined;
  };
  const baseUrl = pick(flags.baseUrl, 'policy_base_url');
  const apiKey = pick(flags.apiKey, 'policy_api_key');
  const model = pick(flags.model, 'policy_model_name');
  if (baseUrl !== undefined && apiKey !== undefined && TRUST[apiKey.source] > TRUST[baseUrl.source])
    throw new GymError(
      'VALIDATION_FAILED',
      `the key of ${SOURCE_NAMES[apiKey.source]('policy_api_key')} would go to the URL of ${SOURCE_NAMES[baseUrl.source]('policy_base_url')}, which may be anyone's: give the URL too (--policy-base-url), or the file with --env-yaml if you trust it`,
      { details: { keySource: apiKey.source, urlSource: baseUrl.source } },
    );
  const config: PolicyConfig = {};
  // Asking for token ids sends nothing anywhere a key could leak to: any source may turn it on.
  if (flags.tokenIds === true || isTokenCaptureEnabled(fromFile)) config.tokenIds = true;
  if (baseUrl !== undefined) config.baseUrl = baseUrl.value;
  if (apiKey !== undefined) config.apiKey = apiKey.value;
  if (model !== undefined) config.model = model.value;
  return config;
}

/**
 * The configuration of the daemon `gym eval run` starts when none runs: the daemon's own (the
 * `GYM_CONFIG` file, then the `GYM_*` variables: its providers, gateway settings, limits), in a
 * state directory and namespace of its own and stable (`<state dir>/eval-daemon`, `gym-eval`: a
 * run killed halfway leaves its sandboxes in a store the next run, say with --resume, reconciles
 * and cleans up), on a loopback port (never the configured socket: a running daemon's), without
 * the configured warm pools (sized for other work) and destroying what it made when it stops.
 * The run's policy (env.yaml, flags) replaces the configured upstream whole (its key never goes
 * to another URL); the other gateway settings stay. Once, this daemon read no config file at all.
 */
/**
 * What the operator's configuration (GYM_CONFIG and its environment variables) says of the tasks
 * a run may take: `taskNetwork`, the `egress` cap and `maxResources`. Read here whether or not a
 * daemon runs (one started with the same configuration enforces `maxResources` and `egress` again
 * at each create and policy switch): a task over them is refused with the reason before any
 * sandbox starts.
 */
export async function operatorTaskSettings(
  env: Readonly<Record<string, string | undefined>>,
): Promise<Pick<DaemonConfig, 'taskNetwork' | 'egress' | 'maxResources'>> {
  const { configPath, ...fromEnvironment } = configFromEnvironment(env);
  const config = await loadConfig({
    ...(configPath === undefined ? {} : { configPath }),
    overrides: [fromEnvironment],
    env,
  });
  return { taskNetwork: config.taskNetwork, egress: config.egress, maxResources: config.maxResources };
}

export async function evalDaemonConfig(
  stateDir: string,
  policy: PolicyConfig,
  env: Readonly<Record<string, string | undefined>>,
): Promise<DaemonConfig> {
  const { configPath, ...fromEnvironment } = configFromEnvironment(env);
  const file = configPath === undefined ? {} : { configPath };
  const configured = await loadConfig({ ...file, overrides: [fromEnvironment], env });
  return loadConfig({
    ...file,
    env,
    overrides: [
      fromEnvironment,
      {
        stateDir: join(stateDir, 'eval-daemon'),
        namespace: 'gym-eval',
        listen: { host: '127.0.0.1', port: 0, socket: undefined },
        pools: {},
        destroyOnShutdown: true,
        logLevel: 'warn',
        // The run's collector (OTEL_EXPORTER_OTLP_*) traces the daemon it starts too, unless its config names one.
        ...(configured.telemetry.otlpEndpoint === undefined && tracingConfigFromEnvironment(env) !== undefined
          ? {
              telemetry: {
                ...configured.telemetry,
                otlpEndpoint: tracingConfigFromEnvironment(env)!.tracesEndpoint,
              },
            }
          : {}),
        ...(policy.baseUrl === undefined
          ? policy.tokenIds === true && configured.gateway.upstream !== undefined
            ? // The configured upstream, asked for token ids too.
              {
                gateway: {
                  ...configured.gateway,
                  upstream: { ...configured.gateway.upstream, requestTokenIds: true },
                },
              }
            : {}
          : {
              gateway: {
                ...configured.gateway,
                upstream: {
                  baseUrl: policy.baseUrl,
                  ...(policy.apiKey ? { apiKey: policy.apiKey } : {}),
                  ...(policy.model ? { model: policy.model } : {}),
                  ...(policy.tokenIds === true ? { requestTokenIds: true } : {}),
                },
              },
            }),
      },
    ],
  });
}

/**
 * The mean of the rewards written so far, as the run's `mean/reward` will be: over rewarded
 * rollouts only (a verifier error or a given-up infra error has none), a resumed run's earlier
 * ones included.
 */
export function runningMean(progress: Pick<EvalProgress, 'rewardSum' | 'rewarded'>): string {
  return progress.rewarded > 0 ? (progress.rewardSum / progress.rewarded).toFixed(3) : '-';
}

/**
 * Prints an eval's progress on stderr: on a terminal a bar redrawn every second with the time
 * elapsed and left (at the rate so far), elsewhere a line per finished rollout.
 */
function progressPrinter(stderr: NodeJS.WritableStream & { isTTY?: boolean }): {
  onProgress: (progress: EvalProgress) => void;
  stop: () => void;
} {
  const started = Date.now();
  let latest: EvalProgress | undefined;
  const timing = (elapsedMs: number, progress: EvalProgress) => {
    const left = remainingAtRate(elapsedMs, progress.done, progress.total);
    return `${formatDuration(elapsedMs)} elapsed${left === undefined || progress.done === progress.total ? '' : `, about ${formatDuration(left)} left`}`;
  };
  const bar = (elapsedMs: number) => {
    if (latest === undefined) return `starting rollouts, ${formatDuration(elapsedMs)} elapsed`;
    const progress = latest;
    const minutes = elapsedMs / 60_000;
    const rate = minutes > 0 ? (progress.done / minutes).toFixed(1) : '-';
    const mean = runningMean(progress);
    const width = 30;
    const filled = Math.round((progress.done / Math.max(1, progress.total)) * width);
    return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${progress.done}/${progress.total} rollouts  mean reward ${mean}  ${rate}/min  infra errors ${progress.infraErrors}  ${timing(elapsedMs, progress)}`;
  };
  const ticker = stderr.isTTY ? startTicker(stderr, bar, { now: Date.now }) : undefined;
  let isStopped = false;
  const stop = () => {
    if (isStopped) return;
    isStopped = true;
    ticker?.stop(latest === undefined ? undefined : bar(Date.now() - started));
  };
  return {
    onProgress(progress) {
      latest = progress;
      if (ticker !== undefined) {
        if (progress.done === progress.total) stop();
        return;
      }
      const elapsedMs = Date.now() - started;
      const minutes = elapsedMs / 60_000;
      const rate = minutes > 0 ? (progress.done / minutes).toFixed(1) : '-';
      const mean = runningMean(progress);
      const last = progress.last;
      stderr.write(
        `rollout ${progress.done}/${progress.total}${last ? ` task ${last.task} repeat ${last.rollout}: ${last.outcome === 'reward' ? `reward ${last.reward}` : last.outcome}` : ''} (mean ${mean}, ${rate}/min, ${timing(elapsedMs, progress)})\n`,
      );
    },
    stop,
  };
}

/** The options `gym eval run` and `gym eval serve` share: what to run, with which model, where. */
export type EvalSetupValues = Pick<
  ReturnType<ReturnType<typeof evalRun>['opts']>,
  | 'env'
  | 'input'
  | 'imageTemplate'
  | 'taskEnv'
  | 'limit'
  | 'providerOptions'
  | 'harness'
  | 'harnessOptions'
  | 'envYaml'
  | 'policyBaseUrl'
  | 'policyApiKey'
  | 'model'
  | 'tokenIds'
  | 'stateDir'
>;

/** What a run (or a server of rows) runs, and the daemon it runs on. */
export interface PreparedEval {
  environment: LoadedEnvironment;
  rows: Array<Record<string, unknown>>;
  harness: Harness;
  harnessName: string;
  policy: PolicyConfig;
  logger: Logger;
  client: GymClient;
  /** The daemon started for this command when none ran: the command stops it. */
  inProcess: RunningDaemon | undefined;
}

/**
 * The set-up of `gym eval run` and `gym eval serve`: the environment and its rows (`--input`, else
 * its own), the harness, the policy (env.yaml, flags), the daemon (the state directory's, else one
 * started in-process) and the task images the kind makes.
 */
export async function prepareEval(
  values: EvalSetupValues,
  env: Readonly<Record<string, string | undefined>>,
  stderr: NodeJS.WritableStream & { isTTY?: boolean },
): Promise<PreparedEval> {
  if (values.env === undefined && values.input === undefined)
    throw new UsageError('--env NAME or --input FILE is required (see `gym env ls`)');
  let rows = values.input === undefined ? undefined : await readRows(values.input);
  let environmentName = values.env;
  if (environmentName === undefined) {
    // No --env: the rows say what they are, or the run asks for --env (never a silent default).
    const inferred = inferEnvironment(rows!, values.input!);
    environmentName = inferred.environment;
    stderr.write(`gym: ${values.input} holds ${inferred.format}: running them as --env ${environmentName}\n`);
  }
  let environment = await loadEnvironment(environmentName);
  if (values.imageTemplate !== undefined)
    environment = {
      ...environment,
      options: { ...environment.options, imageTemplate: values.imageTemplate },
    };
  if (values.taskEnv !== undefined) {
    // Harbor's ${VAR}: the host variables the operator lets tasks read, besides the environment's own.
    const own = Array.isArray(environment.options.taskEnv) ? (environment.options.taskEnv as string[]) : [];
    environment = {
      ...environment,
      options: { ...environment.options, taskEnv: [...own, ...values.taskEnv] },
    };
  }
  // Harbor and Terminal-Bench tasks declare their network and resources: the operator's rule applies.
  if (environment.implementation.name === 'harbor')
    environment = {
      ...environment,
      options: { ...environment.options, ...(await operatorTaskSettings(env)) },
    };
  rows ??= await readRows(environment.dataPath);
  if (rows.length === 0)
    throw new UsageError(
      `environment ${environment.name} has no tasks of its own: give them with --input FILE`,
    );
  if (values.limit !== undefined) rows = rows.slice(0, values.limit);
  if (values.providerOptions !== undefined) {
    const added = jsonObjectOption('--provider-options', values.providerOptions);
    const own = (environment.sandbox.providerOptions ?? {}) as Record<string, unknown>;
    environment = {
      ...environment,
      sandbox: { ...environment.sandbox, providerOptions: { ...own, ...added } },
    };
  }
  const harnessName = values.harness ?? environment.defaultHarness;
  const harnessOptions =
    values.harnessOptions === undefined ? {} : jsonObjectOption('--harness-options', values.harnessOptions);
  const harness = await new HarnessRegistry().create(harnessName, harnessOptions);
  const policy = await policyConfig(
    values.envYaml,
    {
      ...(values.policyBaseUrl === undefined ? {} : { baseUrl: values.policyBaseUrl }),
      ...(values.policyApiKey === undefined ? {} : { apiKey: values.policyApiKey }),
      ...(values.model === undefined ? {} : { model: values.model }),
      ...(values.tokenIds === true ? { tokenIds: true } : {}),
    },
    env,
    stderr,
  );
  // Readable lines among the progress lines (JSON only with GYM_LOG_FORMAT=json).
  const logger = commandLogger(env, stderr);

  let client: GymClient;
  let inProcess: RunningDaemon | undefined;
  let hasUpstream = false;
  try {
    client = await connect(resolveStateDir(values.stateDir, env));
    await client.health();
    if (harness.needsModel && policy.baseUrl !== undefined)
      stderr.write(`gym: using the running daemon; this run's rollouts go to ${policy.baseUrl}\n`);
    // A rollout can ask for ids only of an upstream it names; lines say so if none were asked.
    if (harness.needsModel && policy.tokenIds === true && policy.baseUrl === undefined)
      stderr.write(
        "gym: token ids are asked of the running daemon's own upstream only if its configuration says requestTokenIds; give --policy-base-url to ask this run's\n",
      );
  } catch (error) {
    if (!isGymError(error, 'DAEMON_UNAVAILABLE')) throw error;
    const config = await evalDaemonConfig(resolveStateDir(values.stateDir, env), policy, env);
    hasUpstream = config.gateway.upstream !== undefined;
    inProcess = await startDaemon({ config, logger });
    client = new GymClient({ url: inProcess.address.url!, token: inProcess.token });
    stderr.write(`gym: no daemon running; started one in-process (${inProcess.address.url})\n`);
  }
  if (harness.needsModel && inProcess !== undefined && !hasUpstream) {
    await inProcess.stop({ destroy: true });
    throw new GymError(
      'VALIDATION_FAILED',
      `harness ${harnessName} needs a model: set policy_base_url in env.yaml, or --policy-base-url (or gateway.upstream in GYM_CONFIG)`,
    );
  }
  const { prepareImages } = environment.implementation;
  if (prepareImages !== undefined) {
    // The kind makes its rows' images on the daemon's provider (nothing for those it has). A
    // build says nothing until it ends (a Dockerfile's RUN can take minutes): tick meanwhile.
    const clear = stderr.isTTY ? '\r\x1b[2K' : '';
    let current = '';
    let ticker: ReturnType<typeof startTicker> | undefined;
    try {
      await prepareImages.call(environment.implementation, {
        client,
        environment,
        rows,
        logger,
        onStart: (reference, index, total) => {
          current = `${index + 1} of ${total}: ${reference}`;
          ticker ??= startTicker(
            stderr,
            (elapsedMs) => `preparing the task images (${current}), ${formatDuration(elapsedMs)} elapsed`,
          );
        },
        onImage: (reference, built, durationMs) => {
          if (built) stderr.write(`${clear}built ${reference} in ${(durationMs / 1000).toFixed(1)} s\n`);
        },
        onNotice: (message) => stderr.write(`${clear}gym: ${message}\n`),
      });
    } catch (error) {
      // A daemon started for this run would keep the process alive after the error is printed.
      await inProcess?.stop({ destroy: true });
      throw error;
    } finally {
      ticker?.stop();
    }
  }
  return { environment, rows, harness, harnessName, policy, logger, client, inProcess };
}

export const evalRunCommand: CommandOf<typeof evalRun> = {
  async run({ options: values, env, stdout, stderr }) {
    const prepared = await prepareEval(values, env, stderr);
    const { environment, rows, harness, harnessName, policy, logger, client, inProcess } = prepared;
    const stop = () => {
      void inProcess?.stop({ destroy: true });
    };
    process.once('SIGINT', stop);
    const progress = progressPrinter(stderr);
    // Off unless OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set (docs/tracing.md).
    const tracing = await createTracing(tracingConfigFromEnvironment(env), 'gym-eval');
    try {
      const summary = await runEval({
        tracing,
        client,
        environment,
        rows,
        harness,
        harnessName,
        modelName: policy.model ?? values.model ?? 'policy',
        numRepeats: values.numRepeats,
        concurrency: values.concurrency,
        output: values.output,
        resume: values.resume === true,
        maxInfraAttempts: values.maxInfraAttempts,
        usePools: values.pool === true,
        forkSetup: values.forkSetup === true,
        ...policyRunOptions(policy),
        logger,
        onProgress: progress.onProgress,
      });
      progress.stop();
      if (values.trajectories !== undefined) {
        const exported = await exportTrajectories(summary.paths.rollouts, formatsOf(values.trajectories));
        for (const path of Object.values(exported.files)) stdout.write(`trajectories ${path}\n`);
      }
      const key = (name: string) =>
        summary.metrics[name] === undefined ? '-' : summary.metrics[name]!.toFixed(2);
      stdout.write(
        `${summary.rollouts} rollouts in ${(summary.durationMs / 1000).toFixed(1)} s, ${summary.failures} failed for good\n`,
      );
      // pass@k only where every reward is 0 or 1 (metrics.ts): for other rewards there is none to print.
      const passes = ['pass@1', 'pass@1[avg-of-1]']
        .filter((name) => summary.metrics[`${name}/reward`] !== undefined)
        .map((name) => `  ${name} ${key(`${name}/reward`)}%`)
        .join('');
      stdout.write(`mean/reward ${key('mean/reward')}${passes}\n`);
      stdout.write(
        `rollouts ${summary.paths.rollouts}\nmetrics  ${summary.paths.metrics}\nfailures ${summary.paths.failures}\n`,
      );
      return summary.failures > 0 ? 1 : 0;
    } finally {
      progress.stop();
      process.removeListener('SIGINT', stop);
      await inProcess?.stop({ destroy: true });
      const traced = await tracing.shutdown();
      if (traced.dropped > 0)
        stderr.write(`gym: ${traced.dropped} of ${traced.ended} spans never reached the trace collector\n`);
    }
  },
};

/** A flag whose value must be a JSON object. */
function jsonObjectOption(flag: string, text: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new UsageError(`${flag} is not JSON: ${(error as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new UsageError(`${flag} must be a JSON object`);
  return value as Record<string, unknown>;
}
