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
 *
 * Everything else in this sandbox is the agent's: its files (a `/tests` or `/logs` it made a file
 * or a link), its tools (the `sh`, `rm` and `mkdir` the verifier runs) and the programs test.sh
 * runs (which can `kill -9` test.sh). So only the sandbox going away, a kill with no exit code
 * (the engine lost track of the command) and the daemon or provider failing are infra; a step those can break is graded, reward 0 with the reason, and a test.sh
 * that was killed or ran out of memory is graded by the reward it left (none: 0).
 *
 * Its tools are checked against the image first, from outside the sandbox (./toolchain.ts): a
 * replaced `sh`, a shadowing `python3` or a planted `.pth` is reward 0, "verifier toolchain
 * tampered", before any of them runs.
 */
import { lstat, readdir, readFile, stat } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { GymError, isGymError } from '../../core/errors.ts';
import { isSandboxFilesystemRefusal, type SandboxHandle } from '../../harnesses/harness.ts';
import { parsePytestLog } from './pytest-log.ts';
import {
  checkVerifierToolchain,
  testScriptTools,
  verifierPythonEnv,
  withToolchainCheck,
} from './toolchain.ts';
import { endedFromOutside, type Verdict } from './verifier.ts';

export const REWARD_FILE = '/logs/verifier/reward.txt';

/** Where Terminal-Bench's harness puts the tests (its T_BENCH_TEST_DIR), given to them as TEST_DIR. */
export const TERMINAL_BENCH_TEST_DIR = '/tests';

/**
 * Fresh, real directories for the tests and the reward, whatever the agent left at those paths.
 * `/logs` is kept when it is a real directory (other logs may be there), else removed first, so
 * that nothing below follows a link the agent planted.
 */
export const PREPARE_PATHS_COMMAND =
  'if [ -L /logs ] || { [ -e /logs ] && [ ! -d /logs ]; }; then rm -f /logs || exit 1; fi; ' +
  'rm -rf /tests /logs/verifier && mkdir -p /tests /logs/verifier';

/** The files below a folder; none when there is no folder (a Terminal-Bench task with only run-tests.sh). */
/** A fresh reward folder, and the image's own test.sh made executable as Harbor makes it. */
export const PREPARE_REWARD_PATH_COMMAND =
  'rm -rf /logs/verifier && mkdir -p /logs/verifier && { [ ! -e /tests/test.sh ] || chmod +x /tests/test.sh; }';

/**
 * The tests folder is the dataset's: a link (`tests -> ~/.ssh`) would copy the host's files into
 * the sandbox and, through the test output, into the results; a task error (VALIDATION_FAILED
 * stops the run). The files in it are never followed (only regular files are copied).
 */
async function refuseLinkedTests(directory: string): Promise<void> {
  if ((await lstat(directory).catch(() => null))?.isSymbolicLink() === true)
    throw new GymError(
      'VALIDATION_FAILED',
      `the tests folder ${directory} is a symbolic link; a task's tests must be a folder of the task`,
      { details: { path: directory } },
    );
}

async function filesBelow(directory: string): Promise<string[]> {
  const entries = await readdir(directory, { withFileTypes: true, recursive: true }).catch(
    (error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT') return [];
      throw error;
    },
  );
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

/**
 * Harbor's way of running tests: `/tests/test.sh` executed (its own shebang) from the image's
 * working directory with task.toml's verifier env, and the reward read from
 * /logs/verifier/reward.json (wins) or reward.txt. A test that writes neither, an empty file or
 * one that is not a reward is a `verifier_error`: no reward at all, never a 0.
 */
export interface HarborTestRun {
  workdir: string;
  env: Record<string, string>;
  user?: string;
  /**
   * Terminal-Bench's way instead (environments/kinds/harbor/terminal-bench.ts): its run-tests.sh
   * (null: the task has none, pytest runs /tests) written to /tests/run-tests.sh and run with bash,
   * `TEST_DIR=/tests`, and the run graded by its pytest parser rather than a reward file.
   */
  terminalBench?: { runTests: Buffer | null };
  /**
   * Started again once the agent's processes are stopped, before the tests (a Harbor image's
   * ENTRYPOINT, whose services the tests may need; the stop ended them with the agent's).
   */
  startCommand?: string;
  /**
   * Runs once the agent's processes are stopped, before anything of the tests (the verifier
   * phase's network policy, say); a verdict it answers ends the verification with it.
   */
  beforeTests?: () => Promise<Verdict | null>;
}

export const REWARD_JSON_FILE = '/logs/verifier/reward.json';

export async function verifyScript(
  sandbox: SandboxHandle,
  /** Copied to /tests; null: the sandbox's image has its own /tests (Harbor's separate verifier). */
  testsDirectory: string | null,
  timeoutMs: number,
  harbor?: HarborTestRun,
): Promise<Verdict> {
  if (testsDirectory !== null) await refuseLinkedTests(testsDirectory);
  const beforeTests = await stopAgentProcesses(sandbox, 'before the tests');
  if (beforeTests !== null) return beforeTests;
  const prepared = await harbor?.beforeTests?.();
  if (prepared !== undefined && prepared !== null) return prepared;
  // Nothing of the agent runs now: its tools are compared with the image's before any is used.
  // A separate verifier's sandbox has its image's own /tests; Terminal-Bench's run-tests.sh is run
  // by bash, which the check covers whatever the script names.
  const testScript =
    testsDirectory === null || harbor?.terminalBench !== undefined ? null : join(testsDirectory, 'test.sh');
  const toolchain = await checkVerifierToolchain(
    sandbox,
    testScript === null ? [] : await testScriptTools(testScript),
    // Where the tests run: a module planted there shadows the image's for `python -m pytest`.
    harbor === undefined || !harbor.workdir.startsWith('/') ? [] : [harbor.workdir],
  );
  if ('verdict' in toolchain) return toolchain.verdict;
  return withToolchainCheck(await runTests(sandbox, testsDirectory, timeoutMs, harbor), toolchain);
}

/** The tests themselves, once the agent's processes are stopped and its toolchain checked. */
async function runTests(
  sandbox: SandboxHandle,
  testsDirectory: string | null,
  timeoutMs: number,
  harbor: HarborTestRun | undefined,
): Promise<Verdict> {
  const notPrepared = (why: string, log = ''): Verdict => ({
    outcome: 'reward',
    reward: 0,
    details: {
      reason: `the sandbox could not be prepared for the tests: ${why}`,
      prepareLog: log.slice(-2000),
    },
  });
  // As root, with the sandbox's own tools: a failure or a hang is the agent's doing (it replaced
  // them or planted something they cannot remove).
  const prepared = await sandbox.exec({
    command: testsDirectory === null ? PREPARE_REWARD_PATH_COMMAND : PREPARE_PATHS_COMMAND,
    cwd: '/',
    user: '0',
    timeoutMs: 60_000,
  });
  if (endedFromOutside(prepared))
    return {
      outcome: 'infra_error',
      reward: 0,
      details: {
        reason: `preparing the paths for the tests ended with status ${prepared.status} and no exit code`,
      },
    };
  if (prepared.status !== 'ok' || prepared.exitCode !== 0)
    return notPrepared(
      `preparing /tests and /logs/verifier ended with status ${prepared.status}, exit ${prepared.exitCode}`,
      `${prepared.stdout}${prepared.stderr}`,
    );
  for (const path of testsDirectory === null ? [] : await filesBelow(testsDirectory)) {
    const target = `/tests/${relative(testsDirectory!, path)}`;
    // Harbor makes test.sh executable before it runs it.
    const mode =
      ((await stat(path)).mode & 0o777) | (harbor !== undefined && target === '/tests/test.sh' ? 0o111 : 0);
    try {
      await sandbox.writeFile(target, await readFile(path), mode);
    } catch (error) {
      // The path is not what the preparation made of it (the sandbox's tools did not do their
      // job), or the agent filled the sandbox's disk.
      if (isGymError(error, 'PATH_KIND_MISMATCH') || isSandboxFilesystemRefusal(error))
        return notPrepared(`copying ${target}: ${(error as Error).message}`);
      throw error;
    }
  }
  if (harbor?.startCommand !== undefined) {
    const restarted = await sandbox.exec({
      command: harbor.startCommand,
      cwd: harbor.workdir,
      timeoutMs: 30_000,
    });
    if (endedFromOutside(restarted))
      return {
        outcome: 'infra_error',
        reward: 0,
        details: { reason: `starting the image's ENTRYPOINT again ended with status ${restarted.status}` },
      };
  }
  const terminalBench = harbor?.terminalBench;
  if (terminalBench?.runTests != null) {
    try {
      await sandbox.writeFile('/tests/run-tests.sh', terminalBench.runTests, 0o755);
    } catch (error) {
      if (isGymError(error, 'PATH_KIND_MISMATCH') || isSandboxFilesystemRefusal(error))
        return notPrepared(`copying /tests/run-tests.sh: ${(error as Error).message}`);
      throw error;
    }
  }
  const run = await sandbox.exec(
    harbor === undefined
      ? {
          command: 'rm -f /logs/verifier/reward.txt; sh /tests/test.sh',
          cwd: '/tests',
          env: verifierPythonEnv(),
          timeoutMs,
        }
      : terminalBench !== undefined
        ? {
            argv:
              terminalBench.runTests === null
                ? ['sh', '-c', 'python3 -m pytest -rA "$TEST_DIR"']
                : ['bash', '/tests/run-tests.sh'],
            cwd: harbor.workdir,
            env: { ...verifierPythonEnv(), ...harbor.env, TEST_DIR: TERMINAL_BENCH_TEST_DIR },
            timeoutMs,
          }
        : {
            argv: ['/tests/test.sh'],
            cwd: harbor.workdir,
            env: { ...verifierPythonEnv(), ...harbor.env },
            ...(harbor.user === undefined ? {} : { user: harbor.user }),
            timeoutMs,
          },
  );
  if (run.status === 'timeout')
    return {
      outcome: 'verifier_timeout',
      reward: 0,
      details: { reason: `test.sh ran past ${timeoutMs} ms` },
    };
  if (endedFromOutside(run))
    return {
      outcome: 'infra_error',
      reward: 0,
      details: {
        reason:
          run.status === 'sandbox_gone'
            ? 'the sandbox went away during the tests'
            : 'test.sh was killed with no exit code (the engine lost track of it)',
      },
    };
  // A test.sh that was killed (by a program it ran: `kill -9 $PPID`, exit 137) or ran out of
  // memory is graded like any other, by the reward it left.
  // test.sh may have started processes too: the reward is read only once nothing runs.
  const afterTests = await stopAgentProcesses(sandbox, 'after the tests');
  if (afterTests !== null) return afterTests;
  const details = {
    testExitCode: run.exitCode,
    ...(run.status === 'ok' ? {} : { testStatus: run.status }),
    testLogTail: `${run.stdout}${run.stderr}`.slice(-4000),
  };
  if (terminalBench !== undefined) return terminalBenchReward(`${run.stdout}\n${run.stderr}`, details);
  if (harbor !== undefined) return harborReward(sandbox, details, run.status);
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
        details: {
          ...details,
          reason: `test.sh wrote no ${REWARD_FILE}${run.status === 'ok' ? '' : ` (it ended with status ${run.status})`}`,
        },
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

/** Reads a reward file: its trimmed text, null when it does not exist; a verdict when it cannot be one. */
async function readRewardFile(
  sandbox: SandboxHandle,
  path: string,
  details: Record<string, unknown>,
): Promise<string | null | Verdict> {
  try {
    return (await sandbox.readFile(path, { maxBytes: 65_536 })).toString('utf8').trim();
  } catch (error) {
    if (isGymError(error, 'FILE_NOT_FOUND')) return null;
    const reason = `${path} cannot be read: ${isGymError(error) ? `${error.code}: ` : ''}${(error as Error).message}`;
    if (isGymError(error, 'FILE_TOO_LARGE') || isGymError(error, 'PATH_KIND_MISMATCH'))
      return { outcome: 'verifier_error', reward: 0, details: { ...details, reason } };
    return { outcome: 'infra_error', reward: 0, details: { reason } };
  }
}

/** The reward as Harbor reads it: reward.json (an object of numbers) first, else reward.txt. */
async function harborReward(
  sandbox: SandboxHandle,
  details: Record<string, unknown>,
  status: string,
): Promise<Verdict> {
  const error = (reason: string): Verdict => ({
    outcome: 'verifier_error',
    reward: 0,
    details: { ...details, reason },
  });
  const json = await readRewardFile(sandbox, REWARD_JSON_FILE, details);
  if (json !== null && typeof json === 'object') return json;
  if (typeof json === 'string') {
    let parsed: unknown;
    try {
      parsed = JSON.parse(json);
    } catch {
      return error(`${REWARD_JSON_FILE} is not JSON: "${json.slice(0, 100)}"`);
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
      return error(`${REWARD_JSON_FILE} is not an object of rewards`);
    const rewards = Object.fromEntries(
      Object.entries(parsed).filter((entry): entry is [string, number] => typeof entry[1] === 'number'),
    );
    const values = Object.values(rewards);
    if (values.length === 0 || !values.every(Number.isFinite))
      return error(
        `${REWARD_JSON_FILE} holds no numeric reward (it holds ${Object.keys(parsed).join(', ') || 'nothing'})`,
      );
    // Harbor's own reward of a trial is the `reward` metric, or the only one there is. With several
    // and none named `reward` it has no single one (its job metrics average each metric apart):
    // the rollout's scalar is then their mean, and `rewards` keeps each of them.
    const reward =
      rewards.reward ??
      (values.length === 1 ? values[0]! : values.reduce((sum, value) => sum + value, 0) / values.length);
    return {
      outcome: 'reward',
      reward,
      details: {
        ...details,
        rewards,
        ...(rewards.reward === undefined && values.length > 1
          ? { reward_derived: `the mean of ${values.length} metrics (reward.json names no "reward")` }
          : {}),
      },
    };
  }
  const text = await readRewardFile(sandbox, REWARD_FILE, details);
  if (text !== null && typeof text === 'object') return text;
  if (text === null)
    return error(
      `test.sh wrote no ${REWARD_JSON_FILE} or ${REWARD_FILE}${status === 'ok' ? '' : ` (it ended with status ${status})`}`,
    );
  if (text === '') return error(`${REWARD_FILE} is empty`);
  const reward = Number(text);
  if (!Number.isFinite(reward)) return error(`${REWARD_FILE} holds "${text.slice(0, 100)}", not a number`);
  return { outcome: 'reward', reward, details };
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: stripping terminal colour codes is the point.
const ANSI_COLOUR = /\u001b\[[0-9;]*m/g;

/**
 * Terminal-Bench's grading: its pytest parser reads the lines after pytest's "short test summary
 * info" header (run-tests.sh passes `-rA`); the task is resolved when that lists tests and every
 * one passed (PASSED, XFAIL or SKIPPED; FAILED, ERROR and XPASS fail it). No summary: unresolved.
 */
export function terminalBenchReward(output: string, details: Record<string, unknown>): Verdict {
  const at = output.lastIndexOf('short test summary info');
  if (at === -1)
    return {
      outcome: 'reward',
      reward: 0,
      details: { ...details, reason: 'the tests printed no pytest short test summary (run pytest with -rA)' },
    };
  const summary = output.slice(output.indexOf('\n', at) + 1);
  const results = parsePytestLog(summary);
  const unexpectedPass = summary
    .split('\n')
    .some((line) => /^XPASS /.test(line.replace(ANSI_COLOUR, '').trim()));
  const failed = [...results]
    .filter(([, status]) => status === 'FAILED' || status === 'ERROR')
    .map(([id]) => id);
  const resolved = results.size > 0 && failed.length === 0 && !unexpectedPass;
  return {
    outcome: 'reward',
    reward: resolved ? 1 : 0,
    details: {
      ...details,
      tests: Object.fromEntries(results),
      ...(resolved
        ? {}
        : {
            reason:
              results.size === 0
                ? 'the short test summary lists no test'
                : `not every test passed: ${[...failed, ...(unexpectedPass ? ['(an XPASS)'] : [])].join(', ')}`,
          }),
    },
  };
}
