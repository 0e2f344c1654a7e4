#!/usr/bin/env node
/**
 * The `gym` command. Commands are nouns and verbs (`gym image build`); each lives in
 * `commands/<noun>/<verb>.ts`. Errors print their code and message, never a stack, and set a
 * non-zero exit code.
 */
import { pino } from 'pino';
import { isGymError } from '../core/errors.ts';
import type { Logger } from '../core/logger.ts';
import { VERSION } from '../core/version.ts';
import type { Command, CommandContext } from './command.ts';
import { daemonStartCommand } from './commands/daemon/start.ts';
import { daemonStatusCommand } from './commands/daemon/status.ts';
import { daemonStopCommand } from './commands/daemon/stop.ts';
import { devModelServerCommand } from './commands/dev/model-server.ts';
import { doctorCommand } from './commands/doctor/doctor.ts';
import { envLsCommand } from './commands/env/ls.ts';
import { envShowCommand } from './commands/env/show.ts';
import { evalProfileCommand } from './commands/eval/profile.ts';
import { evalReverifyCommand } from './commands/eval/reverify.ts';
import { evalRunCommand } from './commands/eval/run.ts';
import { imageBuildCommand } from './commands/image/build.ts';
import { imageLsCommand } from './commands/image/ls.ts';
import { poolCreateCommand } from './commands/pool/create.ts';
import { poolLsCommand } from './commands/pool/ls.ts';
import { poolRmCommand } from './commands/pool/rm.ts';
import { sandboxCpCommand } from './commands/sandbox/cp.ts';
import { sandboxCreateCommand } from './commands/sandbox/create.ts';
import { sandboxExecCommand } from './commands/sandbox/exec.ts';
import { sandboxLsCommand } from './commands/sandbox/ls.ts';
import { sandboxRmCommand } from './commands/sandbox/rm.ts';
import { sandboxShellCommand } from './commands/sandbox/shell.ts';

/** Nouns and their verbs; a noun with a single `''` verb is a command of one word (`gym doctor`). */
const COMMANDS: Record<string, Record<string, Command>> = {
  daemon: { start: daemonStartCommand, status: daemonStatusCommand, stop: daemonStopCommand },
  sandbox: {
    create: sandboxCreateCommand,
    ls: sandboxLsCommand,
    exec: sandboxExecCommand,
    cp: sandboxCpCommand,
    rm: sandboxRmCommand,
    shell: sandboxShellCommand,
  },
  pool: { create: poolCreateCommand, ls: poolLsCommand, rm: poolRmCommand },
  image: { build: imageBuildCommand, ls: imageLsCommand },
  env: { ls: envLsCommand, show: envShowCommand },
  eval: { run: evalRunCommand, reverify: evalReverifyCommand, profile: evalProfileCommand },
  dev: { 'model-server': devModelServerCommand },
  doctor: { '': doctorCommand },
};

function help(): string {
  const lines = ['usage: gym <command> [options]', '', 'commands:'];
  for (const [noun, verbs] of Object.entries(COMMANDS)) {
    for (const [verb, command] of Object.entries(verbs))
      lines.push(`  gym ${`${noun} ${verb}`.padEnd(16)} ${command.summary}`);
  }
  lines.push('', "Run `gym <noun> <verb> --help` for a command's options.");
  return `${lines.join('\n')}\n`;
}

export async function main(
  argv: string[],
  env: Readonly<Record<string, string | undefined>>,
): Promise<number> {
  const [noun, ...rest] = argv;
  if (noun === undefined || noun === '--help' || noun === '-h' || noun === 'help') {
    process.stdout.write(help());
    return noun === undefined ? 2 : 0;
  }
  if (noun === '--version' || noun === 'version') {
    process.stdout.write(`${VERSION}\n`);
    return 0;
  }
  const isOneWord = COMMANDS[noun]?.[''] !== undefined;
  const verb = isOneWord ? '' : rest[0];
  const args = isOneWord ? rest : rest.slice(1);
  const command = verb === undefined ? undefined : COMMANDS[noun]?.[verb];
  if (command === undefined) {
    process.stderr.write(`gym: unknown command "${[noun, verb].filter(Boolean).join(' ')}"\n\n${help()}`);
    return 2;
  }
  if (args.includes('--help') || args.includes('-h')) {
    process.stdout.write(`usage: ${command.usage}\n`);
    return 0;
  }
  const logger = pino({ level: env.GYM_LOG_LEVEL ?? 'info' }, pino.destination(2)) as unknown as Logger;
  const context: CommandContext = { args, stdout: process.stdout, stderr: process.stderr, logger, env };
  try {
    return await command.run(context);
  } catch (error) {
    if (isGymError(error)) {
      process.stderr.write(`gym: ${error.code}: ${error.message}\n`);
      return 1;
    }
    if ((error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      process.stderr.write(`gym: ${(error as Error).message}\nusage: ${command.usage}\n`);
      return 2;
    }
    process.stderr.write(`gym: unexpected error: ${(error as Error).stack ?? String(error)}\n`);
    return 1;
  }
}

process.exitCode = await main(process.argv.slice(2), process.env);
