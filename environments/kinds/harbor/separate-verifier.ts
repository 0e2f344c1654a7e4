/**
 * Harbor's separate verifier (`[verifier] environment_mode = "separate"`, implied by a
 * `[verifier.environment]`): the tests run in a sandbox of their own, from an image built from
 * the task's `tests/` folder (its Dockerfile bakes /tests/test.sh in; Harbor uploads no tests
 * then) or the verifier environment's `docker_image`, with the agent's artifacts copied in at
 * their own paths: `/logs/artifacts/` and each entry of task.toml's `artifacts`.
 *
 * The agent's sandbox is the adversary's: its processes are stopped before anything is read, the
 * artifacts come out as a tar made there (by its own tar) and are read on this side entry by
 * entry, and only regular files and folders under a declared source are written into the
 * verifier's sandbox; a link, a `..` or any other path is dropped. Sources under /tests or
 * /logs/verifier are refused when the task is read (they would let the agent write the tests or
 * the reward).
 */
import { Readable } from 'node:stream';
import * as tar from 'tar-stream';
import { isGymError } from '../../../core/errors.ts';
import type { SandboxHandle } from '../../../harnesses/harness.ts';
import { clientSandboxHandle } from '../../../harnesses/sandbox-handle.ts';
import { type HarborTestRun, verifyScript } from '../../verifiers/script.ts';
import type { Verdict } from '../../verifiers/verifier.ts';
import type { VerifyContext } from '../kind.ts';

/** Harbor's convention: what the agent publishes for grading. */
export const ARTIFACTS_DIRECTORY = '/logs/artifacts';
/** The most the artifacts may take in all: more is the agent's doing, and graded as missing. */
const MAX_ARTIFACT_BYTES = 256 * 1024 * 1024;
const ARCHIVE_PATH = '/tmp/.gym-artifacts.tar';
const NOTHING_PUBLISHED = 'gym-no-artifact-exists';

/** Normalises an absolute path (no `.`, `..` or double slashes); undefined when it is not one. */
export function normalisedPath(path: string): string | undefined {
  if (!path.startsWith('/')) return undefined;
  const parts: string[] = [];
  for (const part of path.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') return undefined;
    parts.push(part);
  }
  return `/${parts.join('/')}`;
}

const under = (root: string, path: string) => root === '/' || path === root || path.startsWith(`${root}/`);

/** Why an artifact source cannot be copied into a verifier's sandbox, or undefined. */
export function refusedArtifact(source: string): string | undefined {
  const path = normalisedPath(source);
  if (path === undefined) return `artifact "${source}" is not an absolute path without ".."`;
  for (const reserved of ['/tests', '/logs/verifier'])
    if (under(path, reserved) || under(reserved, path))
      return `artifact "${source}" would reach ${reserved}, which is the verifier's (the agent could write the tests or the reward)`;
  return undefined;
}

interface ArtifactFile {
  path: string;
  content: Buffer;
  mode: number;
}

/** The entries of the agent's tar that are regular files under a declared source. */
async function artifactFiles(archive: Buffer, sources: readonly string[]): Promise<ArtifactFile[]> {
  const extract = tar.extract();
  const files: ArtifactFile[] = [];
  const done = new Promise<void>((resolve, reject) => {
    extract.on('entry', (header, stream, next) => {
      const chunks: Buffer[] = [];
      stream.on('data', (chunk: unknown) => chunks.push(chunk as Buffer));
      stream.on('end', () => {
        const path = normalisedPath(`/${header.name}`);
        if (header.type === 'file' && path !== undefined && sources.some((source) => under(source, path)))
          files.push({ path, content: Buffer.concat(chunks), mode: (header.mode ?? 0o644) & 0o777 });
        next();
      });
    });
    extract.on('finish', resolve);
    extract.on('error', reject);
  });
  Readable.from([archive]).pipe(extract);
  await done;
  return files;
}

/** What `verifySeparately` needs of the row. */
export interface SeparateVerifier {
  image: string;
  workdir: string;
  /** task.toml's `artifacts` sources, checked by `refusedArtifact`. */
  artifacts: string[];
  spec: Record<string, unknown>;
  test: HarborTestRun;
  timeoutMs: number;
  /**
   * Set when the task's phases have egress policies: the verifier's sandbox is created with
   * `spec.network` (the verifier phase's), its log kept with the rollout's records; `refused`
   * turns the daemon's refusal of that policy into the verdict.
   */
  network?: { refused(error: unknown): Verdict };
}

/**
 * Collects the artifacts from the agent's sandbox, releases it, and runs the tests in a fresh
 * sandbox of the verifier's image with the artifacts written in.
 */
export async function verifySeparately(context: VerifyContext, verifier: SeparateVerifier): Promise<Verdict> {
  const agent = context.sandbox;
  if (agent.stopProcesses === undefined)
    return {
      outcome: 'infra_error',
      reward: 0,
      details: {
        reason: "this provider cannot stop the agent's processes, so its artifacts could change while read",
      },
    };
  await agent.stopProcesses();
  const sources = [ARTIFACTS_DIRECTORY, ...verifier.artifacts].map((source) => normalisedPath(source)!);
  const quoted = sources.map((source) => `'${source.slice(1).replaceAll("'", `'\\''`)}'`).join(' ');
  // Only the sources that exist; a missing one is the agent's (nothing published), not an error.
  const packed = await agent.exec({
    command: `rm -f ${ARCHIVE_PATH}; set --; for p in ${quoted}; do if [ -e "/$p" ]; then set -- "$@" "$p"; fi; done; if [ $# -eq 0 ]; then echo ${NOTHING_PUBLISHED}; else tar -cf ${ARCHIVE_PATH} -C / "$@"; fi`,
    cwd: '/',
    user: '0',
    timeoutMs: 120_000,
  });
  let files: ArtifactFile[] = [];
  let collectError: string | undefined;
  try {
    if (packed.status !== 'ok') throw new Error(`packing them ended with status ${packed.status}`);
    if (!packed.stdout.includes(NOTHING_PUBLISHED))
      files = await artifactFiles(
        await agent.readFile(ARCHIVE_PATH, { maxBytes: MAX_ARTIFACT_BYTES }),
        sources,
      );
  } catch (error) {
    if (isGymError(error) && !['FILE_NOT_FOUND', 'FILE_TOO_LARGE', 'PATH_KIND_MISMATCH'].includes(error.code))
      throw error;
    // The agent's tar, its files and its disk: what it broke is graded as artifacts missing.
    collectError = `the artifacts could not be collected from the agent's sandbox: ${(error as Error).message}`;
  }
  await context.releaseSandbox();
  let id: string;
  try {
    ({ id } = await context.client.createSandbox({
      ...verifier.spec,
      image: verifier.image,
      workdir: verifier.workdir,
      labels: { role: 'verifier' },
    } as never));
  } catch (error) {
    if (verifier.network === undefined) throw error;
    return verifier.network.refused(error);
  }
  if (verifier.network !== undefined) context.network?.mark(id, 'verifier');
  const sandbox: SandboxHandle = clientSandboxHandle(context.client, id);
  try {
    for (const file of files) await sandbox.writeFile(file.path, file.content, file.mode);
    const verdict = await verifyScript(sandbox, null, verifier.timeoutMs, verifier.test);
    return {
      ...verdict,
      details: {
        ...verdict.details,
        verifier_environment: 'separate',
        artifacts_copied: files.map((file) => file.path),
        ...(collectError === undefined ? {} : { artifacts_error: collectError }),
      },
    };
  } finally {
    if (verifier.network !== undefined) await context.network?.read(id, 'verifier');
    await context.client.destroySandbox(id).catch(() => {});
  }
}
