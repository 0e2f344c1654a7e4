/**
 * SWE-ReX's own runtime calls against our daemon: the real `swe-rex` package (1.4.0 from PyPI, in
 * the framework runtime set-up makes: test/frameworks/runtimes.ts) drives
 * `gym_sandboxd.swe_rex.GymSandboxdDeployment` the way SWE-agent does (each call in an
 * `asyncio.run` of its own), in a sandbox of a real daemon on Docker: bash sessions whose state
 * carries over, `check` modes, syntax errors, a timeout that leaves nothing running, `expect` and
 * the interrupt of the command it left running, input lines to a running program (Python's REPL)
 * and its interrupts, a retried call that runs once, `execute` as
 * `subprocess.run`, files in and out, and no sandbox left once the deployment stopped.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../client/client.ts';
import { readRuntimeManifest } from '../harnesses/installed/python-runtime.ts';
import { collectProcess } from './collect-process.ts';
import { startTestDaemon, type TestDaemon } from './daemon-harness.ts';
import { dockerTestEnvironment, testImage } from './docker-available.ts';
import { frameworkRuntimeDir } from './frameworks/runtimes.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const REPOSITORY = new URL('..', import.meta.url).pathname;
const RUNTIME = frameworkRuntimeDir('swe-rex');
const DRIVER = join(REPOSITORY, 'test', 'fixtures', 'swe-rex-run.py');

interface Step {
  step: string;
  value?: unknown;
  error?: string;
  message?: string;
}

const run = collectProcess;

/** The command lines of a process listing the driver took (`PROCESSES`), one a process. */
function processes(step: Step): string[] {
  const value = step.value as { output?: string; stdout?: string } | undefined;
  return (value?.stdout ?? value?.output ?? '').split('\n').filter((line) => line !== '');
}

describe.skipIf(skipReason !== undefined)('SWE-ReX 1.4 with GymSandboxdDeployment', () => {
  let daemon: TestDaemon;
  let client: GymClient;
  let image = '';
  let scratch = '';

  beforeAll(async () => {
    // set-up made it (scripts/framework-runtimes.ts); a missing runtime is a failure, not a skip.
    expect(
      await readRuntimeManifest(RUNTIME),
      `no runtime at ${RUNTIME}: run scripts/framework-runtimes.ts swe-rex`,
    ).not.toBeNull();
    image = await testImage(docker, 'debian-base');
    daemon = await startTestDaemon(
      { namespace: `swe-rex-${randomBytes(3).toString('hex')}`, destroyOnShutdown: true },
      { listen: true },
    );
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
    scratch = await mkdtemp(join(tmpdir(), 'gym-swe-rex-'));
  });

  afterAll(async () => {
    await daemon?.cleanup();
    if (scratch !== '') await rm(scratch, { recursive: true, force: true });
  });

  it("runs SWE-ReX's runtime calls in one sandbox and leaves none", async () => {
    const { code, output } = await run(
      join(RUNTIME, 'bin', 'python'),
      [DRIVER, join(REPOSITORY, 'python'), image, scratch],
      { PATH: process.env.PATH, HOME: scratch, GYM_STATE_DIR: daemon.stateDir },
    );
    expect(code, output).toBe(0);
    const steps = new Map<string, Step>();
    for (const line of output.split('\n')) {
      if (!line.startsWith('{"step"')) continue;
      const parsed = JSON.parse(line) as Step;
      steps.set(parsed.step, parsed);
    }
    const value = (name: string) => {
      const found = steps.get(name);
      expect(found?.error, `${name}: ${found?.message}`).toBeUndefined();
      return found?.value as Record<string, unknown>;
    };
    const raised = (name: string) => steps.get(name)?.error;
    expect(steps.size, output).toBe(69);

    // The deployment's contract.
    expect(raised('start-missing-image')).toBe('swerex.exceptions.DeploymentStartupError');
    expect(value('start-missing-image-cause')).toBe('ImageNotFoundError');
    expect(raised('runtime-before-start')).toBe('swerex.exceptions.DeploymentNotStartedError');
    expect(value('twin-after-start')).toBe(true);
    expect(value('is-alive')).toEqual({ is_alive: true, message: '' });
    const sandboxId = steps.get('sandbox-id')?.value as string;
    expect(sandboxId).toMatch(/^sbx-/);

    // Sessions keep the shell's state from one command to the next, as one bash would.
    expect(raised('create-session-again')).toBe('swerex.exceptions.SessionExistsError');
    expect(value('set-state')).toMatchObject({ exit_code: 0, expect_string: 'SHELLPS1PREFIX' });
    expect(value('read-state').output).toBe('/tmp\nhello kept\nfn-x\nargs:0\n');
    expect(value('multi-line').output).toBe('line-1\nline-2\nheredoc body\n');
    expect(value('check-silent')).toMatchObject({ output: 'failing\n', exit_code: 1 });
    expect(value('check-ignore').exit_code).toBeNull();
    expect(raised('check-raise')).toBe('swerex.exceptions.NonZeroExitCodeError');
    expect(steps.get('check-raise')?.message).toMatch(/^Failed to clean repository: .*exit code 4/);
    expect(raised('syntax-error')).toBe('swerex.exceptions.BashIncorrectSyntaxError');
    expect(value('after-syntax-error').output).toBe('/tmp\n');

    // A timeout kills the command and its background job; the session lives on.
    expect(raised('timeout')).toBe('swerex.exceptions.CommandTimeoutError');
    expect(value('interrupt-after-timeout')).toMatchObject({ output: '', exit_code: 0 });
    expect(
      processes(steps.get('processes-after-timeout')!).filter((line) => line.startsWith('sleep')),
    ).toEqual([]);
    expect(value('state-after-timeout').output).toBe('hello\n/tmp\n');

    // `expect` answers at the match with the command still running; the interrupt ends it.
    expect(value('expect')).toMatchObject({
      output: 'waiting\n',
      expect_string: 'ready-now',
      exit_code: null,
    });
    expect(raised('next-while-held')).toBe('gym_sandboxd.errors.CapabilityUnsupportedError');
    expect(processes(steps.get('processes-while-held')!)).toContain('sleep 600 ');
    expect(value('interrupt')).toMatchObject({ exit_code: 0, expect_string: 'SHELLPS1PREFIX' });
    expect(value('interrupt').output).not.toContain('after');
    expect(
      processes(steps.get('processes-after-interrupt')!).filter((line) => line.startsWith('sleep')),
    ).toEqual([]);
    expect(value('after-interrupt').output).toBe('hello\n');
    // A command that ends by itself after its `expect`: what it printed after comes first next time.
    expect(value('expect-then-ends')).toMatchObject({ output: '', expect_string: 'first-part' });
    expect(value('expect-ended')).toBe(true);
    expect(value('after-expect-ended').output).toBe('\nrest-of-it\nnext-command\n');
    expect(value('expect-unmatched')).toMatchObject({
      output: 'done\n',
      exit_code: 0,
      expect_string: 'SHELLPS1PREFIX',
    });

    // A program that takes input lines, as typed at SWE-ReX's prompt; its interrupts.
    expect(value('interactive-start')).toMatchObject({ output: '', exit_code: 0, expect_string: '>>> ' });
    expect(value('interactive-line')).toMatchObject({ output: '42\n', exit_code: 0, expect_string: '>>> ' });
    expect(value('interactive-quit')).toMatchObject({ exit_code: 0, expect_string: 'SHELLPS1PREFIX' });
    expect(value('after-interactive').output).toBe('hello\n');
    expect(raised('interactive-syntax-error')).toBe('swerex.exceptions.BashIncorrectSyntaxError');
    expect(raised('interactive-timeout')).toBe('swerex.exceptions.CommandTimeoutError');
    expect(value('interactive-restart')).toMatchObject({ exit_code: 0, expect_string: '>>> ' });
    // The REPL sleeping in a line past its timeout: Ctrl-C brings it back to its prompt.
    expect(value('interrupt-to-prompt')).toMatchObject({ exit_code: 0, expect_string: '>>> ' });
    expect(value('interrupt-to-prompt').output).toContain('KeyboardInterrupt');
    expect(value('interactive-alive')).toMatchObject({
      output: 'alive\n',
      exit_code: 0,
      expect_string: '>>> ',
    });
    expect(value('interrupt-interactive')).toMatchObject({ exit_code: 0, expect_string: 'SHELLPS1PREFIX' });
    expect(value('interrupt-interactive').output).toContain('KeyboardInterrupt');
    expect(
      processes(steps.get('processes-after-interactive')!).filter((line) => line.startsWith('python3')),
    ).toEqual([]);

    // The same call sent twice runs once.
    expect(value('replay-first').output).toBe('first\n');
    expect(raised('replay-second')).toBe('gym_sandboxd._swe_rex_runtime.RequestReplayedError');
    expect(value('replay-count').output).toBe('1\n');

    expect(value('close-session')).toEqual({ session_type: 'bash' });
    expect(raised('after-close-session')).toBe('swerex.exceptions.SessionDoesNotExistError');

    // `execute` as subprocess.run: separate streams, env replacing the environment, cwd, check, timeout.
    expect(value('execute-shell')).toEqual({ stdout: 'out\n', stderr: 'err\n', exit_code: 3 });
    expect(value('execute-argv')).toEqual({ stdout: '1 no-home\n/tmp\n', stderr: '', exit_code: 0 });
    expect(value('execute-merged')).toEqual({ stdout: 'one\ntwo\n', stderr: '', exit_code: 0 });
    expect(raised('execute-check')).toBe('swerex.exceptions.NonZeroExitCodeError');
    expect(steps.get('execute-check')?.message).toMatch(/^setup failed: /);
    expect(raised('execute-timeout')).toBe('swerex.exceptions.CommandTimeoutError');
    expect(
      processes(steps.get('processes-after-execute-timeout')!).filter((line) => line.startsWith('sleep')),
    ).toEqual([]);

    // Files: text as Path.read_text reads it, a missing one FileNotFoundError, uploads with modes.
    expect(value('read-file')).toEqual({ content: 'héllo\nworld\n' });
    expect(raised('read-missing')).toBe('builtins.FileNotFoundError');
    expect(value('read-relative')).toEqual({ content: 'rel' });
    expect(raised('read-missing-relative')).toBe('builtins.FileNotFoundError');
    expect(raised('upload-missing')).toBe('builtins.ValueError');
    expect(value('uploaded')).toEqual({ stdout: 'tool-ran\ntop\ndeep\n', stderr: '', exit_code: 0 });

    // Stopping (twice is fine) destroys the sandbox, a command still running in it included.
    expect(value('held-at-stop')).toMatchObject({ expect_string: 'up' });
    expect(steps.get('stop')?.error).toBeUndefined();
    expect(steps.get('stop-again')?.error).toBeUndefined();
    expect(raised('is-alive-after-stop')).toBe('swerex.exceptions.DeploymentNotStartedError');
    expect(await client.listSandboxes({ labels: { 'swe-rex': '1' } })).toEqual([]);
    await expect(client.getSandbox(sandboxId)).rejects.toMatchObject({ code: 'SANDBOX_NOT_FOUND' });
  }, 300_000);
});
