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

/**
 * Nouns and their verbs; a noun with a single `''` verb is a command of one word (`gym doctor`).
 * Each command's module is loaded only when it runs (or for `--help`), so `gym daemon start`
 * does not load what other commands need (dockerode for images, say).
 */
type CommandLoader = () => Promise<Command>;
const COMMANDS: Record<string, Record<string, CommandLoader>> = {
  daemon: {
    start: () => import('./commands/daemon/start.ts').then((module) => module.daemonStartCommand),
    status: () => import('./commands/daemon/status.ts').then((module) => module.daemonStatusCommand),
    stop: () => import('./commands/daemon/stop.ts').then((module) => module.daemonStopCommand),
  },
  sandbox: {
    create: () => import('./commands/sandbox/create.ts').then((module) => module.sandboxCreateCommand),
    ls: () => import('./commands/sandbox/ls.ts').then((module) => module.sandboxLsCommand),
    exec: () => import('./commands/sandbox/exec.ts').then((module) => module.sandboxExecCommand),
    cp: () => import('./commands/sandbox/cp.ts').then((module) => module.sandboxCpCommand),
    rm: () => import('./commands/sandbox/rm.ts').then((module) => module.sandboxRmCommand),
    shell: () => import('./commands/sandbox/shell.ts').then((module) => module.sandboxShellCommand),
  },
  pool: {
    create: () => import('./commands/pool/create.ts').then((module) => module.poolCreateCommand),
    ls: () => import('./commands/pool/ls.ts').then((module) => module.poolLsCommand),
    rm: () => import('./commands/pool/rm.ts').then((module) => module.poolRmCommand),
  },
  image: {
    build: () => import('./commands/image/build.ts').then((module) => module.imageBuildCommand),
    ls: () => import('./commands/image/ls.ts').then((module) => module.imageLsCommand),
  },
  env: {
    ls: () => import('./commands/env/ls.ts').then((module) => module.envLsCommand),
    show: () => import('./commands/env/show.ts').then((module) => module.envShowCommand),
  },
  eval: {
    run: () => import('./commands/eval/run.ts').then((module) => module.evalRunCommand),
    reverify: () => import('./commands/eval/reverify.ts').then((module) => module.evalReverifyCommand),
    profile: () => import('./commands/eval/profile.ts').then((module) => module.evalProfileCommand),
  },
  dev: {
    'model-server': () =>
      import('./commands/dev/model-server.ts').then((module) => module.devModelServerCommand),
  },
  doctor: { '': () => import('./commands/doctor/doctor.ts').then((module) => module.doctorCommand) },
};

async function help(): Promise<string> {
  const lines = ['usage: gym <command> [options]', '', 'commands:'];
  for (const [noun, verbs] of Object.entries(COMMANDS)) {
    for (const [verb, load] of Object.entries(verbs))
      lines.push(`  gym ${`${noun} ${verb}`.padEnd(16)} ${(await load()).summary}`);
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
    process.stdout.write(await help());
    return noun === undefined ? 2 : 0;
  }
  if (noun === '--version' || noun === 'version') {
    process.stdout.write(`${VERSION}\n`);
    return 0;
  }
  const isOneWord = COMMANDS[noun]?.[''] !== undefined;
  const verb = isOneWord ? '' : rest[0];
  const args = isOneWord ? rest : rest.slice(1);
  const load = verb === undefined ? undefined : COMMANDS[noun]?.[verb];
  if (load === undefined) {
    process.stderr.write(
      `gym: unknown command "${[noun, verb].filter(Boolean).join(' ')}"\n\n${await help()}`,
    );
    return 2;
  }
  const command = await load();
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
