/**
 * The parsers of `gym env` and its verbs: name, arguments, options and help. The bodies
 * import their option types from here; `index.ts` pairs each parser with its body.
 */
import { Command } from '@commander-js/extra-typings';
import { jsonOption } from '../../options.ts';

export const envLs = () =>
  new Command('ls').summary('list the built-in environments').addOption(jsonOption());

export const envShow = () =>
  new Command('show')
    .summary("show an environment's definition and tasks")
    .argument('<name>', 'environment name (see gym env ls)')
    .addOption(jsonOption());
