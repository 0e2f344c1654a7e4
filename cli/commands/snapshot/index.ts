/** `gym snapshot`: its verbs, each a parser and a body loaded when it runs. */
import { type CommandDefinition, group, verb } from '../../command-definition.ts';
import { snapshotLs, snapshotRm } from './definitions.ts';

export const snapshotCommands: CommandDefinition = group(
  'snapshot',
  "managed snapshots of sandboxes' files (made by fork or POST /v1/sandboxes/{id}/snapshot)",
  [
    verb(snapshotLs, () => import('./ls.ts').then((module) => module.snapshotLsCommand)),
    verb(snapshotRm, () => import('./rm.ts').then((module) => module.snapshotRmCommand)),
  ],
);
