/**
 * Traces end to end: a rollout of a mini-swe agent on a terminal task, in real Docker, against a
 * scripted model, with the runner and the daemon each exporting to one loopback collector
 * stand-in that decodes the OTLP protobuf it receives. The tree must hold across the HTTP hop
 * (daemon spans under the runner's), and no command or output may reach the wire.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { silentLogger } from '../../core/logger.ts';
import { createTracing } from '../../core/tracing.ts';
import { HarnessRegistry } from '../../harnesses/registry.ts';
import { ModelScriptSchema } from '../../harnesses/scripted-model/script.ts';
import { startScriptedModelServer } from '../../harnesses/scripted-model/server.ts';
import { startTestDaemon } from '../../test/daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../../test/docker-available.ts';
import { type DecodedSpan, startOtlpCollector } from '../../test/fixtures/otlp-collector.ts';
import { loadEnvironment, readRows } from '../environment.ts';
import { runEval } from './eval.ts';
import { readJsonl } from './files.ts';

const { docker, skipReason } = await dockerTestEnvironment();

describe.skipIf(skipReason !== undefined)(
  'OpenTelemetry traces of a rollout (real Docker, loopback collector)',
  () => {
    let outputDir = '';
    beforeAll(async () => {
      outputDir = await mkdtemp(join(tmpdir(), 'gym-tracing-test-'));
      await testImage(docker, 'debian-base');
    }, 300_000);
    afterAll(async () => {
      await rm(outputDir, { recursive: true, force: true });
    });

    it('sends a rollout span with its phases, the daemon create/exec/file spans under them, and the model calls', async () => {
      const collector = await startOtlpCollector();
      const solveCommand = 'grep -c ERROR /app/server.log > /app/error_count.txt';
      const bash = (command: string) => ({ content: `Next.\n\`\`\`bash\n${command}\n\`\`\`` });
      const model = await startScriptedModelServer(
        ModelScriptSchema.parse({
          conversations: [
            { replies: [bash(solveCommand), bash('echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT')] },
          ],
        }),
      );
      const namespace = `tracing-${randomBytes(3).toString('hex')}`;
      const daemon = await startTestDaemon(
        {
          namespace,
          gateway: { upstream: { baseUrl: model.baseUrl, model: 'policy-7b' }, maxRetries: 0 },
          telemetry: { otlpEndpoint: collector.endpoint, serviceName: 'gym-sandboxd-test' },
        },
        { listen: true },
      );
      const tracing = await createTracing(
        {
          tracesEndpoint: `${collector.endpoint}/v1/traces`,
          serviceName: 'gym-eval-test',
          scheduledDelayMs: 200,
        },
        'gym-eval',
      );
      let rollout: Record<string, unknown> | undefined;
      try {
        const environment = await loadEnvironment('terminal');
        const rows = (await readRows(environment.dataPath)).filter((row) => row.id === 'count-errors');
        const output = join(outputDir, 'traced.jsonl');
        await runEval({
          client: new GymClient({ url: daemon.address.url!, token: daemon.token }),
          environment: { ...environment, limits: { ...environment.limits, maxSteps: 5 } },
          rows,
          harness: await new HarnessRegistry().create('mini-swe'),
          harnessName: 'mini-swe',
          modelName: 'scripted',
          numRepeats: 1,
          concurrency: 1,
          output,
          resume: false,
          maxInfraAttempts: 1,
          logger: silentLogger,
          tracing,
        });
        [rollout] = await readJsonl(output);
        expect(rollout).toMatchObject({ reward: 1, _gym: { outcome: 'reward' } });
        const runnerReport = await tracing.shutdown();
        expect(runnerReport.dropped).toBe(0);
      } finally {
        await daemon.stop({ destroy: true });
        await model.close();
      }
      await collector.waitFor((spans) => spans.some((span) => span.name === 'gym.sandbox.destroy'));
      await collector.close();
      expect(collector.rejected).toBe(0);

      const spans = collector.spans;
      const named = (name: string) => spans.filter((span) => span.name === name);
      const one = (name: string): DecodedSpan => {
        const found = named(name);
        expect(found, name).toHaveLength(1);
        return found[0]!;
      };
      const root = one('gym.rollout');
      expect(root).toMatchObject({ parentSpanId: '', serviceName: 'gym-eval-test', statusCode: 0 });
      expect(root.attributes).toMatchObject({
        'gym.task.index': expect.any(Number),
        'gym.rollout.index': 0,
        'gym.rollout.attempt': 0,
        'gym.rollout.id': rollout!._ng_rollout_id,
        'gym.environment': 'terminal',
        'gym.harness': 'mini-swe',
        'gym.model': 'scripted',
        'gym.provider': 'docker',
        'gym.outcome': 'reward',
        'gym.reward': 1,
      });
      // Every span is in the rollout's trace, and ended.
      for (const span of spans) {
        expect(span.traceId, span.name).toBe(root.traceId);
        expect(span.endNanos >= span.startNanos && span.startNanos > 0n, span.name).toBe(true);
      }
      const phases = ['acquire', 'setup', 'agent', 'collect', 'verify', 'release'].map((phase) =>
        one(`gym.rollout.${phase}`),
      );
      for (const phase of phases) expect(phase.parentSpanId, phase.name).toBe(root.spanId);
      const [acquire, , agent, collect, verify, release] = phases as [
        DecodedSpan,
        DecodedSpan,
        DecodedSpan,
        DecodedSpan,
        DecodedSpan,
        DecodedSpan,
      ];
      expect(agent.attributes['gym.harness.outcome']).toBe('submitted');
      expect(collect.attributes['gym.model_calls']).toBe(2);
      expect(verify.attributes).toMatchObject({ 'gym.outcome': 'reward', 'gym.reward': 1 });

      // The daemon's spans, across the HTTP hop, under the phase that made the request.
      const create = one('gym.sandbox.create');
      expect(create).toMatchObject({
        serviceName: 'gym-sandboxd-test',
        parentSpanId: acquire.spanId,
        statusCode: 0,
      });
      expect(create.attributes).toMatchObject({
        'gym.provider': 'docker',
        'gym.sandbox.id': root.attributes['gym.sandbox.id'],
        'http.response.status_code': 201,
      });
      const execs = named('gym.sandbox.exec');
      expect(execs.length).toBeGreaterThanOrEqual(2);
      const agentExecs = execs.filter((span) => span.parentSpanId === agent.spanId);
      expect(agentExecs.length).toBeGreaterThanOrEqual(1);
      expect(execs.some((span) => span.parentSpanId === verify.spanId)).toBe(true);
      for (const exec of execs)
        expect(exec.attributes).toMatchObject({
          'gym.provider': 'docker',
          'gym.sandbox.id': root.attributes['gym.sandbox.id'],
          'gym.exec.status': 'ok',
          'gym.exec.exit_code': expect.any(Number),
        });
      const files = spans.filter((span) => /^gym\.sandbox\.(files|archive)\./.test(span.name));
      expect(files.length).toBeGreaterThanOrEqual(1);
      for (const file of files)
        expect([agent.spanId, verify.spanId, acquire.spanId]).toContain(file.parentSpanId);
      expect(one('gym.sandbox.destroy').parentSpanId).toBe(release.spanId);

      // The model calls: opened from the rollout's span, so they nest under it, not under the agent's requests.
      expect(one('gym.gateway.rollout.open').parentSpanId).toBe(root.spanId);
      const calls = named('gym.gateway.model_call');
      expect(calls).toHaveLength(2);
      for (const call of calls) {
        expect(call).toMatchObject({
          parentSpanId: root.spanId,
          serviceName: 'gym-sandboxd-test',
          statusCode: 0,
        });
        expect(call.attributes).toMatchObject({
          'gym.rollout.id': rollout!._ng_rollout_id,
          'gym.model.upstream_model': 'policy-7b',
          'gym.model.stream': expect.any(Boolean),
        });
      }

      // What never goes on the wire: the agent's commands, their output, the rollout's key.
      const wire = Buffer.concat(collector.bodies);
      for (const secret of [
        solveCommand,
        'COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT',
        'server.log',
        daemon.token,
      ])
        expect(wire.includes(secret), secret).toBe(false);
    }, 120_000);
  },
);
