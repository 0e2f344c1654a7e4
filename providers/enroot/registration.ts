/** The Enroot provider's row of the built-in table (`../registry.ts`); it loads none of the provider's code. */
import type { BuiltInProvider } from '../built-in-provider.ts';

export const enrootRegistration: BuiltInProvider = {
  name: 'enroot',
  title: 'Enroot',
  hostNeeds: 'the static relay .tools/gym-relay',
  create: async (options, context) => (await import('./index.ts')).createEnrootProvider(options, context),
  hostChecks: async (context) =>
    (await import('../shared/relay-host-check.ts')).relayHelperChecks('enroot', context),
};
