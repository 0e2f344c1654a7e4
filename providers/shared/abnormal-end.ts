/**
 * Why a command ended abnormally (killed by SIGKILL, or its channel broke): the sandbox is gone,
 * the kernel's OOM killer struck, or something else killed it. The decision is the same on every
 * backend; only how the facts are read differs (Docker reads the host's /proc and cgroups, or
 * runs a probe in the sandbox; another backend asks its own API).
 */
import type { ExecResult } from '../../core/schemas/exec.ts';
import { type ExecOutput, parseOomKillCount, type SandboxLossStatus } from './exec-output.ts';

/**
 * A sandbox that died of what ran in it (its keeper OOM-killed, its first process ended by the
 * agent): the command's own loss, never `sandbox_gone`. Read from outside the sandbox only (the
 * engine's record of how its first process ended, the Pod's container status).
 */
export interface SandboxLoss {
  lost: Exclude<SandboxLossStatus, 'timeout'>;
  reason: string;
}

export type AbnormalEnd = 'sandbox_gone' | 'oom' | 'killed' | SandboxLoss;

/** The result of a command that ended abnormally, as `end` says (`exitCode` when it still lives). */
export function abnormalEndResult(output: ExecOutput, end: AbnormalEnd, exitCode: number | null): ExecResult {
  if (typeof end === 'object') return output.lost(end.lost, end.reason);
  return output.result(end, end === 'sandbox_gone' ? null : exitCode);
}

/** The reason of a sandbox whose keeper the kernel's OOM killer took. */
export const KEEPER_OOM_REASON =
  "the sandbox ran out of memory and the kernel's OOM killer ended its first process (the keeper), so the sandbox died";

/** What a backend's exec path calls after an abnormal end. */
export interface ExecHooks {
  classifyAbnormalEnd(): Promise<AbnormalEnd>;
}

/** A sandbox seen from outside it: whether its keeper still runs, and its OOM-kill count when known. */
export interface OutsideView {
  isAlive: boolean;
  oomKills: number | null;
}

/** How long to look again at a sandbox that still seems alive, in turn (see `classifyAbnormalEnd`). */
export const ALIVE_RECHECK_MS = [100, 250] as const;

/**
 * Each sandbox's last OOM-kill count: a kill is an OOM kill when the count went up since the
 * last look. A sandbox starts at 0 (`start`); one never seen counts from 0 too.
 */
export class OomKillCounts {
  readonly #counts = new Map<string, number>();

  start(id: string): void {
    this.#counts.set(id, 0);
  }

  forget(id: string): void {
    this.#counts.delete(id);
  }

  clear(): void {
    this.#counts.clear();
  }

  /** `oom` when `count` is above the last one seen (and remembers it); `killed` when unknown or not. */
  classify(id: string, count: number | null): 'oom' | 'killed' {
    if (count === null) return 'killed';
    const previous = this.#counts.get(id) ?? 0;
    this.#counts.set(id, count);
    return count > previous ? 'oom' : 'killed';
  }
}

export interface ClassifySources {
  /**
   * The sandbox seen from outside (nothing of the sandbox's own, which an agent may have
   * replaced, is trusted for it); null when this backend has no such view, or it failed.
   */
  outsideView?: () => Promise<OutsideView | null>;
  /**
   * Runs `OOM_COUNTER_COMMAND` in the sandbox, used when there is no outside view: null when it
   * could not run. The command always exits 0 when it runs, so anything else means the sandbox
   * is gone.
   */
  probe: () => Promise<ExecResult | null>;
  /**
   * Once the sandbox is seen dead: whether it died of what ran in it (a {@link SandboxLoss}), by
   * evidence from outside it; null when it was taken away from outside or nothing says; `running`
   * when, once the backend has had time to record an end, it still reports the sandbox running.
   * Then the sandbox lives on and only the look at it failed (a probe that could not start in a
   * sandbox whose memory the agent filled, or whose shell it deleted): the command's own end.
   */
  lossCause?: () => Promise<SandboxLoss | null | 'running'>;
  /** Waits between looks (a test passes an instant one). */
  sleep?: (ms: number) => Promise<void>;
}

const realSleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Classifies an abnormal end of a command in sandbox `id`. A destroy in progress kills the
 * commands a moment before the sandbox is seen dead, so a sandbox that still looks alive from
 * outside is looked at again briefly before the end is called a kill (abnormal ends are rare).
 */
export async function classifyAbnormalEnd(
  id: string,
  counts: OomKillCounts,
  sources: ClassifySources,
): Promise<AbnormalEnd> {
  const sleep = sources.sleep ?? realSleep;
  const look = async () => (await sources.outsideView?.().catch(() => null)) ?? null;
  let view = await look();
  for (const waitMs of ALIVE_RECHECK_MS) {
    if (view === null || !view.isAlive) break;
    await sleep(waitMs);
    view = await look();
  }
  const dead = async (): Promise<AbnormalEnd> => {
    const end = (await sources.lossCause?.().catch(() => null)) ?? 'sandbox_gone';
    return end === 'running' ? counts.classify(id, null) : end;
  };
  if (view !== null) return view.isAlive ? counts.classify(id, view.oomKills) : await dead();
  const probe = await sources.probe().catch(() => null);
  if (probe === null || probe.status !== 'ok' || probe.exitCode !== 0) return await dead();
  return counts.classify(id, parseOomKillCount(probe.stdout));
}
