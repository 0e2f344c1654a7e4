/** `gym image`: its verbs, each a parser and a body loaded when it runs. */
import { type CommandDefinition, group, verb } from '../../command-definition.ts';
import { imageBuild, imageLs } from './definitions.ts';

export const imageCommands: CommandDefinition = group('image', 'the local base images', [
  verb(imageBuild, () => import('./build.ts').then((module) => module.imageBuildCommand)),
  verb(imageLs, () => import('./ls.ts').then((module) => module.imageLsCommand)),
]);
