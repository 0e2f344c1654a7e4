/** The Apptainer provider's row of the built-in table (`../registry.ts`); it loads none of the provider's code. */
import type { BuiltInProvider } from '../built-in-provider.ts';

export const apptainerRegistration: BuiltInProvider = {
  name: 'apptainer',
  title: 'Apptainer',
  hostNeeds: 'the static relay .tools/gym-relay',
  create: async (options, context) => (await import('./index.ts')).createApptainerProvider(options, context),
  hostChecks: async (context) =>
    (await import('../shared/relay-host-check.ts')).relayHelperChecks('apptainer', context),
};
