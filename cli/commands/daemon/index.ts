/** `gym daemon`: its verbs, each a parser and a body loaded when it runs. */
import { type CommandDefinition, group, verb } from '../../command-definition.ts';
import { daemonStart, daemonStatus, daemonStop, daemonUi } from './definitions.ts';

export const daemonCommands: CommandDefinition = group('daemon', 'run, inspect and stop the daemon', [
  verb(daemonStart, () => import('./start.ts').then((module) => module.daemonStartCommand)),
  verb(daemonStatus, () => import('./status.ts').then((module) => module.daemonStatusCommand)),
  verb(daemonStop, () => import('./stop.ts').then((module) => module.daemonStopCommand)),
  verb(daemonUi, () => import('./ui.ts').then((module) => module.daemonUiCommand)),
]);
