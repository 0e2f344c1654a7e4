/** How many destroys (or restores) run at once: enough to keep up, few enough not to starve creates. */
export const REAPER_CONCURRENCY = 8;

/** Runs `body` for every item, at most `limit` at a time. */
export async function forEachLimited<T>(
  items: T[],
  limit: number,
  body: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const workers = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const item = items[next++]!;
      await body(item);
    }
  });
  await Promise.all(workers);
}
