/**
 * The parsers of `gym image` and its verbs: name, arguments, options and help. The bodies
 * import their option types from here; `index.ts` pairs each parser with its body.
 */
import { Command } from '@commander-js/extra-typings';
import { integer } from '../../arguments.ts';
import { jsonOption, stateDirOption } from '../../options.ts';

export const imageBuild = () =>
  new Command('build')
    .summary('build the local base images, or an image set, on the daemon provider (no registry needed)')
    .description(
      `Build the named local base images (default: all) or image sets (swe-mini: every task image) on the daemon's provider; without a running daemon, on one started in-process. An image whose recipe hash the provider has is not rebuilt unless --force is given (definitions only). \`gym image ls\` lists what exists.`,
    )
    .argument(
      '[names...]',
      'base images (busybox, debian-base) or image sets (swe-mini) to build (default: all base images)',
    )
    .option('--force', 'rebuild even when the recipe hash exists')
    .option('--provider <NAME>', "the daemon's provider to build on (default: its default)")
    .option(
      '--context <DIR>',
      "build DIR/Dockerfile (a Harbor task's environment/ folder) as `gym eval run` builds a Harbor task's image, instead of named images; prints its reference",
    )
    .option(
      '--name <NAME>',
      'with --context: the image is gym/harbor-NAME (default: the name of the folder holding DIR)',
    )
    .option('--timeout-seconds <S>', 'with --context: the whole build at most', integer(1))
    .addOption(stateDirOption())
    .addOption(jsonOption());

export const imageLs = () =>
  new Command('ls')
    .summary('list the images gym built on the daemon provider')
    .option('--provider <NAME>', "the daemon's provider (default: its default)")
    .addOption(stateDirOption())
    .addOption(jsonOption());
