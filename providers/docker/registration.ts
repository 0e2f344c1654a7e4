/** The Docker provider's row of the built-in table (`../registry.ts`); it loads no dockerode. */
import type { BuiltInProvider } from '../built-in-provider.ts';

export const dockerRegistration: BuiltInProvider = {
  name: 'docker',
  title: 'Docker',
  hostNeeds:
    'the exec helper .tools/gym-exec, and nsenter and root, or CAP_SYS_ADMIN and CAP_SYS_PTRACE, for the model gateway relay',
  create: async (options, context) => (await import('./index.ts')).createDockerProvider(options, context),
  hostChecks: async (context) => (await import('./host-checks.ts')).dockerHostChecks(context),
  unhealthyFix: 'start the engine: `dockerd --bridge=none --iptables=false &` (scripts/setup.sh does this)',
};
