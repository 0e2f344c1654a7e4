/**
 * Which engine answers the Docker API: Docker itself, or Podman's compatible service
 * (`podman system service`), told apart by the engine's own version answer.
 *
 * Podman speaks the same API for everything the provider does (create with limits and labels,
 * start, multiplexed exec with its exit code, archives, forced delete, label-filtered lists), with
 * one difference that matters on our hosts: as root without CAP_SYS_RESOURCE it fails to start a
 * container whose rlimits it would raise (`error setting rlimit type 7`), so the provider names
 * `nofile` and `nproc` itself, at the host's hard limits or below.
 */
import { readFileSync } from 'node:fs';
import type Docker from 'dockerode';

export type EngineKind = 'docker' | 'podman';

/** The component name Podman's service reports in its version answer. */
const PODMAN_COMPONENT = 'Podman Engine';

/** What a sandbox gets for open files when the host allows more (the engine's usual default). */
const NOFILE_CEILING = 1_048_576;

/**
 * Processes per user in a sandbox at most: the Podman service caps its own hard limit there
 * (seen: 32768 with the host's at 96363), and a container cannot be given more than its engine has.
 */
const NPROC_CEILING = 32_768;

/** A Docker-API version answer: which engine gave it. */
export function engineKindOf(version: {
  Components?: ReadonlyArray<{ Name?: string }>;
  Platform?: { Name?: string };
}): EngineKind {
  const components = version.Components ?? [];
  if (components.some((component) => component.Name === PODMAN_COMPONENT)) return 'podman';
  return /podman/i.test(version.Platform?.Name ?? '') ? 'podman' : 'docker';
}

/** The hard limits of `/proc/self/limits` (the daemon shares the engine's host), by the limit's name. */
export function hardLimits(limitsText: string): { nofile: number | null; nproc: number | null } {
  const hard = (label: string): number | null => {
    const line = limitsText.split('\n').find((candidate) => candidate.startsWith(label));
    const value = line?.slice(label.length).trim().split(/\s+/)[1];
    if (value === undefined) return null;
    return value === 'unlimited' ? Number.POSITIVE_INFINITY : Number(value);
  };
  return { nofile: hard('Max open files'), nproc: hard('Max processes') };
}

/**
 * The rlimits a Podman sandbox is created with: as many open files as the engine's usual default
 * allows, and processes at the host's hard limit, never above it (root cannot raise them).
 */
export function podmanUlimits(limitsText: string): Array<{ Name: string; Soft: number; Hard: number }> {
  const { nofile, nproc } = hardLimits(limitsText);
  const ulimits: Array<{ Name: string; Soft: number; Hard: number }> = [];
  if (nofile !== null) {
    const value = Math.min(nofile, NOFILE_CEILING);
    ulimits.push({ Name: 'nofile', Soft: value, Hard: value });
  }
  if (nproc !== null) {
    const value = Math.min(nproc, NPROC_CEILING);
    ulimits.push({ Name: 'nproc', Soft: value, Hard: value });
  }
  return ulimits;
}

/** The engine behind `docker`, asked once per provider; what a sandbox's create adds for it. */
export class EngineTraits {
  readonly #docker: Docker;
  #kind: Promise<EngineKind> | null = null;

  constructor(docker: Docker) {
    this.#docker = docker;
  }

  /** Which engine answers; asked again after a failed answer (the engine was not up yet). */
  kind(): Promise<EngineKind> {
    if (this.#kind === null) {
      const asked = this.#docker.version().then(engineKindOf);
      asked.catch(() => {
        if (this.#kind === asked) this.#kind = null;
      });
      this.#kind = asked;
    }
    return this.#kind;
  }

  /** HostConfig fields the engine needs beyond Docker's (Podman's explicit rlimits). */
  async hostConfig(): Promise<{ Ulimits?: Array<{ Name: string; Soft: number; Hard: number }> }> {
    if ((await this.kind()) !== 'podman') return {};
    return { Ulimits: podmanUlimits(readFileSync('/proc/self/limits', 'utf8')) };
  }
}
