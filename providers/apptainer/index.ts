/** The apptainer provider's entry point: the registry imports this only when one is configured (it loads ssh2). */
export { ApptainerProvider, createApptainerProvider } from './apptainer-provider.ts';
