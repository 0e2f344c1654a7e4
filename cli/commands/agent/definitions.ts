/**
 * The parsers of `gym agent` and its verbs: name, arguments, options and help. The bodies
 * import their option types from here; `index.ts` pairs each parser with its body.
 */
import { Command } from '@commander-js/extra-typings';
import { jsonOption } from '../../options.ts';

export const agentInstall = () =>
  new Command('install')
    .summary('make the runtimes of the agents from PyPI (mini-swe-agent, openhands) on this host')
    .description(
      `Make, once per host, the self-contained Python runtime each named agent runs on inside sandboxes (default: all of them): CPython 3.13 from a Debian trixie root (debootstrap) and the agent's wheels, pinned with their hashes, downloaded from PyPI and installed offline. Sandboxes need no network for it and the task's own Python is never touched. A runtime made of the same pins is not made again. Needs root (debootstrap, chroot).`,
    )
    .argument('[names...]', 'agents to install (default: all)')
    .option('--cache-dir <DIR>', 'the host cache of agents (default: ~/.cache/gym/agents)')
    .addOption(jsonOption());
