/**
 * One line of `gym doctor`: a fact about the daemon's host that a provider needs (a tool, a
 * privilege), produced by the providers and printed by the CLI, so both take its shape from here.
 */

/** One line of `gym doctor`. */
export interface HostCheck {
  name: string;
  ok: boolean;
  detail: string;
  fix?: string;
  /** False for what works without it (a warning): only required checks decide the exit code. */
  required?: boolean;
}

export interface HostCheckContext {
  /** The provider's options as configured (not yet validated: the checks read them loosely). */
  options: Readonly<Record<string, unknown>>;
  /** The environment of the command (its PATH finds tools). */
  env: Readonly<Record<string, string | undefined>>;
}
