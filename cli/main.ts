#!/usr/bin/env node
/** The `gym` command's entry point; program.ts lists the commands, `commands/` defines them. */
import { runCli } from './program.ts';

process.exitCode = await runCli(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  env: process.env,
});
