/** `gym pool`: its verbs, each a parser and a body loaded when it runs. */
import { type CommandDefinition, group, verb } from '../../command-definition.ts';
import { poolCreate, poolLs, poolRm } from './definitions.ts';

export const poolCommands: CommandDefinition = group('pool', 'warm pools of ready sandboxes', [
  verb(poolCreate, () => import('./create.ts').then((module) => module.poolCreateCommand)),
  verb(poolLs, () => import('./ls.ts').then((module) => module.poolLsCommand)),
  verb(poolRm, () => import('./rm.ts').then((module) => module.poolRmCommand)),
]);
