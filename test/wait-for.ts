/**
 * Polls `probe` until it gives something other than false or undefined, and returns that; fails
 * with `what` after `timeoutMs`. Tests wait for background work (a pool filling, a reaper) this way.
 */
export async function waitFor<T>(
  what: string,
  probe: () => T | false | undefined | Promise<T | false | undefined>,
  timeoutMs = 30_000,
  intervalMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (true) {
    const value = await probe();
    if (value !== false && value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
