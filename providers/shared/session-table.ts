/**
 * The shell sessions of every sandbox of a provider, by sandbox, session name and user: one
 * table for all providers. A live session is reused; a dead one (its shell exited, or it was
 * closed after a timeout) is replaced by a new one on the next command; concurrent callers of a
 * session being opened share the same opening.
 */
import type { ShellSession } from './shell-session.ts';

export class SessionTable {
  readonly #bySandbox = new Map<string, Map<string, Promise<ShellSession>>>();

  /**
   * The sandbox's session `name` for `user`: the live one, or one `open` makes. A failed opening
   * is forgotten, so the next command tries again.
   */
  async session(
    sandboxId: string,
    name: string,
    user: string | undefined,
    open: () => Promise<ShellSession>,
  ): Promise<ShellSession> {
    let byName = this.#bySandbox.get(sandboxId);
    if (byName === undefined) {
      byName = new Map();
      this.#bySandbox.set(sandboxId, byName);
    }
    const key = `${name}\0${user ?? ''}`;
    const existing = byName.get(key);
    if (existing !== undefined) {
      const session = await existing.catch(() => null);
      if (session?.isAlive) return session;
    }
    const table = byName;
    const opening = open();
    table.set(key, opening);
    opening.catch(() => {
      if (table.get(key) === opening) table.delete(key);
    });
    return opening;
  }

  /** Closes and forgets every session of the sandbox (it is being destroyed, or was lost). */
  close(sandboxId: string): void {
    const byName = this.#bySandbox.get(sandboxId);
    this.#bySandbox.delete(sandboxId);
    for (const opening of byName?.values() ?? []) opening.then((session) => session.close()).catch(() => {});
  }

  /** Closes every session of every sandbox (the provider is closing). */
  closeAll(): void {
    for (const sandboxId of [...this.#bySandbox.keys()]) this.close(sandboxId);
  }

  /** The sandboxes that have sessions open or opening. */
  get sandboxIds(): string[] {
    return [...this.#bySandbox.keys()];
  }
}
