import { GymError } from '../../../core/errors.ts';
import type { CommandOf } from '../../command.ts';
import { connectWith } from '../../connect.ts';
import type { sandboxExec } from './definitions.ts';

/** Exit codes for what is not the command's own, as timeout(1) and shells use them. */
export const TIMEOUT_EXIT_CODE = 124;
export const SANDBOX_GONE_EXIT_CODE = 125;

export const sandboxExecCommand: CommandOf<typeof sandboxExec> = {
  async run({ options: values, args: [id, argv], env, stdout, stderr }) {
    const client = await connectWith(values, env);
    const request = {
      argv,
      env: values.env,
      ...(values.session === undefined ? {} : { session: values.session }),
      ...(values.timeout === undefined ? {} : { timeoutMs: values.timeout }),
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
