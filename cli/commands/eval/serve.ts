import { isIP } from 'node:net';
import { join } from 'node:path';
import { aggregateLines } from '../../../environments/runner/eval-metrics.ts';
import { createRowRunner } from '../../../environments/runner/row-runner.ts';
import { type CommandOf, UsageError } from '../../command.ts';
import { readToken, resolveStateDir } from '../../connect.ts';
import { RunAdmission } from '../../serve/admission.ts';
import { buildRolloutServer } from '../../serve/rollout-server.ts';
import { RunKeys } from '../../serve/run-keys.ts';
import type { evalServe } from './definitions.ts';
import { policyRunOptions, prepareEval } from './run.ts';

/** Whether `host` names this machine's loopback only (no other machine can connect to it). */
export function isLoopbackHost(host: string): boolean {
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  return host === '::1';
}

/**
 * `gym eval serve`: NeMo Gym's agent-server contract over the runner, until interrupted. The URL
 * goes to stdout (NeMo Gym's config names its host and port); everything else to stderr.
 */
export const evalServeCommand: CommandOf<typeof evalServe> = {
  async run({ options: values, env, stdout, stderr }) {
    if (values.token === false && !isLoopbackHost(values.host))
      throw new UsageError(
        `--no-token only on a loopback address: ${values.host} can be reached from other machines, and a row runs sandboxes and spends the model`,
      );
    const stateDir = resolveStateDir(values.stateDir, env);
    const { environment, rows, harness, harnessName, policy, logger, client, inProcess } = await prepareEval(
      values,
      env,
      stderr,
    );
    try {
      const token = values.token === false ? undefined : (inProcess?.token ?? (await readToken(stateDir)));
      const runner = await createRowRunner({
        client,
        environment,
        harness,
        harnessName,
        modelName: policy.model ?? values.model ?? 'policy',
        concurrency: values.concurrency,
        output: values.output ?? join(stateDir, 'serve', 'rollouts.jsonl'),
        maxInfraAttempts: values.maxInfraAttempts,
        usePools: values.pool === true,
        expectedRows: rows,
        expectedRepeats: values.numRepeats,
        ...policyRunOptions(policy),
        logger,
      });
      const app = buildRolloutServer({
        runRow: (row) => runner.run(row),
        aggregate: (lines) => aggregateLines(lines, harnessName, environment.implementation),
        admission: new RunAdmission({ concurrency: values.concurrency, queue: values.queue }),
        keys: new RunKeys(),
        token,
      });
      try {
        const address = await app.listen({ host: values.host, port: values.port });
        stderr.write(
          token === undefined
            ? 'gym: taking rows without a token (--no-token, loopback only)\n'
            : `gym: every route but /healthz needs the daemon's token (${join(stateDir, ...(inProcess === undefined ? [] : ['eval-daemon']), 'token')}) as Authorization: Bearer\n`,
        );
        stdout.write(
          `serving ${environment.name} with ${harnessName} at ${address} (POST /run, POST /aggregate_metrics): ${values.concurrency} at once, ${values.queue} waiting at most\n`,
        );
        await new Promise<void>((resolve) => {
          process.once('SIGINT', resolve);
          process.once('SIGTERM', resolve);
        });
      } finally {
        // Rows running finish and are answered; then the pools go.
        await app.close();
        await runner.close();
      }
      return 0;
    } finally {
      await inProcess?.stop({ destroy: true });
    }
  },
};
