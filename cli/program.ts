/**
 * The `gym` command line: every command, its arguments and options, their help, and how a call
 * reaches a command body. Commands are nouns and verbs (`gym image build`); each body lives in
 * `commands/<noun>/<verb>.ts` and is loaded only when it runs, so `gym daemon start` does not
 * load what other commands need (a provider SDK, say) and `--help` loads no body at all.
 *
 * Exit codes: 0 ok, 1 the command failed (an error prints its code and message, never a stack),
 * 2 a usage error (unknown command or option, a missing or malformed argument, a number out of
 * range); a command may return its own (`gym sandbox exec` passes the command's through).
 */
import {
  Command,
  CommanderError,
  type CommandUnknownOpts,
  Help,
  InvalidArgumentError,
  Option,
  type OptionValues,
} from '@commander-js/extra-typings';
import { pino } from 'pino';
import { isGymError } from '../core/errors.ts';
import type { Logger } from '../core/logger.ts';
import { VERSION } from '../core/version.ts';
import { integer, keyValue, positiveNumber } from './arguments.ts';
import { type CommandContext, type CommandIo, UsageError } from './command.ts';

export const EXIT_OK = 0;
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;

/** Every command that talks to a daemon finds it through the state directory. */
const stateDirOption = () =>
  new Option(
    '--state-dir <DIR>',
    "the daemon's state directory (default: GYM_STATE_DIR, else the stateDir of GYM_CONFIG, else ~/.local/state/gym)",
  );
const jsonOption = () => new Option('--json', 'print JSON instead of text');
const labelOption = (what: string) =>
  new Option('--label <KEY=VALUE>', `${what} (repeatable)`).argParser(keyValue);
const envOption = (what: string) =>
  new Option('--env <KEY=VALUE>', `${what} (repeatable)`).argParser(keyValue);
const cpusOption = () => new Option('--cpus <N>', 'CPU limit, fractions allowed').argParser(positiveNumber);
const memoryOption = () => new Option('--memory <MIB>', 'memory limit in MiB').argParser(integer(1));
const pidsOption = () => new Option('--pids <N>', 'process limit').argParser(integer(1));

// ---- daemon ---------------------------------------------------------------------------------

export const daemonStart = () =>
  new Command('start')
    .summary('run the daemon in the foreground (logs to stderr)')
    .description(
      `Run the daemon in the foreground, logging to stderr.

Configuration comes from the YAML file (--config or GYM_CONFIG), then environment variables (GYM_STATE_DIR, GYM_HOST, GYM_PORT, GYM_SOCKET, GYM_NAMESPACE, GYM_LOG_LEVEL), then these flags. SIGTERM or SIGINT drains in-flight requests and stops; sandboxes are kept for the next start unless --destroy-on-shutdown.`,
    )
    .option('--config <FILE>', 'YAML configuration file')
    .addOption(stateDirOption())
    .option('--host <HOST>', 'TCP address to listen on')
    .addOption(new Option('--port <PORT>', 'TCP port (0: any free port)').argParser(integer(0, 65_535)))
    .option('--socket <PATH>', 'listen on a unix socket instead of TCP')
    .option('--namespace <NAME>', "label namespace of this daemon's sandboxes")
    .option('--destroy-on-shutdown', 'destroy every sandbox when stopping');

export const daemonStatus = () =>
  new Command('status')
    .summary("show whether the daemon runs, where, and its providers' health")
    .addOption(stateDirOption())
    .addOption(jsonOption());

export const daemonUi = () =>
  new Command('ui')
    .summary("print a login link to the daemon's page of sandboxes and pools (/ui); it works once, for 60 s")
    .addOption(stateDirOption());

export const daemonStop = () =>
  new Command('stop')
    .summary('stop the daemon gracefully (it drains requests; sandboxes are kept)')
    .addOption(stateDirOption())
    .addOption(
      new Option('--timeout <SECONDS>', 'how long to wait for it to stop')
        .argParser(positiveNumber)
        .default(60),
    );

// ---- sandbox --------------------------------------------------------------------------------

export const sandboxCreate = () =>
  new Command('create')
    .summary('create a sandbox and print its id')
    .description(
      `Create a sandbox (from an image, or taken from a warm pool) and print its id.

  gym sandbox create --image IMAGE [--cpus N] [--memory MIB] ... [--json]
  gym sandbox create --pool NAME [--ttl SECONDS] [--label KEY=VALUE]... [--env KEY=VALUE]...`,
    )
    .option('--image <IMAGE>', 'image to run')
    .option('--pool <NAME>', 'take a warm sandbox from this pool instead')
    .addOption(cpusOption())
    .addOption(memoryOption())
    .addOption(pidsOption())
    .addOption(new Option('--ttl <SECONDS>', 'lease length').argParser(integer(1)))
    .addOption(labelOption('label the sandbox'))
    .addOption(envOption('environment variable in the sandbox'))
    .option('--workdir <DIR>', 'working directory')
    .option('--user <USER>', 'user the commands run as')
    .addOption(new Option('--network <MODE>', 'network mode').choices(['none', 'host', 'bridge'] as const))
    .option('--provider <NAME>', 'provider to create it with')
    .addOption(stateDirOption())
    .addOption(jsonOption());

export const sandboxLs = () =>
  new Command('ls')
    .summary('list sandboxes')
    .addOption(labelOption('only sandboxes with this label'))
    .option('--provider <NAME>', "only this provider's sandboxes")
    .addOption(stateDirOption())
    .addOption(jsonOption());

export const sandboxExec = () =>
  new Command('exec')
    .summary("run a command in a sandbox; its exit code becomes gym's")
    .description(
      `Run a command in a sandbox. Everything after -- is the command, options included (gym sandbox exec ID -- ls --help runs ls --help). Output streams as it comes. Exit code: the command's; 124 on timeout; 125 if the sandbox went away.`,
    )
    .argument('<id>', 'sandbox id')
    .argument('<command...>', 'the command and its arguments, after --')
    .option('--session <NAME>', 'run in a named session (a shell kept alive between commands)')
    .addOption(
      new Option('--timeout <MS>', 'kill the command after this many milliseconds').argParser(integer(1)),
    )
    .option('--cwd <DIR>', 'working directory')
    .addOption(envOption('environment variable for the command'))
    .addOption(stateDirOption())
    .addOption(jsonOption());

export const sandboxCp = () =>
  new Command('cp')
    .summary('copy files or directories between this machine and a sandbox')
    .description(
      `Copy files or directories between this machine and a sandbox. One side is ID:/absolute/path. A directory is copied whole (as a tar stream); a file keeps its mode.
  gym sandbox cp ./repo sbx-abc:/work/repo
  gym sandbox cp sbx-abc:/work/repo/result.json .`,
    )
    .argument('<source>', 'a local path or ID:/path')
    .argument('<target>', 'a local path or ID:/path')
    .addOption(stateDirOption());

export const sandboxRm = () =>
  new Command('rm')
    .summary('destroy sandboxes (idempotent)')
    .argument('[ids...]', 'sandbox ids')
    .option('--all', 'destroy every sandbox of the daemon')
    .addOption(stateDirOption());

export const sandboxShell = () =>
  new Command('shell')
    .summary('an interactive line shell in a sandbox')
    .description(
      `An interactive line shell in a sandbox. Each line runs through a session (about a millisecond a command). Each line is its own command, as with exec; \`cd DIR\` is remembered by the shell for the lines that follow. Exit with Ctrl-D or \`exit\`.`,
    )
    .argument('<id>', 'sandbox id')
    .addOption(stateDirOption());

// ---- pool -----------------------------------------------------------------------------------

export const poolCreate = () =>
  new Command('create')
    .summary('define (or redefine) a warm pool; it fills in the background')
    .argument('<name>', 'pool name')
    .requiredOption('--image <IMAGE>', "the pool's image")
    .addOption(new Option('--min-idle <N>', 'idle sandboxes to keep ready').argParser(integer(0)))
    .addOption(new Option('--max-idle <N>', 'most idle sandboxes kept').argParser(integer(0)))
    .addOption(new Option('--max-total <N>', 'most sandboxes, idle and leased').argParser(integer(1)))
    .addOption(
      new Option('--idle-ttl <SECONDS>', 'replace idle sandboxes older than this').argParser(integer(1)),
    )
    .addOption(new Option('--refill-concurrency <N>', 'creates at once while filling').argParser(integer(1)))
    .addOption(cpusOption())
    .addOption(memoryOption())
    .addOption(pidsOption())
    .addOption(
      new Option('--ttl <SECONDS>', 'lease length of a sandbox taken from the pool').argParser(integer(1)),
    )
    .addOption(envOption('environment variable in the sandboxes'))
    .addOption(labelOption('label the sandboxes'))
    .option('--provider <NAME>', 'provider to create them with')
    .addOption(stateDirOption())
    .addOption(jsonOption());

export const poolLs = () =>
  new Command('ls')
    .summary('list pools with idle, leased and creating counts, hits, misses and acquire latency')
    .addOption(stateDirOption())
    .addOption(jsonOption());

export const poolRm = () =>
  new Command('rm')
    .summary('drain and delete pools (idle sandboxes destroyed; leased ones keep their leases)')
    .argument('<names...>', 'pool names')
    .addOption(stateDirOption());

// ---- image ----------------------------------------------------------------------------------

export const imageBuild = () =>
  new Command('build')
    .summary('build the local base images, or an image set, on the daemon provider (no registry needed)')
    .description(
      `Build the named local base images (default: all) or image sets (swe-mini: every task image) on the daemon's provider; without a running daemon, on one started in-process. An image whose recipe hash the provider has is not rebuilt unless --force is given (definitions only). \`gym image ls\` lists what exists.`,
    )
    .argument(
      '[names...]',
      'base images (busybox, debian-base) or image sets (swe-mini) to build (default: all base images)',
    )
    .option('--force', 'rebuild even when the recipe hash exists')
    .option('--provider <NAME>', "the daemon's provider to build on (default: its default)")
    .addOption(stateDirOption())
    .addOption(jsonOption());

export const imageLs = () =>
  new Command('ls')
    .summary('list the images gym built on the daemon provider')
    .option('--provider <NAME>', "the daemon's provider (default: its default)")
    .addOption(stateDirOption())
    .addOption(jsonOption());

// ---- env ------------------------------------------------------------------------------------

export const envLs = () =>
  new Command('ls').summary('list the built-in environments').addOption(jsonOption());

export const envShow = () =>
  new Command('show')
    .summary("show an environment's definition and tasks")
    .argument('<name>', 'environment name (see gym env ls)')
    .addOption(jsonOption());

// ---- eval -----------------------------------------------------------------------------------

export const evalRun = () =>
  new Command('run')
    .summary(
      'run an environment: every task (x repeats) through sandbox, harness and verifier; rollouts and metrics to files',
    )
    .description(
      `Run an environment: every task (x repeats) through sandbox, harness and verifier.

Uses the daemon of the state directory when one runs, else starts one in-process with the configuration of GYM_CONFIG (and stops it after). Writes FILE.jsonl (one line per finished rollout), FILE_materialized_inputs.jsonl, FILE_failures.jsonl and FILE_aggregate_metrics.json. --resume skips finished rollouts. --pool serves each image several rollouts share from a warm pool sized to the concurrency (off by default: on a 2-core host it costs throughput; it pays where creates are slow). NeMo Gym's flag names work too: -i/--input, -o/--output, --model-url, --model-api-key.`,
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
    .option('--model <NAME>', 'model name sent upstream (env.yaml: policy_model_name)')
    .option(
      '--model-url, --policy-base-url <URL>',
      'model upstream, OpenAI-compatible (env.yaml: policy_base_url)',
    )
    .option('--model-api-key, --policy-api-key <KEY>', "model upstream's API key (env.yaml: policy_api_key)")
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

// ---- dev and doctor -------------------------------------------------------------------------

export const devModelServer = () =>
  new Command('model-server')
    .summary('serve a scripted model (Chat Completions, Responses, Anthropic Messages) for tests and demos')
    .description(
      `Serve a scripted model, answering from the script, streaming or not, with tool calls. Point the daemon at it with GYM_POLICY_BASE_URL=http://127.0.0.1:PORT/v1. Runs until interrupted.`,
    )
    .requiredOption('--script <FILE>', 'the script (.json or .yaml)')
    .addOption(
      new Option('--port <PORT>', 'TCP port (0: any free port)').argParser(integer(0, 65_535)).default(8000),
    );

export const doctor = () =>
  new Command('doctor')
    .summary(
      "check Node, each configured provider's host needs, the daemon, its providers and their images; say how to fix what fails",
    )
    .description(
      `Check what gym needs on this host and say how to fix what fails: Node, debootstrap and busybox (to build images), what each provider the daemon runs (else each of the configuration, GYM_CONFIG) needs of this host (Docker: the exec helper .tools/gym-exec, and nsenter and root, or CAP_SYS_ADMIN and CAP_SYS_PTRACE, for the model gateway relay; Kubernetes, Apptainer, Enroot: the static relay .tools/gym-relay), then, through the daemon (one started in-process with the configured providers when none runs), its providers, the base images and the environments' images on the default provider.

Exit code 1 when a required check fails; warnings (no daemon running yet, task images gym eval run builds on first use) do not count.`,
    )
    .addOption(stateDirOption())
    .addOption(jsonOption());

// ---- the tree -------------------------------------------------------------------------------

/** A command body as a module exports it; its option and argument types are checked here. */
interface Body<Options, Args extends unknown[]> {
  run(context: CommandContext<Options, Args>): Promise<number>;
}

export interface Streams {
  stdout: NodeJS.WritableStream & { isTTY?: boolean };
  stderr: NodeJS.WritableStream & { isTTY?: boolean };
  env: Readonly<Record<string, string | undefined>>;
}

/** Holds the exit code the command body returned. */
export interface Outcome {
  exitCode: number;
}

/**
 * Lists the program's commands as `noun verb` with their summaries, where commander would list
 * only the nouns; a noun's own help (`gym eval --help`) lists its verbs as usual.
 */
const rootHelp: Partial<Help> = {
  visibleCommands(command) {
    return command.commands.flatMap((noun) =>
      noun.commands.length === 0 ? [noun] : noun.commands.filter((verb) => verb.name() !== 'help'),
    );
  },
  subcommandTerm(command) {
    const noun = command.parent?.parent ? command.parent.name() : '';
    return `${noun} ${new Help().subcommandTerm(command)}`.trim();
  },
};

/** Builds a fresh program (commander keeps parse state in its commands, so one per run). */
export function buildProgram(streams: Streams, outcome: Outcome): CommandUnknownOpts {
  let logger: Logger | undefined;
  const io = (): CommandIo => {
    logger ??= pino({ level: streams.env.GYM_LOG_LEVEL ?? 'info' }, pino.destination(2)) as unknown as Logger;
    return { ...streams, logger };
  };
  const configure = <C extends CommandUnknownOpts>(command: C): C => {
    command
      .exitOverride()
      .configureOutput({
        writeOut: (text) => streams.stdout.write(text),
        writeErr: (text) => streams.stderr.write(text),
        outputError: (text, write) => write(`gym: ${text.replace(/^error: /, '')}`),
      })
      .showHelpAfterError(`(see \`${commandPath(command)} --help\`)`);
    return command;
  };
  /** Makes `command` load its body when it runs (never before) and run it with parsed values. */
  const runs = <Args extends unknown[], Options extends OptionValues>(
    command: Command<Args, Options, OptionValues>,
    load: () => Promise<Body<Options, Args>>,
  ) =>
    command.action(async () => {
      const body = await load();
      outcome.exitCode = await body.run({ ...io(), options: command.opts(), args: command.processedArgs });
    });
  const noun = (name: string, summary: string, verbs: CommandUnknownOpts[]) => {
    const group = new Command(name).summary(summary).description(`${summary}.`);
    for (const verb of verbs) group.addCommand(verb);
    return group;
  };

  const program = new Command('gym')
    .description(
      'Sandboxes for agent environments: the daemon, sandboxes, pools, images, environments and evals.',
    )
    .usage('<command> [options]')
    .version(VERSION, '--version', 'print the version')
    // --version is gym's only before a command: `gym sandbox exec ID ls --version` is not gym's.
    .enablePositionalOptions()
    .configureHelp(rootHelp);
  program.addCommand(
    noun('daemon', 'run, inspect and stop the daemon', [
      runs(daemonStart(), () =>
        import('./commands/daemon/start.ts').then((module) => module.daemonStartCommand),
      ),
      runs(daemonStatus(), () =>
        import('./commands/daemon/status.ts').then((module) => module.daemonStatusCommand),
      ),
      runs(daemonStop(), () =>
        import('./commands/daemon/stop.ts').then((module) => module.daemonStopCommand),
      ),
      runs(daemonUi(), () => import('./commands/daemon/ui.ts').then((module) => module.daemonUiCommand)),
    ]),
  );
  program.addCommand(
    noun('sandbox', 'create sandboxes, run commands in them, copy files, remove them', [
      runs(sandboxCreate(), () =>
        import('./commands/sandbox/create.ts').then((module) => module.sandboxCreateCommand),
      ),
      runs(sandboxLs(), () => import('./commands/sandbox/ls.ts').then((module) => module.sandboxLsCommand)),
      runs(sandboxExec(), () =>
        import('./commands/sandbox/exec.ts').then((module) => module.sandboxExecCommand),
      ),
      runs(sandboxCp(), () => import('./commands/sandbox/cp.ts').then((module) => module.sandboxCpCommand)),
      runs(sandboxRm(), () => import('./commands/sandbox/rm.ts').then((module) => module.sandboxRmCommand)),
      runs(sandboxShell(), () =>
        import('./commands/sandbox/shell.ts').then((module) => module.sandboxShellCommand),
      ),
    ]),
  );
  program.addCommand(
    noun('pool', 'warm pools of ready sandboxes', [
      runs(poolCreate(), () =>
        import('./commands/pool/create.ts').then((module) => module.poolCreateCommand),
      ),
      runs(poolLs(), () => import('./commands/pool/ls.ts').then((module) => module.poolLsCommand)),
      runs(poolRm(), () => import('./commands/pool/rm.ts').then((module) => module.poolRmCommand)),
    ]),
  );
  program.addCommand(
    noun('image', 'the local base images', [
      runs(imageBuild(), () =>
        import('./commands/image/build.ts').then((module) => module.imageBuildCommand),
      ),
      runs(imageLs(), () => import('./commands/image/ls.ts').then((module) => module.imageLsCommand)),
    ]),
  );
  program.addCommand(
    noun('env', 'the built-in environments', [
      runs(envLs(), () => import('./commands/env/ls.ts').then((module) => module.envLsCommand)),
      runs(envShow(), () => import('./commands/env/show.ts').then((module) => module.envShowCommand)),
    ]),
  );
  program.addCommand(
    noun('eval', 'run environments through harnesses and verifiers; rescore and profile rollouts', [
      runs(evalRun(), () => import('./commands/eval/run.ts').then((module) => module.evalRunCommand)),
      runs(evalReverify(), () =>
        import('./commands/eval/reverify.ts').then((module) => module.evalReverifyCommand),
      ),
      runs(evalProfile(), () =>
        import('./commands/eval/profile.ts').then((module) => module.evalProfileCommand),
      ),
      runs(evalExport(), () =>
        import('./commands/eval/export.ts').then((module) => module.evalExportCommand),
      ),
      runs(evalView(), () => import('./commands/eval/view.ts').then((module) => module.evalViewCommand)),
    ]),
  );
  program.addCommand(
    noun('dev', 'tools for tests and demos', [
      runs(devModelServer(), () =>
        import('./commands/dev/model-server.ts').then((module) => module.devModelServerCommand),
      ),
    ]),
  );
  program.addCommand(
    runs(doctor(), () => import('./commands/doctor/doctor.ts').then((module) => module.doctorCommand)),
  );
  const configureAll = (command: CommandUnknownOpts) => {
    configure(command);
    for (const child of command.commands) configureAll(child);
  };
  configureAll(program);
  // `gym sandbox exec ID ls -la` reads -la as exec's own option: say where the command goes.
  const exec = program.commands
    .find((command) => command.name() === 'sandbox')
    ?.commands.find((command) => command.name() === 'exec');
  exec?.showHelpAfterError('(the command goes after --: gym sandbox exec ID [options] -- CMD [ARGS...])');
  return program;
}

function commandPath(command: CommandUnknownOpts): string {
  const names: string[] = [];
  for (let current: CommandUnknownOpts | null = command; current !== null; current = current.parent)
    names.unshift(current.name());
  return names.join(' ');
}

/**
 * Runs `gym ARGV...` and resolves to its exit code. Errors print their code and message, never a
 * stack (only an unexpected error, a bug, prints one).
 */
export async function runCli(argv: string[], streams: Streams): Promise<number> {
  const outcome: Outcome = { exitCode: EXIT_OK };
  const program = buildProgram(streams, outcome);
  if (argv.length === 0) {
    program.outputHelp({ error: true });
    return EXIT_USAGE;
  }
  // `gym help eval run` is `gym eval run --help` (commander's own help command stops at one level).
  const words = argv[0] === 'help' ? [...argv.slice(1), '--help'] : argv;
  try {
    await program.parseAsync(words, { from: 'user' });
    return outcome.exitCode;
  } catch (error) {
    if (error instanceof CommanderError) {
      // Help and --version end the parse with an "error" of exit code 0.
      return error.exitCode === 0 ? EXIT_OK : EXIT_USAGE;
    }
    if (error instanceof UsageError) {
      streams.stderr.write(`gym: ${error.message}\n`);
      return EXIT_USAGE;
    }
    if (isGymError(error)) {
      streams.stderr.write(`gym: ${error.code}: ${error.message}\n`);
      return EXIT_FAILURE;
    }
    streams.stderr.write(`gym: unexpected error: ${(error as Error).stack ?? String(error)}\n`);
    return EXIT_FAILURE;
  }
}
