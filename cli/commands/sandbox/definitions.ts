/**
 * The parsers of `gym sandbox` and its verbs: name, arguments, options and help. The bodies
 * import their option types from here; `index.ts` pairs each parser with its body.
 */
import { Command, Option } from '@commander-js/extra-typings';
import { integer } from '../../arguments.ts';
import {
  cpusOption,
  envOption,
  jsonOption,
  labelOption,
  memoryOption,
  pidsOption,
  stateDirOption,
  tokenOption,
} from '../../options.ts';

export const sandboxCreate = () =>
  new Command('create')
    .summary('create a sandbox and print its id')
    .description(
      `Create a sandbox (from an image, or taken from a warm pool) and print its id.

  gym sandbox create --image IMAGE [--cpus N] [--memory MIB] ... [--json]
  gym sandbox create --pool NAME [--ttl SECONDS] [--label KEY=VALUE]... [--env KEY=VALUE]...`,
    )
    .option('--image <IMAGE>', 'image to run')
    .option('--pool <NAME>', 'take a warm sandbox from this pool instead')
    .addOption(cpusOption())
    .addOption(memoryOption())
    .addOption(pidsOption())
    .addOption(new Option('--ttl <SECONDS>', 'lease length').argParser(integer(1)))
    .addOption(labelOption('label the sandbox'))
    .addOption(envOption('environment variable in the sandbox'))
    .option('--workdir <DIR>', 'working directory')
    .option('--user <USER>', 'user the commands run as')
    .addOption(new Option('--network <MODE>', 'network mode').choices(['none', 'host', 'bridge'] as const))
    .option('--provider <NAME>', 'provider to create it with')
    .addOption(stateDirOption())
    .addOption(tokenOption())
    .addOption(jsonOption());

export const sandboxLs = () =>
  new Command('ls')
    .summary('list sandboxes')
    .addOption(labelOption('only sandboxes with this label'))
    .option('--provider <NAME>', "only this provider's sandboxes")
    .addOption(stateDirOption())
    .addOption(tokenOption())
    .addOption(jsonOption());

export const sandboxExec = () =>
  new Command('exec')
    .summary("run a command in a sandbox; its exit code becomes gym's")
    .description(
      `Run a command in a sandbox. Everything after -- is the command, options included (gym sandbox exec ID -- ls --help runs ls --help). Output streams as it comes. Exit code: the command's; 124 on timeout; 125 if the sandbox went away.`,
    )
    .argument('<id>', 'sandbox id')
    .argument('<command...>', 'the command and its arguments, after --')
    .option('--session <NAME>', 'run in a named session (a shell kept alive between commands)')
    .addOption(
      new Option('--timeout <MS>', 'kill the command after this many milliseconds').argParser(integer(1)),
    )
    .option('--cwd <DIR>', 'working directory')
    .addOption(envOption('environment variable for the command'))
    .addOption(stateDirOption())
    .addOption(tokenOption())
    .addOption(jsonOption());

export const sandboxCp = () =>
  new Command('cp')
    .summary('copy files or directories between this machine and a sandbox')
    .description(
      `Copy files or directories between this machine and a sandbox. One side is ID:/absolute/path. A directory is copied whole (as a tar stream); a file keeps its mode. A copy out of a sandbox refuses what would land outside the target (an absolute or ".." name, a link leading out) and stops at --max-mib.
  gym sandbox cp ./repo sbx-abc:/work/repo
  gym sandbox cp sbx-abc:/work/repo/result.json .`,
    )
    .argument('<source>', 'a local path or ID:/path')
    .argument('<target>', 'a local path or ID:/path')
    .addOption(
      new Option(
        '--max-mib <MIB>',
        'the most a copy out of a sandbox writes here, in MiB (a sparse file is written at its full size)',
      )
        .argParser(integer(1))
        .default(1024),
    )
    .addOption(stateDirOption())
    .addOption(tokenOption());

export const sandboxRm = () =>
  new Command('rm')
    .summary('destroy sandboxes (idempotent)')
    .argument('[ids...]', 'sandbox ids')
    .option('--all', 'destroy every sandbox of the daemon')
    .addOption(stateDirOption())
    .addOption(tokenOption());

export const sandboxFork = () =>
  new Command('fork')
    .summary("new sandboxes holding this one's files as of now (a snapshot, then one create per child)")
    .argument('<id>', 'sandbox id of the parent (it keeps running)')
    .addOption(new Option('--count <N>', 'how many children').argParser(integer(1)).default(1))
    .addOption(labelOption("label the children (over the parent's labels)"))
    .addOption(envOption("environment variable of the children (over the parent spec's)"))
    .addOption(
      new Option('--ttl <SECONDS>', "each child's lease (default: the parent's TTL)").argParser(integer(1)),
    )
    .addOption(
      new Option(
        '--snapshot-ttl <SECONDS>',
        'keep the snapshot this long (default: snapshots.ttlSeconds)',
      ).argParser(integer(1)),
    )
    .option('--live', 'carry memory and processes over too (refused where the provider cannot)')
    .addOption(stateDirOption())
    .addOption(tokenOption())
    .addOption(jsonOption());

export const sandboxShell = () =>
  new Command('shell')
    .summary('an interactive line shell in a sandbox')
    .description(
      `An interactive line shell in a sandbox. Each line runs through a session (about a millisecond a command). Each line is its own command, as with exec; \`cd DIR\` is remembered by the shell for the lines that follow. Exit with Ctrl-D or \`exit\`.`,
    )
    .argument('<id>', 'sandbox id')
    .addOption(stateDirOption())
    .addOption(tokenOption());
