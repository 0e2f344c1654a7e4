/**
 * The mini-SWE loop's prompts, in our own words. The protocol is mini-swe-agent's (v1 text
 * mode): one fenced bash block per reply, the observation fed back with its return code, and a
 * sentinel line that submits whatever the command printed after it.
 */
export const SUBMIT_SENTINEL = 'COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT';

/**
 * The command that submits: on a repository, the sentinel then the staged diff (mini-swe-agent's
 * SWE-bench configuration); elsewhere the sentinel alone, as its default configuration asks (git
 * outside a repository exits 128, so the diff form could never submit there).
 */
export function submitCommand(graded: 'diff' | 'state' = 'diff'): string {
  return graded === 'diff'
    ? `echo ${SUBMIT_SENTINEL} && git add -A && git diff --cached`
    : `echo ${SUBMIT_SENTINEL}`;
}

export function systemPrompt(graded: 'diff' | 'state' = 'diff'): string {
  const place = graded === 'diff' ? 'the repository' : 'the working directory';
  return [
    graded === 'diff'
      ? 'You are an engineer fixing an issue in a code repository, working through a Linux shell.'
      : 'You are an engineer doing a task on a Linux machine, working through its shell.',
    'Each reply has two parts: a short explanation of what you will do next, then exactly one',
    'shell command in a fenced block that starts with ```bash and ends with ```.',
    `Every command runs in a fresh shell in ${place}: directory changes and variables do not`,
    'carry over, so chain dependent steps with && in one command. Commands that wait for input',
    'will be killed; use non-interactive flags.',
    `When the ${graded === 'diff' ? 'fix' : 'task'} is done and tested, submit it with exactly this command and nothing else:`,
    '```bash',
    submitCommand(graded),
    '```',
  ].join('\n');
}

export function taskPrompt(instruction: string, workdir: string, graded: 'diff' | 'state' = 'diff'): string {
  return graded === 'diff'
    ? `The repository is at ${workdir}. Here is the issue to resolve:\n\n<issue>\n${instruction}\n</issue>\n\nChange the source code (not the tests) so that the issue is resolved.`
    : `The working directory is ${workdir}. Here is the task:\n\n<task>\n${instruction}\n</task>\n\nYour work is judged on the state you leave the machine in once you submit.`;
}

export function formatErrorPrompt(found: number, graded: 'diff' | 'state' = 'diff'): string {
  return [
    `Your reply had ${found} bash blocks; it must have exactly one.`,
    'Explain briefly, then give one command in a ```bash block. To submit, run:',
    submitCommand(graded),
  ].join('\n');
}

export function observationPrompt(exitCode: number | null, output: string, note?: string): string {
  return `${note === undefined ? '' : `<note>${note}</note>\n`}<returncode>${exitCode ?? -1}</returncode>\n<output>\n${output}\n</output>`;
}
