/**
 * How a command folder under `commands/` defines its commands for `program.ts`: a verb is its
 * parser (name, arguments, options, help) and a loader of its body, which is imported only when
 * the verb runs; a group is a noun with its verbs. The folder's `index.ts` lists them, so a new
 * verb is its body, its parser and one line there, and a new noun one line in program.ts.
 */
import { type CommandUnknownOpts, type OptionValues, Command as Parser } from '@commander-js/extra-typings';
import type { Command } from './command.ts';

/** What program.ts lends every definition while the program is built. */
export interface CommandBuilder {
  /** Runs a loaded body with the parsed options and arguments; its exit code becomes gym's. */
  run<Options, Args extends unknown[]>(
    body: Command<Options, Args>,
    options: Options,
    args: Args,
  ): Promise<void>;
  /**
   * Sets where the command prints and how it fails. `path` is the command as typed (`gym eval
   * run`); `helpAfterError`, when given, replaces the usual "see --help" after a usage error.
   */
  configure(command: CommandUnknownOpts, path: string, helpAfterError?: string): void;
}

/** One command of the program: a verb (`gym sandbox exec`, `gym doctor`) or a group of verbs (`gym sandbox`). */
export interface CommandDefinition {
  /** A fresh parser for the command (commander keeps parse state in it, so one per run). */
  build(builder: CommandBuilder, parentPath: string): CommandUnknownOpts;
}

/**
 * A verb: `define` makes its parser, `load` imports its body when it runs (never before, so
 * `--help` loads no body and one command does not load what another needs). The body's option
 * and argument types are checked against the parser's here.
 */
export function verb<Args extends unknown[], Options extends OptionValues>(
  define: () => Parser<Args, Options, OptionValues>,
  load: () => Promise<Command<Options, Args>>,
  settings: { helpAfterError?: string } = {},
): CommandDefinition {
  return {
    build(builder, parentPath) {
      const command = define();
      command.action(async () => builder.run(await load(), command.opts(), command.processedArgs));
      builder.configure(command, `${parentPath} ${command.name()}`, settings.helpAfterError);
      return command;
    },
  };
}

/** A noun and its verbs (`gym pool create|ls|rm`); its help lists the verbs. */
export function group(name: string, summary: string, verbs: readonly CommandDefinition[]): CommandDefinition {
  return {
    build(builder, parentPath) {
      const command = new Parser(name).summary(summary).description(`${summary}.`);
      const path = `${parentPath} ${name}`;
      for (const definition of verbs) command.addCommand(definition.build(builder, path));
      builder.configure(command, path);
      return command;
    },
  };
}
