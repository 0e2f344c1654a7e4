/** The SSH-runtime contract (`ssh-runtime-contract.ts`) on Apptainer's row. */
import { describeSshRuntimeContract } from './ssh-runtime-contract.ts';

await describeSshRuntimeContract('apptainer');
