/**
 * The parsers of `gym doctor`: name, arguments, options and help. The bodies
 * import their option types from here; `index.ts` pairs each parser with its body.
 */
import { Command } from '@commander-js/extra-typings';
import { jsonOption, stateDirOption } from '../../options.ts';

export const doctor = () =>
  new Command('doctor')
    .summary(
      "check Node, each configured provider's host needs, the daemon, its providers and their images; say how to fix what fails",
    )
    .description(
      `Check what gym needs on this host and say how to fix what fails: Node, debootstrap and busybox (to build images), what each provider the daemon runs (else each of the configuration, GYM_CONFIG) needs of this host (Docker: the exec helper .tools/gym-exec, and nsenter and root, or CAP_SYS_ADMIN and CAP_SYS_PTRACE, for the model gateway relay; Kubernetes, Apptainer, Enroot: the static relay .tools/gym-relay), then, through the daemon (one started in-process with the configured providers when none runs), its providers, the base images and the environments' images on the default provider.

Exit code 1 when a required check fails; warnings (no daemon running yet, task images gym eval run builds on first use) do not count.`,
    )
    .addOption(stateDirOption())
    .addOption(jsonOption());
