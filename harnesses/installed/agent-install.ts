/**
 * Putting an agent into a sandbox that does not have it, by its recipe's source: a native binary
 * (copied in), a Node program with its Node (packed once on the host, copied in and unpacked), a
 * Python runtime made on the host (`python-runtime.ts`: packed once, copied in and unpacked), or
 * an install the sandbox runs itself. What fails by the sandbox's going is `sandbox_gone`; what
 * fails in our copy is `infra_error`; an install the recipe has the sandbox run is the agent's.
 */
import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { access, mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { GymError } from '../../core/errors.ts';
import type { HarnessOutcome, SandboxHandle } from '../harness.ts';
import { pathExists, runOnHost } from './host-command.ts';
import {
  ensureRuntimeBundle,
  type PythonHostSource,
  pythonRuntimeDir,
  readRuntimeManifest,
} from './python-runtime.ts';

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

async function runNpmInstall(prefix: string, spec: string, platform: AgentPlatform): Promise<void> {
  // npm picks the optional platform packages for the platform named, not this host's.
  await runOnHost(
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
    `npm install ${spec}`,
  );
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

/** `npm pack`s a package into the host cache once; returns the tarball's path. */
async function ensurePack(spec: string, packsDir: string): Promise<string> {
  const marker = join(packsDir, `${spec.replace(/[@/]/g, '_')}.name`);
  const known = await readFile(marker, 'utf8').catch(() => '');
  if (known !== '' && (await pathExists(join(packsDir, known)))) return join(packsDir, known);
  await mkdir(packsDir, { recursive: true });
  const output = await runOnHost(
    'npm',
    ['pack', '--pack-destination', packsDir, '--loglevel=error', spec],
    `npm pack ${spec}`,
  );
  const name = output.trim().split('\n').at(-1)!.trim();
  await writeFile(marker, name);
  return join(packsDir, name);
}

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
  if (!(await pathExists(join(dir, 'run'))) || !(await pathExists(bundle))) {
    const nodePack = await ensurePack(
      `node-linux-${platform.arch}@${NODE_RUNTIME_VERSION}`,
      join(cacheDir, 'packs'),
    );
    // Another process may build the same folder: each stages apart, the last rename wins.
    const staging = `${dir}.staging-${process.pid}-${randomBytes(4).toString('hex')}`;
    await rm(staging, { recursive: true, force: true });
    await mkdir(join(staging, 'runtime'), { recursive: true });
    await runOnHost(
      'tar',
      ['-xzf', nodePack, '-C', join(staging, 'runtime'), '--strip-components=2', 'package/bin/node'],
      'unpacking Node',
    );
    await mkdir(join(staging, 'lib'), { recursive: true });
    await runNpmInstall(join(staging, 'lib'), `${source.npmPackage}@${source.version}`, platform);
    await runOnHost(
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

export type AgentSource = NpmHostSource | NpmNodeSource | InSandboxSource | PythonHostSource;

/** What installing needs of a recipe. */
export interface AgentToInstall {
  name: string;
  source: AgentSource;
  /** The agent's executable inside sandboxes. */
  sandboxBinaryPath: string;
}

export interface InstallFailure {
  outcome: Extract<HarnessOutcome, 'sandbox_gone' | 'infra_error' | 'agent_error'>;
  message: string;
}

const GONE: InstallFailure = { outcome: 'sandbox_gone', message: 'the sandbox went away' };

/** The sandbox's CPU and C library, or why they could not be read. */
async function probePlatform(sandbox: SandboxHandle): Promise<AgentPlatform | InstallFailure> {
  const probe = await sandbox.exec({ command: PLATFORM_PROBE, timeoutMs: 10_000 });
  if (probe.status === 'sandbox_gone') return GONE;
  if (probe.status !== 'ok' || probe.exitCode !== 0)
    return {
      outcome: 'infra_error',
      message: `reading the sandbox's platform failed: ${probe.stderr.slice(-500)}`,
    };
  return parsePlatformProbe(probe.stdout);
}

/** Copies a packed folder into the sandbox's `dir` and unpacks it there with the image's tar. */
async function unpackIn(
  sandbox: SandboxHandle,
  bundle: string,
  dir: string,
  what: string,
  timeoutMs: number,
): Promise<InstallFailure | null> {
  const { size } = await stat(bundle);
  await sandbox.writeFile(`${dir}/bundle.tgz`, { stream: createReadStream(bundle), sizeBytes: size }, 0o644);
  const unpacked = await sandbox.exec({ command: `cd '${dir}' && ${NODE_AGENT_UNPACK}`, timeoutMs });
  if (unpacked.status === 'sandbox_gone') return GONE;
  if (unpacked.status !== 'ok' || unpacked.exitCode !== 0)
    return {
      outcome: 'infra_error',
      message: `unpacking ${what} in the sandbox failed (it needs tar and gzip, and room for it): ${unpacked.stderr.slice(-1000)}`,
    };
  return null;
}

/** Installs the recipe's agent in a sandbox that lacks it; null when it is there after. */
export async function installAgent(
  recipe: AgentToInstall,
  sandbox: SandboxHandle,
  cacheDir: string,
  remainingMs: number,
): Promise<InstallFailure | null> {
  const { source } = recipe;
  if (source.kind === 'in-sandbox') {
    const installed = await sandbox.exec({
      command: source.installCommand,
      timeoutMs: Math.max(1000, Math.min(15 * 60_000, remainingMs)),
    });
    if (installed.status === 'sandbox_gone') return GONE;
    if (installed.status !== 'ok' || installed.exitCode !== 0)
      return {
        outcome: 'agent_error',
        message: `installing ${recipe.name} in the sandbox failed (it needs a route to its package index, or an image that has it): ${installed.stderr.slice(-1000)}`,
      };
    return null;
  }
  const platform = await probePlatform(sandbox);
  if ('outcome' in platform) return platform;
  if (source.kind === 'npm-host') {
    const hostBinary = await ensureAgentOnHost(source, cacheDir, platform);
    const { size } = await stat(hostBinary);
    await sandbox.writeFile(
      recipe.sandboxBinaryPath,
      { stream: createReadStream(hostBinary), sizeBytes: size },
      0o755,
    );
    return null;
  }
  if (source.kind === 'npm-node') {
    const onHost = await ensureNodeAgentOnHost(source, cacheDir, platform);
    const failed = await unpackIn(
      sandbox,
      onHost.bundle,
      dirname(recipe.sandboxBinaryPath),
      recipe.name,
      120_000,
    );
    if (failed !== null) return failed;
    // The launcher last: a sandbox that has it has the whole agent.
    await sandbox.writeFile(recipe.sandboxBinaryPath, Buffer.from(nodeLauncher(source)), 0o755);
    return null;
  }
  if (platform.arch !== 'x64')
    throw new GymError(
      'CAPABILITY_UNSUPPORTED',
      `${recipe.name}'s runtime is made for x86_64 only; this sandbox's CPU is ${platform.arch}`,
    );
  const runtimeDir = pythonRuntimeDir(cacheDir, source);
  if ((await readRuntimeManifest(runtimeDir)) === null)
    throw new GymError(
      'CAPABILITY_UNSUPPORTED',
      `${recipe.name} ${source.version} is not installed on this host (no ${runtimeDir}): run \`gym agent install ${source.name}\` (scripts/setup.sh does)`,
    );
  // The runtime's folder: the launcher sits in its bin/, and is unpacked last (`ensureRuntimeBundle`).
  return unpackIn(
    sandbox,
    await ensureRuntimeBundle(runtimeDir),
    dirname(dirname(recipe.sandboxBinaryPath)),
    recipe.name,
    300_000,
  );
}
