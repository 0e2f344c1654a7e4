import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { GymError } from '../../../core/errors.ts';
import type { Command } from '../../command.ts';
import { connect, resolveStateDir } from '../../connect.ts';

export const sandboxShellCommand: Command = {
  summary: 'an interactive line shell in a sandbox',
  usage: `gym sandbox shell ID

Each line runs through a session (about a millisecond a command). Each line is its own command,
as with exec; \`cd DIR\` is remembered by the shell for the lines that follow. Exit with Ctrl-D or \`exit\`.`,
  async run({ args, env, stdout, stderr }) {
    const { values, positionals } = parseArgs({
      args,
      allowPositionals: true,
      options: { 'state-dir': { type: 'string' } },
    });
    const [id] = positionals;
    if (id === undefined) throw new GymError('VALIDATION_FAILED', 'usage: gym sandbox shell ID');
    const client = await connect(resolveStateDir(values['state-dir'], env));
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
