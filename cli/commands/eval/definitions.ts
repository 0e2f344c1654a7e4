/**
 * The parsers of `gym eval` and its verbs: name, arguments, options and help. The bodies
 * import their option types from here; `index.ts` pairs each parser with its body.
 */
import { Command, InvalidArgumentError, Option } from '@commander-js/extra-typings';
import { integer } from '../../arguments.ts';
import { jsonOption, stateDirOption } from '../../options.ts';

/** The model upstream of gym eval run and gym eval serve, by flag or (NeMo Gym's keys) by env.yaml. */
const modelOption = () =>
  new Option('--model <NAME>', 'model name sent upstream (env.yaml: policy_model_name)');
const policyBaseUrlOption = () =>
  new Option(
    '--model-url, --policy-base-url <URL>',
    'model upstream, OpenAI-compatible (env.yaml: policy_base_url)',
  );
const policyApiKeyOption = () =>
  new Option(
    '--model-api-key, --policy-api-key <KEY>',
    "model upstream's API key (env.yaml: policy_api_key)",
  );

export const evalRun = () =>
  new Command('run')
    .summary(
      'run an environment: every task (x repeats) through sandbox, harness and verifier; rollouts and metrics to files',
    )
    .description(
      `Run an environment: every task (x repeats) through sandbox, harness and verifier.

Uses the daemon of the state directory when one runs, else starts one in-process with the configuration of GYM_CONFIG (and stops it after). Writes FILE.jsonl (one line per finished rollout), FILE_materialized_inputs.jsonl, FILE_failures.jsonl and FILE_aggregate_metrics.json. --resume skips finished rollouts. --pool serves each image several rollouts share from a warm pool sized to the concurrency (off by default: on a 2-core host it costs throughput; it pays where creates are slow). --fork-setup runs each task's setup command once, snapshots that sandbox and forks the task's repeats from it (docs/eval.md). NeMo Gym's flag names work too: -i/--input, -o/--output, --model-url, --model-api-key.`,
    )
    .option('--env <NAME>', 'environment (see gym env ls); without it, told from the --input rows')
    .option(
      '-i, --input <FILE>',
      "task rows (JSONL), or a Harbor task directory or folder of them, instead of the environment's own",
    )
    .requiredOption('-o, --output <FILE>', 'rollouts file (FILE.jsonl); the other files go next to it')
    .option('--harness <NAME>', "agent harness (default: the environment's)")
    .option(
      '--harness-options <JSON>',
      'the harness\'s options as a JSON object, e.g. {"binaryPath": "/usr/local/bin/mini"} for an agent the image has',
    )
    .option(
      '--provider-options <JSON>',
      'providerOptions added to every agent sandbox\'s spec as a JSON object, e.g. {"readOnlyBinds": [{"hostPath": "...", "path": "/opt/gym-agents/mini-swe-agent"}]} to give Docker sandboxes an agent runtime read-only (docs/harnesses.md)',
    )
    .addOption(new Option('--limit <N>', 'run only the first N tasks').argParser(integer(1)))
    .addOption(new Option('--num-repeats <N>', 'rollouts per task').argParser(integer(1)).default(1))
    .addOption(new Option('--concurrency <N>', 'rollouts at once').argParser(integer(1)).default(4))
    .option('--resume', 'skip rollouts already in the output file')
    .addOption(
      new Option('--max-infra-attempts <N>', 'tries of a rollout that hits an infrastructure error')
        .argParser(integer(1))
        .default(3),
    )
    .option('--pool', 'serve shared images from warm pools')
    .option(
      '--fork-setup',
      "run each task's setup once and fork its repeats from it (snapshot and fork; with --pool, the pools serve the setup sandboxes)",
    )
    .addOption(modelOption())
    .addOption(policyBaseUrlOption())
    .addOption(policyApiKeyOption())
    .option(
      '--token-ids',
      "ask the model upstream (vLLM 0.10.2 or later) for each call's exact token ids and logprobs, and write each rollout's training response in its line (env.yaml: token_id_capture: {enabled: true})",
    )
    .option(
      '--env-yaml <FILE>',
      'NeMo Gym env.yaml with the policy_* keys (default: ./env.yaml if present, which may not use ${oc.env:...})',
    )
    .option(
      '--image-template <TEMPLATE>',
      'swebench: image name per row, e.g. swebench/sweb.eval.{arch}.{instance_id_1776}:latest',
    )
    .addOption(
      new Option(
        '--task-env <VAR>',
        "harbor: a host variable task.toml's ${VAR} may read (repeat for more; none by default)",
      ).argParser((name: string, previous: string[] = []) => {
        if (!/^[A-Za-z_]\w*$/.test(name)) throw new InvalidArgumentError(`${name} is not a variable name`);
        return [...previous, name];
      }),
    )
    .addOption(
      new Option(
        '--trajectories <FORMAT>',
        'also write each trajectory: ng (FILE_ng_trajectory.jsonl), atif (FILE_atif.jsonl), both',
      ).choices(['ng', 'atif', 'both'] as const),
    )
    .addOption(stateDirOption());

export const evalServe = () =>
  new Command('serve')
    .summary(
      "serve NeMo Gym's agent-server contract: POST /run runs one row as gym eval run does and answers its line",
    )
    .description(
      `Serve NeMo Gym's agent-server contract for rollout collection, so NeMo Gym (and the trainers that drive it) can send rows here: POST /run runs one row as gym eval run runs it (sandbox, harness, verifier, infra retries) and answers with the line gym eval run writes; POST /aggregate_metrics answers NeMo Gym's aggregate metrics of the lines sent back. At most --concurrency rows run and --queue wait; past that a row is refused with 429 and Retry-After. A row sent again with its Idempotency-Key gets the first answer and never runs twice. Every route but /healthz needs the daemon's token as a bearer token, unless --no-token (loopback only: NeMo Gym's client sends none). Uses the daemon of the state directory when one runs, else starts one in-process. Runs until interrupted (docs/integrations/nemo-gym-trainer.md).`,
    )
    .option('--env <NAME>', 'environment (see gym env ls); without it, told from the --input rows')
    .option(
      '-i, --input <FILE>',
      "the task rows the server expects (JSONL): their images are prepared and, with --pool, pooled; default: the environment's own",
    )
    .option('--harness <NAME>', "agent harness (default: the environment's)")
    .option('--harness-options <JSON>', "the harness's options as a JSON object")
    .option(
      '--provider-options <JSON>',
      "providerOptions added to every agent sandbox's spec as a JSON object",
    )
    .addOption(new Option('--limit <N>', 'expect only the first N tasks').argParser(integer(1)))
    .addOption(new Option('--concurrency <N>', 'rows run at once').argParser(integer(1)).default(8))
    .addOption(
      new Option('--queue <N>', 'rows that may wait for a turn; past it a row is refused with 429')
        .argParser(integer(0))
        .default(256),
    )
    .addOption(
      new Option('--max-infra-attempts <N>', 'tries of a row that hits an infrastructure error')
        .argParser(integer(1))
        .default(3),
    )
    .option('--pool', 'serve shared images from warm pools sized to the concurrency')
    .addOption(
      new Option('--num-repeats <N>', 'repeats of each row the trainer will send (sizes the pools)')
        .argParser(integer(1))
        .default(1),
    )
    .addOption(modelOption())
    .addOption(policyBaseUrlOption())
    .addOption(policyApiKeyOption())
    .option(
      '--token-ids',
      "answer each row's training response with exact token ids (as gym eval run --token-ids)",
    )
    .option('--env-yaml <FILE>', 'NeMo Gym env.yaml with the policy_* keys (default: ./env.yaml if present)')
    .option('--image-template <TEMPLATE>', 'swebench: image name per row')
    .addOption(
      new Option(
        '--task-env <VAR>',
        "harbor: a host variable task.toml's ${VAR} may read (repeat for more)",
      ).argParser((name: string, previous: string[] = []) => {
        if (!/^[A-Za-z_]\w*$/.test(name)) throw new InvalidArgumentError(`${name} is not a variable name`);
        return [...previous, name];
      }),
    )
    .option('--host <ADDRESS>', 'address to listen on', '127.0.0.1')
    .addOption(
      new Option('--port <PORT>', 'TCP port (0: any free port)').argParser(integer(0, 65_535)).default(0),
    )
    .option(
      '--no-token',
      "take rows without the daemon's token (loopback addresses only: NeMo Gym's client sends none)",
    )
    .option(
      '-o, --output <FILE>',
      "where rollouts' network logs go (FILE_network_logs/); default: in the state directory",
    )
    .addOption(stateDirOption());

export const evalReverify = () =>
  new Command('reverify')
    .summary('recompute rewards from stored rollouts (their patches or answers), running no agent')
    .description(
      `Recompute rewards from stored rollouts (their patches or answers), running no agent. Needs a running daemon for SWE environments (grading runs in fresh sandboxes).`,
    )
    .requiredOption('-i, --input <FILE>', "stored rollouts (JSONL), ours or NeMo Gym's")
    .requiredOption('-o, --output <FILE>', 'where the reverified rollouts go')
    .requiredOption('--env <NAME>', 'the environment they came from')
    .option(
      '--inputs <FILE>',
      'the rows the rollouts were run from (materialized inputs or task rows), joined by task and rollout index, else by prompt; default: FILE_materialized_inputs.jsonl beside them, if any',
    )
    .addOption(stateDirOption());

export const evalProfile = () =>
  new Command('profile')
    .summary(
      "per-task stats of stored rollouts, ours or NeMo Gym's (FILE_reward_profiling.jsonl, FILE_agent_metrics.json)",
    )
    .requiredOption('-i, --input <FILE>', 'stored rollouts (JSONL)')
    .option(
      '--materialized-inputs <FILE>',
      'the inputs the rollouts were run from (default: FILE_materialized_inputs.jsonl beside them, if any)',
    )
    .addOption(jsonOption());

export const evalExport = () =>
  new Command('export')
    .summary(
      "write stored rollouts' trajectories (ours or NeMo Gym's) as NeMo Gym ng_trajectory and/or Harbor ATIF",
    )
    .argument('<results>', 'stored rollouts (JSONL)')
    .addOption(
      new Option('--format <FORMAT>', 'ng, atif or both')
        .choices(['ng', 'atif', 'both'] as const)
        .default('both' as const),
    )
    .option('--output-dir <DIR>', 'where the files go (default: beside the rollouts)')
    .addOption(jsonOption());

export const evalView = () =>
  new Command('view')
    .summary('serve a local page of stored rollouts: metrics, a filterable table, each rollout step by step')
    .description(
      `Serve a page of stored rollouts, ours or NeMo Gym's, on 127.0.0.1: the run's metrics and reward distribution, a table filterable by task, outcome and reward, each rollout step by step, and a run in flight as its file grows. Prints a login URL that works once (it sets a session cookie). Runs until interrupted.`,
    )
    .argument(
      '<RESULTS>',
      'the rollouts file (FILE.jsonl); FILE_failures.jsonl and FILE_aggregate_metrics.json are read beside it',
    )
    .addOption(
      new Option('--port <PORT>', 'TCP port on 127.0.0.1 (0: any free port)')
        .argParser(integer(0, 65_535))
        .default(0),
    );
