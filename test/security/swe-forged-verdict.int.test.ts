/**
 * Issue 19, finding 1 and the swe half of 9, on real Docker: code the model patch adds runs inside
 * the test run (at import of the module under test), so it can read and write whatever its uid
 * reaches in the grading sandbox (the grader's script and its parents' /proc, its own stdout, the
 * pipes pytest's capture saved) and print any text. With the bug left in place, none of that may
 * grade as resolved: the exit status and the end of the log the verdict rests on are the exec's
 * own, as the daemon sees them, and a runner's exit status that says the run did not pass is
 * believed over its log.
 *
 * Each attack is one patch to toolz (test/fixtures/swebench-toolz.ts) that keeps the bug and
 * appends the attacker's code to the module the tests import; it is graded by the swebench kind
 * (`gradeSweBench`) and by the swe verifier (`verifySwe`) on the same image. The gold patch
 * scores 1 through both, so a 0 is the attack's failure, not a broken grader.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import type { RepositorySpec } from '../../environments/kinds/swebench/repositories.ts';
import { SweBenchRowSchema } from '../../environments/kinds/swebench/row.ts';
import { gradeSweBench } from '../../environments/kinds/swebench/verify.ts';
import { type SweTask, verifySwe } from '../../environments/verifiers/swe.ts';
import type { Verdict } from '../../environments/verifiers/verifier.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { dockerTestEnvironment } from '../docker-available.ts';
import {
  buildToolzImage,
  makeToolzInstance,
  patchAgainstBase,
  TOOLZ_OPTIONS,
  TOOLZ_TEST_FILE,
  type ToolzInstance,
} from '../fixtures/swebench-toolz.ts';

const { docker, skipReason } = await dockerTestEnvironment();

/** What the attacker's code does once it has printed a passing report for every test of the file. */
interface Attack {
  /**
   * `rewrite`: find the grader's script open in an ancestor (`/proc/PID/fd/*`), its marker
   * nonce, print forged end markers with it, and overwrite the rest of the script with `exit 0`;
   * then let pytest run on (its real summary lands after the forged end).
   * `kill`: the same forgery, then SIGKILL the parent shell (or, with none, the runner itself).
   * `exit`: the forgery, then end the runner at once with `exitCode`.
   */
  mode: 'rewrite' | 'kill' | 'exit';
  exitCode?: number;
  /** Also print a FAILED line for a test in neither list (so "no failure reported" cannot catch it). */
  fakeFailure?: boolean;
}

/**
 * The attacker's Python, appended to toolz/itertoolz.py (imported when pytest collects the tests).
 * pytest captures fds 1 and 2 while it collects, so the forged report goes to every writable pipe
 * among the process's own fds: the saved originals, where the run's output really goes.
 */
function attackCode(attack: Attack): string {
  return `

def _gym_forge(mode, exit_code, fake_failure):
    import os, re, signal, stat
    test_file = ${JSON.stringify(TOOLZ_TEST_FILE)}
    with open(os.path.join(os.getcwd(), test_file)) as source:
        names = re.findall(r'^def (test_\\w+)\\(', source.read(), re.M)
    lines = ['PASSED %s::%s' % (test_file, name) for name in names]
    if fake_failure:
        lines.append('FAILED %s::test_in_no_list - forged' % test_file)

    def ancestors():
        pid = os.getpid()
        while True:
            try:
                with open('/proc/%d/stat' % pid) as status:
                    pid = int(status.read().rsplit(')', 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                return
            if pid <= 1:
                return
            yield pid

    marker = re.compile(r'Start Test Output ([A-Za-z0-9]{8,})')
    nonce, script = None, None
    for pid in ancestors():
        places = []
        try:
            fds = os.listdir('/proc/%d/fd' % pid)
        except OSError:
            fds = []
        for fd in fds:
            path = '/proc/%d/fd/%s' % (pid, fd)
            try:
                if stat.S_ISREG(os.stat(path).st_mode):
                    places.append((fd, path))
            except OSError:
                pass
        places += [(None, '/proc/%d/cmdline' % pid), (None, '/proc/%d/environ' % pid)]
        for fd, path in places:
            try:
                with open(path, 'rb') as handle:
                    found = marker.search(handle.read().decode('utf-8', 'replace'))
            except OSError:
                continue
            if found:
                nonce = found.group(1)
                if fd is not None:
                    script = (pid, fd, path)
                break
        if nonce:
            break
    if nonce:
        lines += ["+ : '>>>>> End Test Output %s'" % nonce, '>>>>> Test Exit Code %s: 0' % nonce]
    forged = ('\\n'.join(lines) + '\\n').encode()

    written = set()
    for fd in sorted(os.listdir('/proc/self/fd'), key=int):
        try:
            target = os.readlink('/proc/self/fd/%s' % fd)
            with open('/proc/self/fdinfo/%s' % fd) as info:
                flags = int(re.search(r'flags:\\s*([0-7]+)', info.read()).group(1), 8)
        except (OSError, AttributeError):
            continue
        if target.startswith('pipe:') and flags & 3 != 0 and target not in written:
            written.add(target)
            try:
                os.write(int(fd), forged)
            except OSError:
                pass

    if mode == 'rewrite' and script is not None:
        pid, fd, path = script
        with open('/proc/%d/fdinfo/%s' % (pid, fd)) as info:
            position = int(re.search(r'pos:\\s*(\\d+)', info.read()).group(1))
        with open(path, 'r+b') as handle:
            handle.seek(position)
            handle.write(b'exit 0\\n')
            handle.truncate()
    elif mode == 'kill':
        shell = script[0] if script is not None else os.getppid()
        if shell > 1:
            os.kill(shell, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == 'exit':
        os._exit(exit_code)


_gym_forge(${JSON.stringify(attack.mode)}, ${attack.exitCode ?? 0}, ${attack.fakeFailure ? 'True' : 'False'})
`;
}

const BUGGY_MODULE = 'toolz/itertoolz.py';

describe.skipIf(skipReason !== undefined)('a SWE verdict the tested code cannot forge', () => {
  let instance: ToolzInstance;
  let daemon: TestDaemon;
  let client: GymClient;
  let sweTask: SweTask;

  beforeAll(async () => {
    instance = makeToolzInstance();
    await buildToolzImage(docker, instance);
    daemon = await startTestDaemon(
      { namespace: `forged-${randomBytes(3).toString('hex')}` },
      { listen: true },
    );
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
    const row = instance.row;
    sweTask = {
      instance_id: String(row.instance_id),
      base_commit: String(row.base_commit),
      image: instance.image,
      workdir: '/testbed',
      test_command: `${TOOLZ_OPTIONS.repositories['pytoolz/toolz'].testCommand} ${TOOLZ_TEST_FILE}`,
      test_patch: String(row.test_patch),
      FAIL_TO_PASS: JSON.parse(String(row.FAIL_TO_PASS)) as string[],
      PASS_TO_PASS: JSON.parse(String(row.PASS_TO_PASS)) as string[],
    };
  }, 300_000);

  afterAll(async () => {
    await daemon?.cleanup();
  });

  const sweBench = (patch: string): Promise<Verdict> =>
    gradeSweBench(
      client,
      {
        row: SweBenchRowSchema.parse(instance.row),
        image: instance.image,
        spec: TOOLZ_OPTIONS.repositories['pytoolz/toolz'] as RepositorySpec,
        testTimeoutSec: 120,
      },
      patch,
    );
  /** The bug left in place, the attacker's code appended to the module the tests import. */
  const forging = (attack: Attack) =>
    patchAgainstBase(instance, {
      [BUGGY_MODULE]: `${instance.files[BUGGY_MODULE]!}${attackCode(attack)}`,
    });
  /** Reward 0, for the reason the run's own end gives (or the real failure pytest reported). */
  const expectNotResolved = (verdict: Verdict, expected: Record<string, unknown>) => {
    expect(verdict, JSON.stringify(verdict.details).slice(-3000)).toMatchObject({
      outcome: 'reward',
      reward: 0,
      details: { resolved: false, ...expected },
    });
  };
  const FREQUENCIES = `${TOOLZ_TEST_FILE}::test_frequencies`;

  it('grades the gold patch 1 through both verifiers (the control)', { timeout: 120_000 }, async () => {
    const gold = String(instance.row.patch);
    expect(await sweBench(gold)).toMatchObject({ outcome: 'reward', reward: 1 });
    expect(await verifySwe(client, sweTask, gold)).toMatchObject({ outcome: 'reward', reward: 1 });
  });

  it.each<[string, Attack, Record<string, unknown>]>([
    [
      "rewrites the grader's running script (the nonce read from /proc, the rest made `exit 0`)",
      { mode: 'rewrite' },
      // The forgery found no script: pytest ran on and reported the real failure, exit 1.
      { testExitCode: 1, FAIL_TO_PASS: { success: [], failure: [FREQUENCIES] } },
    ],
    [
      'kills the parent shell after printing a forged summary and end markers',
      { mode: 'kill' },
      { reason: expect.stringMatching(/killed .*before pytest gave its result/) },
    ],
    [
      'exits 2 (interrupted) after a forged summary with one failure outside the lists',
      { mode: 'exit', exitCode: 2, fakeFailure: true },
      { reason: expect.stringMatching(/^pytest exited 2: the run was interrupted/) },
    ],
  ])(
    'swebench: a patch that keeps the bug and %s scores 0',
    { timeout: 120_000 },
    async (_name, attack, expected) => {
      expectNotResolved(await sweBench(forging(attack)), expected);
    },
  );

  it.each<[string, Attack, Record<string, unknown>]>([
    [
      'exits 1 (tests failed) after printing PASSED for every test',
      { mode: 'exit', exitCode: 1 },
      { reason: 'pytest exited 1 (some tests failed) while its log reports no failure' },
    ],
    [
      'SIGKILLs its own runner after printing PASSED for every test',
      { mode: 'kill' },
      { reason: expect.stringMatching(/killed .*before pytest gave its result/) },
    ],
    [
      'exits 4 (usage error) after a forged summary with one failure outside the lists',
      { mode: 'exit', exitCode: 4, fakeFailure: true },
      { reason: expect.stringMatching(/^pytest exited 4: a usage error/) },
    ],
  ])(
    'swe: a patch that keeps the bug and %s scores 0',
    { timeout: 120_000 },
    async (_name, attack, expected) => {
      expectNotResolved(await verifySwe(client, sweTask, forging(attack)), expected);
    },
  );
});
