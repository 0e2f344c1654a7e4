/** The enroot provider's entry point: the registry imports this only when one is configured (it loads ssh2). */
export { createEnrootProvider, EnrootProvider } from './enroot-provider.ts';
