/** The eval suite (`ssh-runtime-eval.ts`) on Apptainer's row. */
import { describeSshRuntimeEval } from './ssh-runtime-eval.ts';

await describeSshRuntimeEval('apptainer');
