/** `gym access`: its verbs, each a parser and a body loaded when it runs. */
import { type CommandDefinition, group, verb } from '../../command-definition.ts';
import { accessGrant, accessLs, accessRevoke } from './definitions.ts';

export const accessCommands: CommandDefinition = group(
  'access',
  'lend sandboxes to other processes with scoped credentials, list and revoke them',
  [
    verb(accessGrant, () => import('./grant.ts').then((module) => module.accessGrantCommand)),
    verb(accessLs, () => import('./ls.ts').then((module) => module.accessLsCommand)),
    verb(accessRevoke, () => import('./revoke.ts').then((module) => module.accessRevokeCommand)),
  ],
);
