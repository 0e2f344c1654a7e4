/**
 * The library surface: what other TypeScript programs import to drive sandboxes directly. It
 * loads no backend's SDK: a built-in provider is built by the registry (which loads its module
 * only then), or imported from its own subpath (`gym-sandboxd/providers/docker`).
 */

export type { Clock } from './core/clock.ts';
export { systemClock } from './core/clock.ts';
export * from './core/errors.ts';
export * from './core/ids.ts';
export type { Logger } from './core/logger.ts';
export { silentLogger } from './core/logger.ts';
export * from './core/schemas/common.ts';
export * from './core/schemas/exec.ts';
export * from './core/schemas/sandbox.ts';
export { parseOrThrow } from './core/validate.ts';
export * from './providers/registry.ts';
export * from './providers/sandbox-provider.ts';
