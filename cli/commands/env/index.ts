/** `gym env`: its verbs, each a parser and a body loaded when it runs. */
import { type CommandDefinition, group, verb } from '../../command-definition.ts';
import { envLs, envShow } from './definitions.ts';

export const envCommands: CommandDefinition = group('env', 'the built-in environments', [
  verb(envLs, () => import('./ls.ts').then((module) => module.envLsCommand)),
  verb(envShow, () => import('./show.ts').then((module) => module.envShowCommand)),
]);
