/** `gym eval`: its verbs, each a parser and a body loaded when it runs. */
import { type CommandDefinition, group, verb } from '../../command-definition.ts';
import { evalExport, evalProfile, evalReverify, evalRun, evalServe, evalView } from './definitions.ts';

export const evalCommands: CommandDefinition = group(
  'eval',
  'run environments through harnesses and verifiers; rescore and profile rollouts',
  [
    verb(evalRun, () => import('./run.ts').then((module) => module.evalRunCommand)),
    verb(evalReverify, () => import('./reverify.ts').then((module) => module.evalReverifyCommand)),
    verb(evalProfile, () => import('./profile.ts').then((module) => module.evalProfileCommand)),
    verb(evalExport, () => import('./export.ts').then((module) => module.evalExportCommand)),
    verb(evalView, () => import('./view.ts').then((module) => module.evalViewCommand)),
    verb(evalServe, () => import('./serve.ts').then((module) => module.evalServeCommand)),
  ],
);
