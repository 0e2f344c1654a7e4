/** The SSH-runtime Slurm contract (`ssh-runtime-slurm-contract.ts`) on Apptainer's row. */
import { describeSshRuntimeSlurmContract } from './ssh-runtime-slurm-contract.ts';

await describeSshRuntimeSlurmContract('apptainer');
