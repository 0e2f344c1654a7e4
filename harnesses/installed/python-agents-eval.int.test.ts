/**
 * `gym eval run --harness <agent>` for the agents from PyPI, end to end through the CLI and a
 * daemon process: a swe-mini task three ways (the right fix: reward 1; a wrong fix: reward 0; an
 * agent that runs past its wall time: its own time limit, reward 0, never an infrastructure
 * fault), every sandbox with network `none`, the agent's calls in the gateway's records and its
 * own trajectory beside the rollouts. On Docker with the runtime bound read-only, and on the
 * Kubernetes provider (through the test-only API emulator) with the runtime copied in.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildSweMiniImages } from '../../cli/task-images.ts';
import { loadEnvironment, readRows } from '../../environments/environment.ts';
import { readJsonl } from '../../environments/runner/files.ts';
import { gymFields } from '../../environments/runner/rollout-line.ts';
import { runGym } from '../../test/cli-process.ts';
import { spawnDaemonProcess } from '../../test/daemon-harness.ts';
import { dockerTestEnvironment, localImages } from '../../test/docker-available.ts';
import { KubernetesEmulator } from '../../test/k8s-emulator/emulator.ts';
import { ModelScriptSchema } from '../scripted-model/script.ts';
import { type ScriptedModelServer, startScriptedModelServer } from '../scripted-model/server.ts';
import type { InstalledAgentRecipe } from './installed-agent.ts';
import { MINI_SWE_AGENT_RECIPE } from './mini-swe-agent.ts';
import { OPENHANDS_RECIPE } from './openhands.ts';
import { type PythonHostSource, pythonRuntimeDir, readRuntimeManifest } from './python-runtime.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const AGENT_CACHE_DIR = join(homedir(), '.cache', 'gym', 'agents');
const TASK = 'textstats-1';
const FIX = `sed -i 's/text.split(" ")/text.split()/' textstats/core.py`;
const WRONG = `sed -i 's/return 0/return -1/' textstats/core.py`;

/** Each agent: its harness, and the scripted replies in the tool-call format it speaks. */
interface AgentCase {
  recipe: InstalledAgentRecipe;
  /** The replies that run `commands`, one a turn, then end the run. */
  replies(commands: string[]): unknown[];
  /** One reply repeated forever (an agent that never ends). */
  endless: unknown;
  /** What a step's command printed, from its observation as the agent shows it. */
  printed(observation: string): string;
}

const bash = (command: string) => ({
  content: 'Next.',
  toolCalls: [{ name: 'bash', arguments: { command } }],
});
/** OpenHands' terminal tool; its tools take a risk and a summary. */
const terminal = (command: string) => ({
  toolCalls: [{ name: 'terminal', arguments: { command, security_risk: 'LOW', summary: 'Run it' } }],
});
const AGENTS: AgentCase[] = [
  {
    recipe: MINI_SWE_AGENT_RECIPE,
    replies: (commands) => [...commands.map(bash), bash('echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT')],
    endless: bash('sleep 2; echo still going'),
    // mini shows an observation as JSON: its `output` is what the command printed.
    printed: (observation) => String((JSON.parse(observation) as { output?: string }).output),
  },
  {
    recipe: OPENHANDS_RECIPE,
    replies: (commands) => [
      ...commands.map(terminal),
      { toolCalls: [{ name: 'finish', arguments: { message: 'Done.', summary: 'Done' } }] },
    ],
    // Output that changes every turn: the SDK's stuck detector ends a run that repeats itself.
    endless: terminal('date +%s%N && sleep 5'),
    // A terminal's text: its escapes (bracketed paste) and, on a loaded host, the echo of the
    // command itself come and go between two runs of one command; what it printed stays.
    printed: (observation) =>
      observation
        // biome-ignore lint/suspicious/noControlCharactersInRegex: terminal escapes are the point
        .replace(/\x1b\[[0-9;?]*[A-Za-z]/g, '')
        .split('\n')
        .filter((line) => line.trim() !== '' && line.trim() !== MODULES)
        .join('\n'),
  },
];

/** What the task's own Python can import: the agent's runtime must add nothing to it. */
const MODULES = `python3 -c "import sys, pkgutil; print(sys.version, sys.path); print(sorted(m.name for m in pkgutil.iter_modules()))"`;

describe.skipIf(skipReason !== undefined)('agents from PyPI through gym eval run', () => {
  let model: ScriptedModelServer;
  let emulator: KubernetesEmulator;
  let directory = '';
  let envDir = '';

  beforeAll(async () => {
    for (const agent of AGENTS) {
      const dir = pythonRuntimeDir(AGENT_CACHE_DIR, agent.recipe.source as PythonHostSource);
      expect(await readRuntimeManifest(dir), `no runtime at ${dir}: run gym agent install`).not.toBeNull();
    }
    await buildSweMiniImages(localImages(docker));
    directory = await mkdtemp(join(tmpdir(), 'gym-pyagents-'));
    // swe-mini with a wall time short enough for the endless agent to meet it.
    const swe = await loadEnvironment('swe-mini');
    envDir = join(directory, 'swe-short');
    await mkdir(envDir, { recursive: true });
    const definition = JSON.parse(await readFile(join(swe.directory, 'environment.json'), 'utf8'));
    await writeFile(
      join(envDir, 'environment.json'),
      JSON.stringify({
        ...definition,
        name: 'swe-short',
        data: 'rows.jsonl',
        limits: { ...definition.limits, wallTimeMs: 60_000 },
      }),
    );
    const [row] = (await readRows(swe.dataPath)).filter((item) => item.instance_id === TASK);
    // One file of rows per agent, the variant and the agent in the problem statement: the
    // scripted model answers each conversation by them.
    for (const agent of AGENTS)
      await writeFile(
        join(envDir, `${agent.recipe.name}.jsonl`),
        ['right', 'wrong', 'endless']
          .map((variant) =>
            JSON.stringify({
              ...row,
              instance_id: `${TASK}-${variant}`,
              problem_statement: `${String(row!.problem_statement)}\n(variant ${agent.recipe.name} ${variant})`,
            }),
          )
          .join('\n')
          .concat('\n'),
      );
    model = await startScriptedModelServer(
      ModelScriptSchema.parse({
        conversations: AGENTS.flatMap((agent) => [
          { match: `variant ${agent.recipe.name} right`, replies: agent.replies([MODULES, FIX, MODULES]) },
          { match: `variant ${agent.recipe.name} wrong`, replies: agent.replies([WRONG]) },
          {
            match: `variant ${agent.recipe.name} endless`,
            // Side calls (a title, a summary) declare no tools.
            rules: [{ hasTools: false, reply: { content: 'Still checking.' } }],
            replies: [agent.endless],
          },
        ]),
      }),
    );
    emulator = await KubernetesEmulator.start(docker);
  }, 300_000);

  afterAll(async () => {
    await emulator?.close();
    await model?.close();
    if (directory !== '') await rm(directory, { recursive: true, force: true });
  });

  for (const agent of AGENTS) {
    const source = agent.recipe.source as PythonHostSource;
    for (const provider of ['docker', 'kubernetes'] as const) {
      it(`${agent.recipe.name} on ${provider}: the right fix 1, a wrong fix 0, past its time its own failure`, async () => {
        const stateDir = await mkdtemp(join(directory, `${provider}-`));
        const kubeconfig = join(stateDir, 'kubeconfig');
        await writeFile(kubeconfig, emulator.kubeconfig('gym-pyagents'), { mode: 0o600 });
        const providerLines =
          provider === 'docker'
            ? ['  - name: docker', `    options: { allowedHostPaths: [${AGENT_CACHE_DIR}] }`]
            : ['  - name: kubernetes', `    options: { kubeconfigPath: ${kubeconfig} }`];
        const configPath = join(stateDir, 'gym.yaml');
        await writeFile(
          configPath,
          [
            `stateDir: ${stateDir}`,
            `namespace: pyagents-${randomBytes(3).toString('hex')}`,
            'listen: { host: 127.0.0.1, port: 0 }',
            'logLevel: warn',
            'providers:',
            ...providerLines,
            `gateway: { upstream: { baseUrl: ${model.baseUrl} }, maxRetries: 0 }`,
            '',
          ].join('\n'),
        );
        let child: ChildProcess | undefined;
        try {
          child = (await spawnDaemonProcess(configPath, stateDir)).child;
          const output = join(stateDir, 'rollouts.jsonl');
          const bind = JSON.stringify({
            readOnlyBinds: [
              { hostPath: pythonRuntimeDir(AGENT_CACHE_DIR, source), path: `/opt/gym-agents/${source.name}` },
            ],
          });
          const run = await runGym(
            [
              'eval',
              'run',
              '--env',
              envDir,
              '--input',
              join(envDir, `${agent.recipe.name}.jsonl`),
              '--harness',
              agent.recipe.name,
              '--concurrency',
              '3',
              '--output',
              output,
              ...(provider === 'docker' ? ['--provider-options', bind] : []),
            ],
            stateDir,
          );
          expect(run.code, run.stderr).toBe(0);
          const lines = await readJsonl(output);
          const byId = new Map(lines.map((line) => [String(line.instance_id), line]));
          const why = JSON.stringify(
            lines.map((line) => ({ id: line.instance_id, gym: gymFields(line) })),
          ).slice(0, 6000);
          expect(byId.get(`${TASK}-right`)?.reward, why).toBe(1);
          expect(byId.get(`${TASK}-wrong`)?.reward, why).toBe(0);
          const endless = gymFields(byId.get(`${TASK}-endless`)!);
          expect(byId.get(`${TASK}-endless`)?.reward, why).toBe(0);
          expect(JSON.stringify(endless), why).toContain('time_limit');
          // Nothing was an infrastructure fault.
          expect(await readJsonl(join(stateDir, 'rollouts_failures.jsonl')).catch(() => [])).toEqual([]);
          const right = gymFields(byId.get(`${TASK}-right`)!) as Record<string, unknown>;
          // Every call the agent made is in the gateway's records (4 replies: look, fix, look, submit).
          expect((right.model_calls as unknown[]).length, why).toBeGreaterThanOrEqual(4);
          // The task's own Python (3.11, its pytest) is what the agent's commands met, before and
          // after the fix: the agent's runtime (3.13) added nothing to it.
          const looks = (
            right.trajectory as Array<{ action?: { arguments: { command?: string } }; observation?: string }>
          )
            .filter((step) => step.action?.arguments.command === MODULES)
            .map((step) => agent.printed(step.observation ?? '{}'));
          expect(looks).toHaveLength(2);
          expect(looks[0]).toContain('3.11');
          expect(looks[0]).toContain("'pytest'");
          for (const agentModule of ['minisweagent', 'openhands', 'litellm'])
            expect(looks[0]).not.toContain(agentModule);
          expect(looks[0]).not.toContain('gym-agents');
          expect(looks[1]).toBe(looks[0]);
          // The agent's own trajectory is kept beside the rollouts.
          const kept = await readdir(join(stateDir), { recursive: true });
          expect(
            kept.some((name) => String(name).endsWith('trajectory.json')),
            kept.join(', '),
          ).toBe(true);
        } finally {
          await import('node:fs').then((fs) =>
            fs.cpSync(stateDir, `/tmp/pyagents-last-${provider}`, { recursive: true }),
          );
          child?.kill('SIGTERM');
          await new Promise((resolve) =>
            child?.exitCode === null ? child.once('exit', resolve) : resolve(null),
          );
        }
      }, 900_000);
    }
  }
});
