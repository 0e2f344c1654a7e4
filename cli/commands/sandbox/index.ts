/** `gym sandbox`: its verbs, each a parser and a body loaded when it runs. */
import { type CommandDefinition, group, verb } from '../../command-definition.ts';
import {
  sandboxCp,
  sandboxCreate,
  sandboxExec,
  sandboxFork,
  sandboxLs,
  sandboxRm,
  sandboxShell,
} from './definitions.ts';

export const sandboxCommands: CommandDefinition = group(
  'sandbox',
  'create sandboxes, run commands in them, copy files, remove them',
  [
    verb(sandboxCreate, () => import('./create.ts').then((module) => module.sandboxCreateCommand)),
    verb(sandboxLs, () => import('./ls.ts').then((module) => module.sandboxLsCommand)),
    verb(sandboxExec, () => import('./exec.ts').then((module) => module.sandboxExecCommand), {
      helpAfterError: '(the command goes after --: gym sandbox exec ID [options] -- CMD [ARGS...])',
    }),
    verb(sandboxCp, () => import('./cp.ts').then((module) => module.sandboxCpCommand)),
    verb(sandboxFork, () => import('./fork.ts').then((module) => module.sandboxForkCommand)),
    verb(sandboxRm, () => import('./rm.ts').then((module) => module.sandboxRmCommand)),
    verb(sandboxShell, () => import('./shell.ts').then((module) => module.sandboxShellCommand)),
  ],
);
