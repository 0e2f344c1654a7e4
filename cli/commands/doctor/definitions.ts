/**
 * The parsers of `gym doctor`: name, arguments, options and help. The bodies
 * import their option types from here; `index.ts` pairs each parser with its body.
 */
import { Command } from '@commander-js/extra-typings';
import { BUILT_IN_PROVIDER_ROWS } from '../../../providers/registry.ts';
import { jsonOption, stateDirOption } from '../../options.ts';

/**
 * What each built-in provider needs of the host, from its row of the registry: `Docker: ...;
 * Kubernetes, Apptainer, Enroot: ...` (neighbours that need the same are named together).
 */
function hostNeedsOfProviders(): string {
  const groups: Array<{ titles: string[]; needs: string }> = [];
  for (const row of BUILT_IN_PROVIDER_ROWS) {
    const last = groups.at(-1);
    if (last?.needs === row.hostNeeds) last.titles.push(row.title);
    else groups.push({ titles: [row.title], needs: row.hostNeeds });
  }
  return groups.map(({ titles, needs }) => `${titles.join(', ')}: ${needs}`).join('; ');
}

export const doctor = () =>
  new Command('doctor')
    .summary(
      "check Node, each configured provider's host needs, the daemon, its providers and their images; say how to fix what fails",
    )
    .description(
      `Check what gym needs on this host and say how to fix what fails: Node, debootstrap and busybox (to build images), what each provider the daemon runs (else each of the configuration, GYM_CONFIG) needs of this host (${hostNeedsOfProviders()}), then, through the daemon (one started in-process with the configured providers when none runs), its providers, the base images and the environments' images on the default provider.

Exit code 1 when a required check fails; warnings (no daemon running yet, task images gym eval run builds on first use) do not count.`,
    )
    .addOption(stateDirOption())
    .addOption(jsonOption());
