/**
 * The script verifier (Harbor style): after the agent finishes, copy the task's tests folder into
 * its sandbox at /tests, run `sh /tests/test.sh` under a timeout, and read the reward it writes to
 * /logs/verifier/reward.txt. A timeout is `verifier_timeout`, never reward 0.
 *
 * The agent ran in this same sandbox and may have left processes behind (a loop that rewrites the
 * reward file, say). So every process but the sandbox's keeper is stopped before the tests are
 * copied in, and again after test.sh ended and before the reward is read: no agent process runs
 * while the verifier does, and nothing changes the reward between the test and its reading. A
 * sandbox that cannot be stopped that way gives an infra error, never a reward.
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { isGymError } from '../../core/errors.ts';
import type { SandboxHandle } from '../../harnesses/harness.ts';
import type { Verdict } from './verifier.ts';

export const REWARD_FILE = '/logs/verifier/reward.txt';

async function filesBelow(directory: string): Promise<string[]> {
  const entries = await readdir(directory, { withFileTypes: true, recursive: true });
  return entries.filter((entry) => entry.isFile()).map((entry) => join(entry.parentPath, entry.name));
}

/** Stops every process in the sandbox but its keeper; an infra-error verdict when it cannot. */
async function stopAgentProcesses(sandbox: SandboxHandle, when: string): Promise<Verdict | null> {
  if (sandbox.stopProcesses === undefined)
    return {
      outcome: 'infra_error',
      reward: 0,
      details: {
        reason: `cannot stop the agent's processes ${when}: this sandbox's provider cannot stop processes, so a reward could be forged`,
      },
    };
  try {
    await sandbox.stopProcesses();
    return null;
  } catch (error) {
    return {
      outcome: 'infra_error',
      reward: 0,
      details: { reason: `could not stop the agent's processes ${when}: ${(error as Error).message}` },
    };
  }
}

export async function verifyScript(
  sandbox: SandboxHandle,
  testsDirectory: string,
  timeoutMs: number,
): Promise<Verdict> {
  const beforeTests = await stopAgentProcesses(sandbox, 'before the tests');
  if (beforeTests !== null) return beforeTests;
  for (const path of await filesBelow(testsDirectory)) {
    const mode = (await stat(path)).mode & 0o777;
    await sandbox.writeFile(`/tests/${relative(testsDirectory, path)}`, await readFile(path), mode);
  }
  const run = await sandbox.exec({
    command: 'rm -f /logs/verifier/reward.txt; sh /tests/test.sh',
    cwd: '/tests',
    timeoutMs,
  });
  if (run.status === 'timeout')
    return {
      outcome: 'verifier_timeout',
      reward: 0,
      details: { reason: `test.sh ran past ${timeoutMs} ms` },
    };
  if (run.status === 'sandbox_gone' || run.status === 'killed')
    return {
      outcome: 'infra_error',
      reward: 0,
      details: {
        reason:
          run.status === 'killed'
            ? 'test.sh was killed by something other than its timeout (its session was lost)'
            : 'the sandbox went away during the tests',
      },
    };
  // test.sh may have started processes too: the reward is read only once nothing runs.
  const afterTests = await stopAgentProcesses(sandbox, 'after the tests');
  if (afterTests !== null) return afterTests;
  const details = { testExitCode: run.exitCode, testLogTail: `${run.stdout}${run.stderr}`.slice(-4000) };
  // A reward is a number: a bigger file is not read into memory (and is no reward). Only a file
  // that is really missing or too big is the test's verdict; failing to read it is an infra error.
  let rewardText: string;
  try {
    rewardText = (await sandbox.readFile(REWARD_FILE, { maxBytes: 4096 })).toString('utf8').trim();
  } catch (error) {
    if (isGymError(error, 'FILE_NOT_FOUND'))
      return {
        outcome: 'reward',
        reward: 0,
        details: { ...details, reason: `test.sh wrote no ${REWARD_FILE}` },
      };
    if (isGymError(error, 'FILE_TOO_LARGE') || isGymError(error, 'PATH_KIND_MISMATCH'))
      return {
        outcome: 'reward',
        reward: 0,
        details: {
          ...details,
          reason: `${REWARD_FILE} is not a small file holding a number: ${(error as Error).message}`,
        },
      };
    return {
      outcome: 'infra_error',
      reward: 0,
      details: {
        reason: `could not read ${REWARD_FILE}: ${isGymError(error) ? `${error.code}: ` : ''}${(error as Error).message}`,
      },
    };
  }
  const reward = Number(rewardText);
  if (!Number.isFinite(reward))
    return {
      outcome: 'reward',
      reward: 0,
      details: { ...details, reason: `the reward file holds "${rewardText.slice(0, 100)}", not a number` },
    };
  return { outcome: 'reward', reward, details };
}
