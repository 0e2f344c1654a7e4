/**
 * The parsers of `gym pool` and its verbs: name, arguments, options and help. The bodies
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
} from '../../options.ts';

export const poolCreate = () =>
  new Command('create')
    .summary('define (or redefine) a warm pool; it fills in the background')
    .argument('<name>', 'pool name')
    .requiredOption('--image <IMAGE>', "the pool's image")
    .addOption(new Option('--min-idle <N>', 'idle sandboxes to keep ready').argParser(integer(0)))
    .addOption(new Option('--max-idle <N>', 'most idle sandboxes kept').argParser(integer(0)))
    .addOption(new Option('--max-total <N>', 'most sandboxes, idle and leased').argParser(integer(1)))
    .addOption(
      new Option('--idle-ttl <SECONDS>', 'replace idle sandboxes older than this').argParser(integer(1)),
    )
    .addOption(new Option('--refill-concurrency <N>', 'creates at once while filling').argParser(integer(1)))
    .addOption(cpusOption())
    .addOption(memoryOption())
    .addOption(pidsOption())
    .addOption(
      new Option('--ttl <SECONDS>', 'lease length of a sandbox taken from the pool').argParser(integer(1)),
    )
    .addOption(envOption('environment variable in the sandboxes'))
    .addOption(labelOption('label the sandboxes'))
    .option('--provider <NAME>', 'provider to create them with')
    .addOption(stateDirOption())
    .addOption(jsonOption());

export const poolLs = () =>
  new Command('ls')
    .summary('list pools with idle, leased and creating counts, hits, misses and acquire latency')
    .addOption(stateDirOption())
    .addOption(jsonOption());

export const poolRm = () =>
  new Command('rm')
    .summary('drain and delete pools (idle sandboxes destroyed; leased ones keep their leases)')
    .argument('<names...>', 'pool names')
    .addOption(stateDirOption());
