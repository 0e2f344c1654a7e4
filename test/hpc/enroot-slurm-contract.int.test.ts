/** The SSH-runtime Slurm contract (`ssh-runtime-slurm-contract.ts`) on Enroot's row. */
import { describeSshRuntimeSlurmContract } from './ssh-runtime-slurm-contract.ts';

await describeSshRuntimeSlurmContract('enroot');
