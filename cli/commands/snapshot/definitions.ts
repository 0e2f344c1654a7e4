/**
 * The parsers of `gym snapshot` and its verbs: name, arguments, options and help. The bodies
 * import their option types from here; `index.ts` pairs each parser with its body.
 */
import { Command } from '@commander-js/extra-typings';
import { jsonOption, stateDirOption } from '../../options.ts';

export const snapshotLs = () =>
  new Command('ls')
    .summary("list the daemon's managed snapshots (what specs name as snapshot:<id>)")
    .addOption(stateDirOption())
    .addOption(jsonOption());

export const snapshotRm = () =>
  new Command('rm')
    .summary("remove managed snapshots (idempotent; refused while a pool's spec starts from one)")
    .argument('<ids...>', 'snapshot ids')
    .addOption(stateDirOption());
