/** The Kubernetes provider's row of the built-in table (`../registry.ts`); it loads none of the provider's code. */
import type { BuiltInProvider } from '../built-in-provider.ts';

export const kubernetesRegistration: BuiltInProvider = {
  name: 'kubernetes',
  title: 'Kubernetes',
  hostNeeds: 'the static relay .tools/gym-relay',
  create: async (options, context) => (await import('./index.ts')).createKubernetesProvider(options, context),
  hostChecks: async (context) =>
    (await import('../shared/relay-host-check.ts')).relayHelperChecks('kubernetes', context),
};
