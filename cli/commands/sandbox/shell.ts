import { createInterface } from 'node:readline';
import type { CommandOf } from '../../command.ts';
import { connectWith } from '../../connect.ts';
import type { sandboxShell } from './definitions.ts';

export const sandboxShellCommand: CommandOf<typeof sandboxShell> = {
  async run({ options: values, args: [id], env, stdout, stderr }) {
    const client = await connectWith(values, env);
    let cwd = (await client.exec(id, { argv: ['pwd'], session: 'shell' })).stdout.trim() || '/';
    // Iterating (rather than question()) keeps lines that arrive before a prompt, as piped input does.
    const lines = createInterface({
      input: process.stdin,
      terminal: process.stdin.isTTY === true,
      crlfDelay: Number.POSITIVE_INFINITY,
    });
    const prompt = () => stdout.write(`${id}:${cwd}$ `);
    prompt();
    try {
      for await (const line of lines) {
        if (line.trim() === 'exit') break;
        if (line.trim() !== '') {
          const cd = /^\s*cd(?:\s+(.*))?$/.exec(line);
          const command = cd ? `cd ${cd[1]?.trim() || '~'} && pwd` : line;
          const result = await client.exec(id, { command, cwd, session: 'shell', timeoutMs: 10 * 60_000 });
          if (cd && result.exitCode === 0) cwd = result.stdout.trim();
          else stdout.write(result.stdout);
          stderr.write(result.stderr);
          if (result.status !== 'ok') stderr.write(`[${result.status}]\n`);
          else if (result.exitCode !== 0) stderr.write(`[exit ${result.exitCode}]\n`);
        }
        prompt();
      }
    } finally {
      lines.close();
      stdout.write('\n');
    }
    return 0;
  },
};
