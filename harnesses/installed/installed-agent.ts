/**
 * Agent CLIs that run inside the sandbox (Codex CLI, Claude Code, OpenCode, ...). Each is a
 * recipe: where its files come from, how it is configured to use the rollout's gateway, how it is
 * run headless, and how its output becomes a trajectory. The harness installs it (from a host
 * cache filled from the npm registry, copied in unless the image or a read-only bind already has
 * it), has the gateway made reachable from the sandbox (at whatever URL its provider gives),
 * runs it, and collects what it did.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { access, mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { GymError, isGymError } from '../../core/errors.ts';
import {
  type AgentFile,
  type Harness,
  type HarnessResult,
  type HarnessRunContext,
  RunClock,
  type TrajectoryStep,
} from '../harness.ts';
import type { PythonHostSource } from './python-host-source.ts';

export interface AgentRunSettings {
  /** The gateway as the agent reaches it from inside the sandbox, up to `/v1`. */
  baseUrl: string;
  apiKey: string;
  model: string;
  workdir: string;
  instruction: string;
  /** Where the agent keeps its config and session files in the sandbox. */
  homeDir: string;
}

/** What reading a result file the agent wrote can fail with by the agent's doing alone. */
const AGENT_RESULT_FILE_ERRORS = new Set(['FILE_NOT_FOUND', 'PATH_KIND_MISMATCH', 'FILE_TOO_LARGE']);

/** The JSON objects of a JSONL event stream; other lines (banners, logs) are skipped. */
export function parseJsonLines(stdout: string): Array<Record<string, unknown>> {
  return stdout.split('\n').flatMap((line) => {
    if (!line.startsWith('{')) return [];
    try {
      return [JSON.parse(line) as Record<string, unknown>];
    } catch {
      return [];
    }
  });
}

/** Appends a step read from an agent's own log (its timing is not known). */
export function logStep(
  steps: TrajectoryStep[],
  fields: Omit<TrajectoryStep, 'index' | 'startedAt' | 'durationMs'>,
): void {
  steps.push({ index: steps.length, startedAt: '', durationMs: 0, ...fields });
}

export interface ParsedRun {
  finalMessage: string | null;
  steps: TrajectoryStep[];
  /** An error the agent itself reported (a failed turn). */
  error: string | null;
  events: unknown[];
}

/** A Linux sandbox's CPU (as npm names it) and C library: which native binary runs there. */
export interface AgentPlatform {
  arch: 'x64' | 'arm64';
  libc: 'glibc' | 'musl';
}

/** The platform of this host (the default for a binary installed outside any sandbox). */
export function hostPlatform(): AgentPlatform {
  return { arch: process.arch === 'arm64' ? 'arm64' : 'x64', libc: 'glibc' };
}

/**
 * Reads `uname -m` and whether the dynamic loader is musl's, as printed by
 * {@link PLATFORM_PROBE}; an architecture no agent ships for is an error naming it.
 */
export function parsePlatformProbe(output: string): AgentPlatform {
  const [machine = '', loader = ''] = output.split('\n').map((line) => line.trim());
  const arch = ({ x86_64: 'x64', amd64: 'x64', aarch64: 'arm64', arm64: 'arm64' } as const)[
    machine as 'x86_64'
  ];
  if (arch === undefined)
    throw new GymError(
      'CAPABILITY_UNSUPPORTED',
      `no agent binaries for the sandbox's architecture "${machine}"`,
      {
        details: { machine },
      },
    );
  return { arch, libc: loader === 'musl' ? 'musl' : 'glibc' };
}

/** Prints the machine, then `musl` when the sandbox's C library is musl (Alpine). */
export const PLATFORM_PROBE =
  'uname -m; if ls /lib/ld-musl-* >/dev/null 2>&1; then echo musl; else echo glibc; fi';

/** An agent shipped as a native binary in an npm package: installed on the host, copied in. */
export interface NpmHostSource {
  kind: 'npm-host';
  npmPackage: string;
  version: string;
  /** The binary's path inside the installed npm prefix, for the sandbox's platform. */
  binaryInPackage: string | ((platform: AgentPlatform) => string);
}

/**
 * An agent that is a Node program on the npm registry (Qwen Code, Pi): it is installed with its
 * dependencies on the host (`npm install` for the sandbox's platform) beside a Node runtime (the
 * `node-linux-<arch>` package, Node's official build, which needs glibc), cached; that folder is
 * packed once, copied into the sandbox and unpacked with `tar` next to a launcher, the recipe's
 * `sandboxBinaryPath`. The folder itself can be bind-mounted read-only instead.
 */
export interface NpmNodeSource {
  kind: 'npm-node';
  npmPackage: string;
  version: string;
  /** The CLI's script inside the package. */
  entry: string;
}

/** The Node runtime given to Node agents (Qwen Code needs Node 22 or later). */
export const NODE_RUNTIME_VERSION = '24.22.1';

/**
 * An agent installed inside the sandbox by its own package manager (pip): the sandbox needs a
 * route to the package index (network `bridge`), or an image that already has it.
 */
export interface InSandboxSource {
  kind: 'in-sandbox';
  installCommand: string;
}

export interface InstalledAgentRecipe {
  name: string;
  source: NpmHostSource | NpmNodeSource | InSandboxSource | PythonHostSource;
  /** The agent's executable inside sandboxes (checked before installing). */
  sandboxBinaryPath: string;
  configure(settings: AgentRunSettings): {
    files: Array<{ path: string; content: string; mode?: number }>;
    env: Record<string, string>;
  };
  /** The command line; its first element is the agent's executable (replaced by `binaryPath`). */
  command(settings: AgentRunSettings): string[];
  /** Files the agent writes that `parse` needs (a trajectory file), read after the run. */
  resultFiles?(settings: AgentRunSettings): string[];
  parse(stdout: string, files: Record<string, string>): ParsedRun;
}

export interface InstalledAgentOptions {
  /** Host directory caching installed agents; default `~/.cache/gym/agents`. */
  cacheDir?: string;
  /**
   * The agent's executable in an image that has it preinstalled (say `/usr/local/bin/mini`):
   * used instead of the recipe's path, and never installed; an image without it is an error.
   */
  binaryPath?: string;
}

function runNpmInstall(prefix: string, spec: string, platform: AgentPlatform): Promise<void> {
  return new Promise((resolve, reject) => {
    // npm picks the optional platform packages for the platform named, not this host's.
    const child = spawn(
      'npm',
      [
        'install',
        '--prefix',
        prefix,
        '--no-save',
        '--no-audit',
        '--no-fund',
        '--loglevel=error',
        '--os=linux',
        `--cpu=${platform.arch}`,
        `--libc=${platform.libc}`,
        spec,
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let errors = '';
    child.stderr.on('data', (chunk: Buffer) => {
      errors = (errors + chunk.toString()).slice(-2000);
    });
    child.on('error', reject);
    child.on('close', (code) =>
      code === 0
        ? resolve()
        : reject(new GymError('INTERNAL', `npm install ${spec} failed: ${errors.trim()}`)),
    );
  });
}

/**
 * Installs the recipe's package for `platform` into the host cache once; returns the binary's host
 * path. (The x64 glibc install keeps the folder name it had before platforms were told apart.)
 */
export async function ensureAgentOnHost(
  source: NpmHostSource,
  cacheDir: string,
  platform: AgentPlatform = hostPlatform(),
): Promise<string> {
  const suffix =
    platform.arch === 'x64' && platform.libc === 'glibc'
      ? ''
      : `-linux-${platform.arch}${platform.libc === 'musl' ? '-musl' : ''}`;
  const prefix = join(cacheDir, `${source.npmPackage.replace(/[@/]/g, '_')}-${source.version}${suffix}`);
  const inPackage =
    typeof source.binaryInPackage === 'string' ? source.binaryInPackage : source.binaryInPackage(platform);
  const binary = join(prefix, inPackage);
  const isPresent = await access(binary).then(
    () => true,
    () => false,
  );
  if (!isPresent) {
    await mkdir(prefix, { recursive: true });
    await runNpmInstall(prefix, `${source.npmPackage}@${source.version}`, platform);
  }
  return binary;
}

function run(command: string, args: string[], what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    let errors = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      errors = (errors + chunk.toString()).slice(-2000);
    });
    child.on('error', reject);
    child.on('close', (code) =>
      code === 0 ? resolve(output) : reject(new GymError('INTERNAL', `${what} failed: ${errors.trim()}`)),
    );
  });
}

/** `npm pack`s a package into the host cache once; returns the tarball's path. */
async function ensurePack(spec: string, packsDir: string): Promise<string> {
  const marker = join(packsDir, `${spec.replace(/[@/]/g, '_')}.name`);
  const known = await readFile(marker, 'utf8').catch(() => '');
  if (known !== '' && (await exists(join(packsDir, known)))) return join(packsDir, known);
  await mkdir(packsDir, { recursive: true });
  const output = await run(
    'npm',
    ['pack', '--pack-destination', packsDir, '--loglevel=error', spec],
    `npm pack ${spec}`,
  );
  const name = output.trim().split('\n').at(-1)!.trim();
  await writeFile(marker, name);
  return join(packsDir, name);
}

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );

/** The launcher of a Node agent: the runtime and the installed package sit beside it. */
export function nodeLauncher(source: NpmNodeSource): string {
  return `#!/bin/sh\nd=$(dirname "$(readlink -f "$0")")\nexec "$d/runtime/node" "$d/lib/node_modules/${source.npmPackage}/${source.entry}" "$@"\n`;
}

/** What the sandbox runs, in the agent's folder, to unpack the bundle copied there. */
export const NODE_AGENT_UNPACK = 'tar -xzf bundle.tgz && rm -f bundle.tgz';

export interface NodeAgentOnHost {
  /** The folder (runtime/node, lib/node_modules, run): bind it read-only at the launcher's folder. */
  dir: string;
  /** The folder but the launcher, packed (`tar -czf`), for copying into a sandbox. */
  bundle: string;
}

/** Folders being built by this process: concurrent rollouts wait for the one build. */
const nodeAgentBuilds = new Map<string, Promise<NodeAgentOnHost>>();

/** Installs (once) a Node agent and the Node runtime for `platform` into a folder, and packs it. */
export function ensureNodeAgentOnHost(
  source: NpmNodeSource,
  cacheDir: string,
  platform: AgentPlatform = hostPlatform(),
): Promise<NodeAgentOnHost> {
  const key = JSON.stringify([source, cacheDir, platform]);
  let build = nodeAgentBuilds.get(key);
  if (build === undefined) {
    build = buildNodeAgentOnHost(source, cacheDir, platform).finally(() => nodeAgentBuilds.delete(key));
    nodeAgentBuilds.set(key, build);
  }
  return build;
}

async function buildNodeAgentOnHost(
  source: NpmNodeSource,
  cacheDir: string,
  platform: AgentPlatform = hostPlatform(),
): Promise<NodeAgentOnHost> {
  if (platform.libc === 'musl') {
    throw new GymError(
      'CAPABILITY_UNSUPPORTED',
      `${source.npmPackage} needs Node, whose official Linux builds need glibc; this sandbox's C library is musl: use an image that has the agent installed`,
      { details: { npmPackage: source.npmPackage, libc: platform.libc } },
    );
  }
  const dir = join(
    cacheDir,
    `${source.npmPackage.replace(/[@/]/g, '_')}-${source.version}-node${NODE_RUNTIME_VERSION}-linux-${platform.arch}`,
  );
  const bundle = `${dir}.tgz`;
  if (!(await exists(join(dir, 'run'))) || !(await exists(bundle))) {
    const nodePack = await ensurePack(
      `node-linux-${platform.arch}@${NODE_RUNTIME_VERSION}`,
      join(cacheDir, 'packs'),
    );
    // Another process may build the same folder: each stages apart, the last rename wins.
    const staging = `${dir}.staging-${process.pid}-${randomBytes(4).toString('hex')}`;
    await rm(staging, { recursive: true, force: true });
    await mkdir(join(staging, 'runtime'), { recursive: true });
    await run(
      'tar',
      ['-xzf', nodePack, '-C', join(staging, 'runtime'), '--strip-components=2', 'package/bin/node'],
      'unpacking Node',
    );
    await mkdir(join(staging, 'lib'), { recursive: true });
    await runNpmInstall(join(staging, 'lib'), `${source.npmPackage}@${source.version}`, platform);
    await run(
      'tar',
      ['-czf', `${staging}.tgz`, '-C', staging, 'runtime', 'lib'],
      `packing ${source.npmPackage}`,
    );
    await writeFile(join(staging, 'run'), nodeLauncher(source), { mode: 0o755 });
    await rm(dir, { recursive: true, force: true });
    await rename(staging, dir);
    await rename(`${staging}.tgz`, bundle);
  }
  return { dir, bundle };
}

export function createInstalledAgentHarness(
  recipe: InstalledAgentRecipe,
  options: InstalledAgentOptions = {},
): Harness {
  if (options.binaryPath !== undefined && !options.binaryPath.startsWith('/'))
    throw new GymError(
      'VALIDATION_FAILED',
      `binaryPath must be an absolute path, not "${options.binaryPath}"`,
    );
  const cacheDir = options.cacheDir ?? join(homedir(), '.cache', 'gym', 'agents');
  return {
    name: recipe.name,
    needsModel: true,
    async run({ sandbox, task, model, limits }: HarnessRunContext): Promise<HarnessResult> {
      const clock = new RunClock(limits);
      const base = { steps: 0, costUsd: 0 };
      const fail = (
        outcome: HarnessResult['outcome'],
        message: string,
        trajectory: TrajectoryStep[] = [],
        extra?: Record<string, unknown>,
        agentFiles?: AgentFile[],
      ) =>
        clock.finish({
          ...base,
          outcome,
          submission: null,
          message,
          trajectory,
          steps: trajectory.length,
          ...(extra === undefined ? {} : { extra }),
          ...(agentFiles === undefined ? {} : { agentFiles }),
        });

      if (sandbox.exposeGateway === undefined)
        return fail('agent_error', 'this sandbox cannot reach the gateway (its handle cannot expose it)');
      const preinstalled = options.binaryPath;
      const isInstalled = await sandbox.exec({
        argv: ['test', '-x', preinstalled ?? recipe.sandboxBinaryPath],
        timeoutMs: 10_000,
      });
      if (isInstalled.status === 'sandbox_gone') return fail('sandbox_gone', 'the sandbox went away');
      if (isInstalled.status !== 'ok')
        return fail('infra_error', `checking for ${recipe.name} ended with status ${isInstalled.status}`);
      if (preinstalled !== undefined && isInstalled.exitCode !== 0)
        return fail(
          'agent_error',
          `the image has no executable ${preinstalled} (the harness option binaryPath says ${recipe.name} is preinstalled there)`,
        );
      if (isInstalled.exitCode !== 0 && recipe.source.kind === 'npm-host') {
        const probe = await sandbox.exec({ command: PLATFORM_PROBE, timeoutMs: 10_000 });
        if (probe.status === 'sandbox_gone') return fail('sandbox_gone', 'the sandbox went away');
        if (probe.status !== 'ok' || probe.exitCode !== 0)
          return fail('infra_error', `reading the sandbox's platform failed: ${probe.stderr.slice(-500)}`);
        const hostBinary = await ensureAgentOnHost(recipe.source, cacheDir, parsePlatformProbe(probe.stdout));
        const { size } = await stat(hostBinary);
        await sandbox.writeFile(
          recipe.sandboxBinaryPath,
          { stream: createReadStream(hostBinary), sizeBytes: size },
          0o755,
        );
      } else if (isInstalled.exitCode !== 0 && recipe.source.kind === 'npm-node') {
        const probe = await sandbox.exec({ command: PLATFORM_PROBE, timeoutMs: 10_000 });
        if (probe.status === 'sandbox_gone') return fail('sandbox_gone', 'the sandbox went away');
        if (probe.status !== 'ok' || probe.exitCode !== 0)
          return fail('infra_error', `reading the sandbox's platform failed: ${probe.stderr.slice(-500)}`);
        const onHost = await ensureNodeAgentOnHost(recipe.source, cacheDir, parsePlatformProbe(probe.stdout));
        const dir = dirname(recipe.sandboxBinaryPath);
        const { size } = await stat(onHost.bundle);
        await sandbox.writeFile(
          `${dir}/bundle.tgz`,
          { stream: createReadStream(onHost.bundle), sizeBytes: size },
          0o644,
        );
        const unpacked = await sandbox.exec({
          command: `cd '${dir}' && ${NODE_AGENT_UNPACK}`,
          timeoutMs: 120_000,
        });
        if (unpacked.status === 'sandbox_gone') return fail('sandbox_gone', 'the sandbox went away');
        if (unpacked.status !== 'ok' || unpacked.exitCode !== 0)
          return fail(
            'infra_error',
            `unpacking ${recipe.name} in the sandbox failed (it needs tar and gzip): ${unpacked.stderr.slice(-1000)}`,
          );
        // The launcher last: a sandbox that has it has the whole agent.
        await sandbox.writeFile(recipe.sandboxBinaryPath, Buffer.from(nodeLauncher(recipe.source)), 0o755);
      } else if (isInstalled.exitCode !== 0 && recipe.source.kind === 'in-sandbox') {
        const installed = await sandbox.exec({
          command: recipe.source.installCommand,
          timeoutMs: Math.max(1000, Math.min(15 * 60_000, clock.remainingMs)),
        });
        if (installed.status === 'sandbox_gone') return fail('sandbox_gone', 'the sandbox went away');
        if (installed.status !== 'ok' || installed.exitCode !== 0) {
          return fail(
            'agent_error',
            `installing ${recipe.name} in the sandbox failed (it needs a route to its package index, or an image that has it): ${installed.stderr.slice(-1000)}`,
          );
        }
      }
      const { url } = await sandbox.exposeGateway();
      const settings: AgentRunSettings = {
        baseUrl: `${url}${model.basePath}`,
        apiKey: model.apiKey,
        model: model.model,
        workdir: task.workdir,
        instruction: task.instruction,
        homeDir: `/tmp/gym-agent-${recipe.name}`,
      };
      const { files: configFiles, env } = recipe.configure(settings);
      for (const file of configFiles)
        await sandbox.writeFile(file.path, Buffer.from(file.content), file.mode ?? 0o600);
      const argv = recipe.command(settings);
      if (preinstalled !== undefined) argv[0] = preinstalled;
      const result = await sandbox.exec({
        argv,
        cwd: task.workdir,
        env: { HOME: settings.homeDir, ...env },
        timeoutMs: Math.max(1000, clock.remainingMs),
        maxOutputBytes: 32 * 1024 * 1024,
      });
      const files: Record<string, string> = {};
      /** Result files the agent left unreadable (none, a directory, too big): its output, not a fault. */
      const unreadable: Record<string, string> = {};
      // Its output streams and result files are kept with the rollout (the runner bounds them).
      const agentFiles: AgentFile[] = [
        { name: 'stdout.txt', content: Buffer.from(result.stdout) },
        { name: 'stderr.txt', content: Buffer.from(result.stderr) },
      ].filter((file) => file.content.length > 0);
      for (const path of recipe.resultFiles?.(settings) ?? []) {
        // An agent that wrote no such file, or made it something we cannot read (a directory, a
        // file past the read limit), is its business; a daemon that cannot read it is not.
        files[path] = await sandbox.readFile(path).then(
          (content) => {
            agentFiles.push({ name: basename(path), content });
            return content.toString('utf8');
          },
          (error: unknown) => {
            if (isGymError(error) && AGENT_RESULT_FILE_ERRORS.has(error.code)) {
              unreadable[path] = `${error.code}: ${error.message}`;
              return '';
            }
            if (result.status === 'sandbox_gone') return '';
            throw error;
          },
        );
      }
      // The agent's own output may be anything: what its recipe cannot parse is the agent's error.
      let parsed: ParsedRun;
      try {
        parsed = recipe.parse(result.stdout, files);
      } catch (error) {
        parsed = {
          finalMessage: null,
          steps: [],
          error: `${recipe.name}'s output could not be read: ${(error as Error).message}`,
          events: [],
        };
      }
      const extra = {
        ...(Object.keys(unreadable).length === 0 ? {} : { unreadableResultFiles: unreadable }),
        events: parsed.events,
        stderrTail: result.stderr.slice(-4000),
        exitCode: result.exitCode,
      };
      if (result.status === 'sandbox_gone')
        return fail(
          'sandbox_gone',
          'the sandbox went away while the agent ran',
          parsed.steps,
          extra,
          agentFiles,
        );
      // The agent destroyed its own sandbox (its memory, or processes that resisted their kill).
      if (result.sandboxLost === true)
        return fail(
          'agent_error',
          `the agent lost its sandbox: ${result.reason ?? result.status}`,
          parsed.steps,
          extra,
          agentFiles,
        );
      if (result.status === 'timeout')
        return fail(
          'time_limit',
          `the agent ran past ${limits.wallTimeMs} ms and was killed`,
          parsed.steps,
          extra,
          agentFiles,
        );
      if (result.status !== 'ok' || result.exitCode !== 0 || parsed.error !== null) {
        return fail(
          'agent_error',
          parsed.error ??
            `${recipe.name} exited with ${result.exitCode} (${result.status}): ${result.stderr.slice(-1000)}`,
          parsed.steps,
          extra,
          agentFiles,
        );
      }
      return clock.finish({
        ...base,
        outcome: 'submitted',
        submission: parsed.finalMessage ?? '',
        trajectory: parsed.steps,
        steps: parsed.steps.length,
        extra,
        agentFiles,
      });
    },
  };
}
