/**
 * The agent's own files kept with its rollout (`HarnessResult.agentFiles`: an agent CLI's output
 * stream, the trajectory file it wrote), under `X_agent_logs/<rollout id>/` beside `X.jsonl`.
 * The agent wrote them, so each is cut at a size limit (the rollout line says where): an agent
 * cannot fill the host's disk through them. Names are made plain file names here whatever the
 * harness gave.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { basename, dirname, join, relative } from 'node:path';
import type { AgentFile } from '../../harnesses/harness.ts';

/** The most kept of one file (its head). */
export const AGENT_FILE_MAX_BYTES = 4 * 1024 * 1024;

/** What the rollout line says of one kept file. */
export interface KeptAgentFile {
  /** Relative to the rollouts file's folder. */
  path: string;
  /** The file's size as the agent left it. */
  bytes: number;
  /** Set when only the first `truncatedAt` bytes were kept. */
  truncatedAt?: number;
}

/** A plain, unique file name: no folder part, no `..`, only `[A-Za-z0-9._-]`. */
function plainName(name: string, taken: Set<string>): string {
  let plain = basename(name).replace(/[^A-Za-z0-9._-]/g, '_');
  if (plain === '' || /^\.+$/.test(plain)) plain = 'file';
  let unique = plain;
  for (let index = 2; taken.has(unique); index += 1) unique = `${index}-${plain}`;
  taken.add(unique);
  return unique;
}

/** Writes `files` under `folder/<rollout id>/`, each cut at `maxBytes`; what was kept, for the rollout line. */
export async function keepAgentFiles(
  folder: string,
  rolloutId: string,
  files: readonly AgentFile[],
  maxBytes: number = AGENT_FILE_MAX_BYTES,
): Promise<KeptAgentFile[]> {
  if (files.length === 0) return [];
  const directory = join(folder, plainName(rolloutId, new Set()));
  await mkdir(directory, { recursive: true });
  const taken = new Set<string>();
  const kept: KeptAgentFile[] = [];
  for (const file of files) {
    const path = join(directory, plainName(file.name, taken));
    const truncated = file.content.length > maxBytes;
    await writeFile(path, truncated ? file.content.subarray(0, maxBytes) : file.content);
    kept.push({
      path: relative(dirname(folder), path),
      bytes: file.content.length,
      ...(truncated ? { truncatedAt: maxBytes } : {}),
    });
  }
  return kept;
}
