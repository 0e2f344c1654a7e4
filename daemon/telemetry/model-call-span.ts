/**
 * A span per model call through the gateway, a child of the span that opened its rollout
 * (`rollout-parents.ts`). It records the API, the model asked for and the one the upstream was
 * configured with, whether it streamed, and the token counts the upstream reported; never the
 * messages or the completion (the agent's and the model's text: secrets, and any size).
 */
import { isGymError } from '../../core/errors.ts';
import { errorType } from '../../core/tracing.ts';
import type { OpenRollout } from '../gateway/gateway.ts';
import type { DaemonTracing } from './daemon-tracing.ts';

const numberOr = (value: unknown) =>
  typeof value === 'number' && Number.isFinite(value) ? value : undefined;

/** Runs `call` (the forwarding of one model call) in its span; with tracing off, just runs it. */
export async function traceModelCall<T>(
  daemonTracing: DaemonTracing | undefined,
  rollout: OpenRollout,
  api: string,
  body: Record<string, unknown>,
  call: () => Promise<T>,
): Promise<T> {
  if (daemonTracing === undefined || !daemonTracing.tracing.isEnabled) return call();
  const span = daemonTracing.tracing.startSpan(
    'gym.gateway.model_call',
    {
      'gym.rollout.id': rollout.id,
      'gym.model.api': api,
      'gen_ai.request.model': typeof body.model === 'string' ? body.model : undefined,
      'gym.model.upstream_model': rollout.upstream.model,
      'gym.model.stream': body.stream === true,
    },
    daemonTracing.parents.parentOf(rollout.id),
  );
  try {
    const result = await call();
    const usage = (result as { usage?: Record<string, unknown> } | undefined)?.usage;
    if (typeof usage === 'object' && usage !== null)
      span.setAttributes({
        'gen_ai.usage.input_tokens': numberOr(usage.prompt_tokens ?? usage.input_tokens),
        'gen_ai.usage.output_tokens': numberOr(usage.completion_tokens ?? usage.output_tokens),
      });
    return result;
  } catch (error) {
    // The upstream's fault or ours is the span's error; a request the agent got wrong is not.
    if (isGymError(error) && error.httpStatus < 500) span.setAttributes({ 'error.type': error.code });
    else span.fail(errorType(error));
    throw error;
  } finally {
    span.end();
  }
}
