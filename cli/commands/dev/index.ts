/** `gym dev`: its verbs, each a parser and a body loaded when it runs. */
import { type CommandDefinition, group, verb } from '../../command-definition.ts';
import { devModelServer } from './definitions.ts';

export const devCommands: CommandDefinition = group('dev', 'tools for tests and demos', [
  verb(devModelServer, () => import('./model-server.ts').then((module) => module.devModelServerCommand)),
]);
