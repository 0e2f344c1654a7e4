/** `gym agent`: its verbs, each a parser and a body loaded when it runs. */
import { type CommandDefinition, group, verb } from '../../command-definition.ts';
import { agentInstall } from './definitions.ts';

export const agentCommands: CommandDefinition = group('agent', 'agents from PyPI made ready on this host', [
  verb(agentInstall, () => import('./install.ts').then((module) => module.agentInstallCommand)),
]);
