/**
 * Options several commands share, each made fresh for the command that adds it (commander keeps
 * an option's parse state in the option).
 */
import { Option } from '@commander-js/extra-typings';
import { integer, keyValue, positiveNumber } from './arguments.ts';

/** Every command that talks to a daemon finds it through the state directory. */
export const stateDirOption = () =>
  new Option(
    '--state-dir <DIR>',
    "the daemon's state directory (default: GYM_STATE_DIR, else the stateDir of GYM_CONFIG, else ~/.local/state/gym)",
  );
/** A credential instead of the state directory's token file (a scoped one lends only its sandboxes). */
export const tokenOption = () =>
  new Option(
    '--token <TOKEN>',
    "a scoped credential (or the token) instead of the state directory's token file; GYM_TOKEN does the same and keeps it out of the process list",
  );
export const jsonOption = () => new Option('--json', 'print JSON instead of text');
export const labelOption = (what: string) =>
  new Option('--label <KEY=VALUE>', `${what} (repeatable)`).argParser(keyValue);
export const envOption = (what: string) =>
  new Option('--env <KEY=VALUE>', `${what} (repeatable)`).argParser(keyValue);
export const cpusOption = () =>
  new Option('--cpus <N>', 'CPU limit, fractions allowed').argParser(positiveNumber);
export const memoryOption = () => new Option('--memory <MIB>', 'memory limit in MiB').argParser(integer(1));
export const pidsOption = () => new Option('--pids <N>', 'process limit').argParser(integer(1));
