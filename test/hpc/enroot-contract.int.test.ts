/** The SSH-runtime contract (`ssh-runtime-contract.ts`) on Enroot's row. */
import { describeSshRuntimeContract } from './ssh-runtime-contract.ts';

await describeSshRuntimeContract('enroot');
