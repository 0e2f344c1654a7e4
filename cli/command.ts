import type { Logger } from '../core/logger.ts';

/** What every command gets: parsed arguments, where to print, and a logger on stderr. */
export interface CommandContext {
  args: string[];
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  logger: Logger;
  env: Readonly<Record<string, string | undefined>>;
}

export interface Command {
  /** One line for `gym --help`. */
  summary: string;
  usage: string;
  /** Resolves to the process exit code. */
  run(context: CommandContext): Promise<number>;
}
