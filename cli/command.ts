import type { Logger } from '../core/logger.ts';

/** Where a command prints, its logger (on stderr) and the environment it runs in. */
export interface CommandIo {
  stdout: NodeJS.WritableStream & { isTTY?: boolean };
  /** A terminal (isTTY) gets progress redrawn in place; anything else gets plain lines. */
  stderr: NodeJS.WritableStream & { isTTY?: boolean };
  logger: Logger;
  env: Readonly<Record<string, string | undefined>>;
}

/** What a command body gets: its options and arguments, parsed and validated by its parser (`commands/<noun>/definitions.ts`). */
export interface CommandContext<Options, Args extends unknown[]> extends CommandIo {
  options: Options;
  args: Args;
}

export interface Command<Options, Args extends unknown[] = []> {
  /** Resolves to the process exit code. */
  run(context: CommandContext<Options, Args>): Promise<number>;
}

/**
 * The body type of a command whose options and arguments its parser declares (`definitions.ts`):
 * `CommandOf<typeof sandboxExec>` has exactly the option names and value types that the parser
 * produces, so a flag renamed in one place fails the typecheck in the other.
 */
export type CommandOf<Define extends () => { opts(): unknown; processedArgs: unknown[] }> = Command<
  ReturnType<ReturnType<Define>['opts']>,
  ReturnType<Define>['processedArgs']
>;

/**
 * A mistake in how the command was called that the parser cannot see (two options that exclude
 * each other, one of two required): reported like the parser's own errors, with exit code 2.
 */
export class UsageError extends Error {
  override name = 'UsageError';
}
