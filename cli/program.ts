/**
 * The `gym` command line: the list of command folders, and how a call reaches a command body.
 * Commands are nouns and verbs (`gym image build`); each folder `commands/<noun>/` defines its
 * own (`index.ts`: the parsers of `definitions.ts` paired with their bodies, see
 * `command-definition.ts`), and each body is loaded only when it runs, so `gym daemon start` does
 * not load what other commands need (a provider SDK, say) and `--help` loads no body at all.
 *
 * Exit codes: 0 ok, 1 the command failed (an error prints its code and message, never a stack),
 * 2 a usage error (unknown command or option, a missing or malformed argument, a number out of
 * range); a command may return its own (`gym sandbox exec` passes the command's through).
 */
import { Command, CommanderError, type CommandUnknownOpts, Help } from '@commander-js/extra-typings';
import { pino } from 'pino';
import { isGymError } from '../core/errors.ts';
import type { Logger } from '../core/logger.ts';
import { VERSION } from '../core/version.ts';
import { type CommandIo, UsageError } from './command.ts';
import type { CommandBuilder, CommandDefinition } from './command-definition.ts';
import { accessCommands } from './commands/access/index.ts';
import { agentCommands } from './commands/agent/index.ts';
import { daemonCommands } from './commands/daemon/index.ts';
import { devCommands } from './commands/dev/index.ts';
import { doctorCommands } from './commands/doctor/index.ts';
import { envCommands } from './commands/env/index.ts';
import { evalCommands } from './commands/eval/index.ts';
import { imageCommands } from './commands/image/index.ts';
import { poolCommands } from './commands/pool/index.ts';
import { sandboxCommands } from './commands/sandbox/index.ts';
import { snapshotCommands } from './commands/snapshot/index.ts';

// The parsers used to be defined here; callers that build one on its own keep finding it.
export { evalRun } from './commands/eval/definitions.ts';

export const EXIT_OK = 0;
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;

/** The program's commands, in the order its help lists them. */
const COMMANDS: readonly CommandDefinition[] = [
  daemonCommands,
  sandboxCommands,
  poolCommands,
  snapshotCommands,
  accessCommands,
  imageCommands,
  agentCommands,
  envCommands,
  evalCommands,
  devCommands,
  doctorCommands,
];

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
  const builder: CommandBuilder = {
    async run(body, options, args) {
      outcome.exitCode = await body.run({ ...io(), options, args });
    },
    configure(command, path, helpAfterError) {
      command
        .exitOverride()
        .configureOutput({
          writeOut: (text) => streams.stdout.write(text),
          writeErr: (text) => streams.stderr.write(text),
          outputError: (text, write) => write(`gym: ${text.replace(/^error: /, '')}`),
        })
        .showHelpAfterError(helpAfterError ?? `(see \`${path} --help\`)`);
    },
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
  for (const definition of COMMANDS) program.addCommand(definition.build(builder, program.name()));
  builder.configure(program, program.name());
  return program;
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
