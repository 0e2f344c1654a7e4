/**
 * The parsers of `gym access` and its verbs: name, arguments, options and help. The bodies
 * import their option types from here; `index.ts` pairs each parser with its body.
 */
import { Command, Option } from '@commander-js/extra-typings';
import { ACCESS_RIGHTS } from '../../../core/schemas/access.ts';
import { integer } from '../../arguments.ts';
import { jsonOption, stateDirOption, tokenOption } from '../../options.ts';

export const accessGrant = () =>
  new Command('grant')
    .summary('lend sandboxes: print a scoped credential with named rights on them')
    .description(
      `Mint a scoped credential for one sandbox (or one rollout's few): it may do its rights on them and nothing else, until --ttl or their leases end, whichever is first (docs/api.md, "Scoped access"). The credential alone goes to stdout, shown this once:
  GYM_TOKEN=$(gym access grant sbx-abc --rights exec,files) gym sandbox exec sbx-abc -- ls`,
    )
    .argument('<sandboxIds...>', 'the sandboxes lent')
    .addOption(
      new Option('--rights <RIGHTS>', `comma-separated, of ${ACCESS_RIGHTS.join(', ')}`)
        .makeOptionMandatory()
        .argParser((value) => value.split(',').filter((right) => right !== '')),
    )
    .addOption(new Option('--ttl <SECONDS>', 'at most this long').argParser(integer(1)))
    .addOption(stateDirOption())
    .addOption(jsonOption());

export const accessLs = () =>
  new Command('ls')
    .summary('list the live grants (never their credentials)')
    .addOption(stateDirOption())
    .addOption(jsonOption());

export const accessRevoke = () =>
  new Command('revoke')
    .summary('revoke grants (idempotent); a credential may revoke itself with --token')
    .argument('<grantIds...>', 'grant ids (acc-...)')
    .addOption(stateDirOption())
    .addOption(tokenOption());
