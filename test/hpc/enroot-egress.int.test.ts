import { describeSshRuntimeEgress } from './ssh-runtime-egress.ts';

describeSshRuntimeEgress('enroot');
