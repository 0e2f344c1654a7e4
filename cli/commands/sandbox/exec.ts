import { parseArgs } from 'node:util';
import { GymError } from '../../../core/errors.ts';
import type { Command } from '../../command.ts';
import { connect, keyValues, numberFlag, resolveStateDir } from '../../connect.ts';

/** Exit codes for what is not the command's own, as timeout(1) and shells use them. */
export const TIMEOUT_EXIT_CODE = 124;
export const SANDBOX_GONE_EXIT_CODE = 125;

export const sandboxExecCommand: Command = {
  summary: "run a command in a sandbox; its exit code becomes gym's",
  usage: `gym sandbox exec ID [--session NAME] [--timeout MS] [--cwd DIR] [--env KEY=VALUE]... [--json] -- CMD [ARGS...]

Output streams as it comes. Exit code: the command's; 124 on timeout; 125 if the sandbox went away.`,
  async run({ args, env, stdout, stderr }) {
    const separator = args.indexOf('--');
    const own = separator === -1 ? args : args.slice(0, separator);
    const argv = separator === -1 ? [] : args.slice(separator + 1);
    const { values, positionals } = parseArgs({
      args: own,
      allowPositionals: true,
      options: {
        session: { type: 'string' },
        timeout: { type: 'string' },
        cwd: { type: 'string' },
        env: { type: 'string', multiple: true },
        'state-dir': { type: 'string' },
        json: { type: 'boolean', default: false },
      },
    });
    const [id] = positionals;
    if (id === undefined || argv.length === 0)
      throw new GymError('VALIDATION_FAILED', 'usage: gym sandbox exec ID [options] -- CMD [ARGS...]');
    const client = await connect(resolveStateDir(values['state-dir'], env));
    const request = {
      argv,
      env: keyValues('env', values.env),
      ...(values.session === undefined ? {} : { session: values.session }),
      ...(values.timeout === undefined ? {} : { timeoutMs: numberFlag('timeout', values.timeout)! }),
      ...(values.cwd === undefined ? {} : { cwd: values.cwd }),
    };
    if (values.json) {
      const result = await client.exec(id, request);
      stdout.write(`${JSON.stringify(result)}\n`);
      return result.exitCode ?? (result.status === 'timeout' ? TIMEOUT_EXIT_CODE : SANDBOX_GONE_EXIT_CODE);
    }
    for await (const event of client.execStream(id, request)) {
      if (event.type === 'stdout') stdout.write(event.data);
      else if (event.type === 'stderr') stderr.write(event.data);
      else if (event.type === 'error')
        throw new GymError(event.error.code, event.error.message, { details: event.error.details });
      else if (event.type === 'result') {
        const { result } = event;
        if (result.session === false)
          stderr.write('gym: this provider has no sessions; the command ran one-shot\n');
        if (result.stdoutTruncated || result.stderrTruncated)
          stderr.write(
            `gym: output was truncated (${result.stdoutBytes} bytes on stdout, ${result.stderrBytes} on stderr)\n`,
          );
        if (result.status === 'timeout') {
          stderr.write('gym: the command timed out; all its processes were killed\n');
          return TIMEOUT_EXIT_CODE;
        }
        if (result.status === 'sandbox_gone') {
          stderr.write(`gym: sandbox ${id} went away during the command\n`);
          return SANDBOX_GONE_EXIT_CODE;
        }
        if (result.status === 'oom')
          stderr.write('gym: the command was killed for exceeding the memory limit\n');
        return result.exitCode ?? 1;
      }
    }
    throw new GymError('INTERNAL', 'the exec stream ended without a result');
  },
};
