/**
 * What the runtime stand-ins (`apptainer.ts`, `enroot.ts`) share, the command lines themselves
 * being each one's own: failing as the tool does (its prefix, its exit code), the parser of a
 * subcommand's leading flags (one it does not take fails, so a provider calling a flag the real
 * tool lacks fails here too), and ending as the program a call runs last ends.
 */
import { spawn } from 'node:child_process';

export type FlagKind = 'switch' | 'value' | 'repeat';

/** A flag a subcommand takes: its kind, and (for a short or second name) the name it is kept under. */
export type FlagSpec = FlagKind | { kind: FlagKind; long: string };

export interface StandInTool {
  /** The tool's name, in messages. */
  name: string;
  /** What its error lines start with (`FATAL:   `, `[ERROR] `). */
  prefix: string;
  /** Its exit code on an error, and for a program that ended without one. */
  failCode: number;
  /** Whether `--` (and a lone `-`) end the flags; otherwise they are flags like any other. */
  endOfFlags: boolean;
}

export function standInCli(tool: StandInTool) {
  const fail: (message: string) => never = (message) => {
    process.stderr.write(`${tool.prefix}${message}\n`);
    process.exit(tool.failCode);
  };

  /** Parses the leading flags of `args` against those `command` takes (`--flag value` or `--flag=value`). */
  const parseFlags = (
    command: string,
    args: string[],
    allowed: Record<string, FlagSpec>,
  ): { flags: Map<string, string[]>; rest: string[] } => {
    const flags = new Map<string, string[]>();
    let index = 0;
    for (; index < args.length; index += 1) {
      const arg = args[index]!;
      if (tool.endOfFlags && arg === '--') {
        index += 1;
        break;
      }
      if (!arg.startsWith('-') || (tool.endOfFlags && arg === '-')) break;
      const [given, inline] = arg.includes('=')
        ? [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)]
        : [arg, undefined];
      const spec = allowed[given];
      if (spec === undefined)
        return fail(
          `stand-in: unknown flag ${given} for "${tool.name} ${command}" (not something the ${tool.name} provider should call)`,
        );
      const { kind, long } = typeof spec === 'string' ? { kind: spec, long: given } : spec;
      if (kind === 'switch') flags.set(long, ['true']);
      else {
        const value = inline ?? args[++index];
        if (value === undefined) return fail(`flag ${given} needs a value`);
        flags.set(long, kind === 'repeat' ? [...(flags.get(long) ?? []), value] : [value]);
      }
    }
    return { flags, rest: args.slice(index) };
  };

  /** Runs `program` as the call's last step, stdio inherited, and ends as it ends (its code, or its signal again). */
  const runToEnd = (program: string, args: string[], env?: NodeJS.ProcessEnv): void => {
    const child = spawn(program, args, { stdio: 'inherit', ...(env === undefined ? {} : { env }) });
    child.on('error', (error) => fail(`cannot run ${program}: ${error.message}`));
    child.on('close', (code, signal) => {
      if (signal !== null) process.kill(process.pid, signal);
      else process.exit(code ?? tool.failCode);
    });
  };

  return { fail, parseFlags, runToEnd };
}
