/** `gym doctor`: a verb without a noun. */
import { type CommandDefinition, verb } from '../../command-definition.ts';
import { doctor } from './definitions.ts';

export const doctorCommands: CommandDefinition = verb(doctor, () =>
  import('./doctor.ts').then((module) => module.doctorCommand),
);
