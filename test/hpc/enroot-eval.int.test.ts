/** The eval suite (`ssh-runtime-eval.ts`) on Enroot's row. */
import { describeSshRuntimeEval } from './ssh-runtime-eval.ts';

await describeSshRuntimeEval('enroot');
