/**
 * Bounding a wait on something that may never answer (an engine or an API held by a stuck exec).
 */

/** `promise`'s value, or null when it takes longer than `ms` (it runs on, ignored; its rejection too). */
export function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T | null> {
  promise.catch(() => {});
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<null>((resolve) => {
      timer = setTimeout(() => resolve(null), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
