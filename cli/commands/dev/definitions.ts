/**
 * The parsers of `gym dev` and its verbs: name, arguments, options and help. The bodies
 * import their option types from here; `index.ts` pairs each parser with its body.
 */
import { Command, Option } from '@commander-js/extra-typings';
import { integer } from '../../arguments.ts';

export const devModelServer = () =>
  new Command('model-server')
    .summary('serve a scripted model (Chat Completions, Responses, Anthropic Messages) for tests and demos')
    .description(
      `Serve a scripted model, answering from the script, streaming or not, with tool calls. Point the daemon at it with GYM_POLICY_BASE_URL=http://127.0.0.1:PORT/v1. Runs until interrupted.`,
    )
    .requiredOption('--script <FILE>', 'the script (.json or .yaml)')
    .addOption(
      new Option('--port <PORT>', 'TCP port (0: any free port)').argParser(integer(0, 65_535)).default(8000),
    );
