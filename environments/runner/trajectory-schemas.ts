/**
 * The two published trajectory schemas this project exports to, written field by field from their
 * specifications (not generated from, nor copied out of, either project's code):
 *
 * - NeMo Gym's `ng_trajectory`, schema version `1.0`: the `TrajectoryRecord` NeMo Gym attaches to a
 *   rollout (its task and rollout identity, agent invocations with their model-visible
 *   conversation, turns, model calls with token stats, tool calls, and explicit evidence gaps).
 *   NeMo Gym's trajectory models forbid unknown fields, so these objects are strict too. A
 *   conversation item is a Responses API input item (whose models, there as here, let extra fields
 *   through); the training variants of the message, function call and
 *   reasoning items carry `prompt_token_ids`, `generation_token_ids` and `generation_log_probs`,
 *   all three or none. Only the item types this project writes or reads are checked in full;
 *   another item type is accepted as an object with a string `type`.
 * - Harbor's ATIF (Agent Trajectory Interchange Format), `ATIF-v1.7`: a root trajectory with its
 *   agent, its steps (system, user or agent), per-step metrics (token counts, cost, token ids,
 *   logprobs), tool calls and observations, and final metrics. Harbor's models forbid unknown
 *   fields; its validators require step ids 1, 2, 3..., agent-only fields only on agent steps, an
 *   observation's `source_call_id` naming a tool call of its step, ISO 8601 timestamps, and no
 *   metrics or reasoning on a step of `llm_call_count` 0. All of that is checked here.
 */
import { z } from 'zod';

const nonNegativeInteger = z.number().int().min(0);
const nullable = <T extends z.ZodType>(schema: T) => schema.nullable().optional();

// ---- NeMo Gym ng_trajectory 1.0 -------------------------------------------------------------

/** The NeMo Gym server a model call went to. */
const modelServerRefSchema = z.strictObject({ type: z.literal('responses_api_models'), name: z.string() });

const modelCallRefSchema = z
  .strictObject({
    model_call_id: nullable(z.string()),
    model_ref: nullable(modelServerRefSchema),
    response_id: nullable(z.string()),
  })
  .refine(
    (ref) => Boolean(ref.model_call_id) || (ref.model_ref != null && Boolean(ref.response_id)),
    'a model call reference needs model_call_id, or both model_ref and response_id',
  );

const tokenStatsSchema = z.strictObject({
  prompt_tokens: nullable(nonNegativeInteger),
  completion_tokens: nullable(nonNegativeInteger),
  reasoning_tokens: nullable(nonNegativeInteger),
  total_tokens: nullable(nonNegativeInteger),
  cached_tokens: nullable(nonNegativeInteger),
});

const responseMetadataSchema = z.strictObject({
  response_id: nullable(z.string()),
  model_ref: nullable(modelServerRefSchema),
  model: nullable(z.string()),
  dialect: nullable(z.string()),
  status_code: nullable(z.number().int()),
  response_status: nullable(z.string()),
  finish_reason: nullable(z.string()),
  error_category: nullable(z.string()),
  latency_ttft_ms: nullable(z.number().min(0)),
});

const trajectoryModelCallSchema = z.strictObject({
  model_call_id: nullable(z.string()),
  started_at: nullable(z.number()),
  completed_at: nullable(z.number()),
  duration_ms: nullable(z.number().min(0)),
  request: z.unknown().optional(),
  response: z.unknown().optional(),
  response_metadata: responseMetadataSchema.optional(),
  token_stats: tokenStatsSchema.optional(),
});

const turnSchema = z.strictObject({
  invocation_id: z.string(),
  task_id: z.string(),
  rollout_id: z.string(),
  turn_no: z.number().int().min(1),
  timestamp: z.number(),
  question: z.unknown().optional(),
  answer: z.unknown().optional(),
  reasoning_content: z.unknown().optional(),
  resolved: nullable(z.boolean()),
  step_count: nonNegativeInteger,
  model_calls: z.array(modelCallRefSchema).optional(),
});

/** The token ids and logprobs a training item carries: all three, or none of them. */
const tokenFields = {
  prompt_token_ids: z.array(z.number().int()).optional(),
  generation_token_ids: z.array(z.number().int()).optional(),
  generation_log_probs: z.array(z.number()).optional(),
  routed_experts: z
    .union([z.string(), z.array(z.array(z.array(z.number().int())))])
    .nullable()
    .optional(),
};
const tokenFieldsComplete = (item: Record<string, unknown>) => {
  const present = [
    'prompt_token_ids',
    'generation_token_ids',
    'generation_log_probs',
    'routed_experts',
  ].filter((key) => item[key] !== undefined);
  return (
    present.length === 0 ||
    ['prompt_token_ids', 'generation_token_ids', 'generation_log_probs'].every(
      (key) => item[key] !== undefined,
    )
  );
};
const TOKEN_FIELDS_MESSAGE =
  'token metadata needs all of prompt_token_ids, generation_token_ids and generation_log_probs';

const itemStatus = z.enum(['in_progress', 'completed', 'incomplete']);
const inputContentPart = z.looseObject({ type: z.string() });
const outputContentPart = z.union([
  z.looseObject({
    type: z.literal('output_text'),
    text: z.string(),
    annotations: z.array(z.unknown()),
    logprobs: z.array(z.unknown()).nullable().optional(),
  }),
  z.looseObject({ type: z.literal('refusal'), refusal: z.string() }),
]);

const easyInputMessageSchema = z
  .strictObject({
    type: z.literal('message').optional(),
    role: z.enum(['user', 'assistant', 'system', 'developer']),
    content: z.union([z.string(), z.array(inputContentPart)]),
    ...tokenFields,
  })
  .refine(tokenFieldsComplete, TOKEN_FIELDS_MESSAGE);
const outputMessageSchema = z
  .strictObject({
    type: z.literal('message').optional(),
    id: z.string(),
    role: z.literal('assistant').optional(),
    status: itemStatus.optional(),
    content: z.array(outputContentPart),
    ...tokenFields,
  })
  .refine(tokenFieldsComplete, TOKEN_FIELDS_MESSAGE);
const inputMessageSchema = z
  .strictObject({
    type: z.literal('message').optional(),
    role: z.enum(['user', 'system', 'developer']),
    status: itemStatus.optional(),
    content: z.array(inputContentPart),
    ...tokenFields,
  })
  .refine(tokenFieldsComplete, TOKEN_FIELDS_MESSAGE);
const functionCallSchema = z
  .strictObject({
    type: z.literal('function_call'),
    arguments: z.string(),
    call_id: z.string(),
    name: z.string(),
    id: nullable(z.string()),
    status: nullable(itemStatus),
    ...tokenFields,
  })
  .refine(tokenFieldsComplete, TOKEN_FIELDS_MESSAGE);
const functionCallOutputSchema = z.looseObject({
  type: z.literal('function_call_output'),
  call_id: z.string(),
  output: z.union([z.string(), z.array(z.unknown())]),
  id: nullable(z.string()),
  status: nullable(itemStatus),
});
const reasoningSchema = z
  .strictObject({
    type: z.literal('reasoning'),
    id: z.string(),
    summary: z.array(z.looseObject({ type: z.literal('summary_text'), text: z.string() })),
    encrypted_content: nullable(z.string()),
    content: z
      .array(z.looseObject({ type: z.string(), text: z.string() }))
      .nullable()
      .optional(),
    ...tokenFields,
  })
  .refine(tokenFieldsComplete, TOKEN_FIELDS_MESSAGE);
/** The other Responses input items (MCP, hosted tools, custom tools...), which this project does not write. */
const otherItemSchema = z.looseObject({
  type: z
    .string()
    .refine((type) => !['message', 'function_call', 'function_call_output', 'reasoning'].includes(type)),
});

/** One Responses API input item, as an invocation's conversation holds it. */
export const conversationItemSchema = z.union([
  outputMessageSchema,
  easyInputMessageSchema,
  inputMessageSchema,
  functionCallSchema,
  functionCallOutputSchema,
  reasoningSchema,
  otherItemSchema,
]);

const agentInvocationSchema = z.strictObject({
  kind: z.literal('agent_invocation').optional(),
  invocation_id: z.string(),
  parent_invocation_id: nullable(z.string()),
  spawned_by_tool_call_id: nullable(z.string()),
  status: z.enum(['completed', 'failed', 'incomplete', 'unknown']).optional(),
  duration_ms: nullable(z.number().min(0)),
  error_type: nullable(z.string()),
  model_calls: z.array(modelCallRefSchema).optional(),
  conversation: z.array(conversationItemSchema).optional(),
});

const toolCallSchema = z
  .strictObject({
    kind: z.literal('tool_call').optional(),
    invocation_id: z.string(),
    tool_call_id: z.string(),
    sandbox_id: nullable(z.string()),
    tool_name: nullable(z.string()),
    started_at: nullable(z.number()),
    completed_at: nullable(z.number()),
    duration_ms: nullable(z.number().min(0)),
    timing_source: nullable(z.enum(['executor', 'artifact', 'harness'])),
    status: z.enum(['completed', 'failed', 'timeout', 'cancelled', 'incomplete', 'unknown']).optional(),
    error_type: nullable(z.string()),
    output: z.unknown().optional(),
  })
  .refine(
    (call) => call.started_at == null || call.completed_at == null || call.completed_at >= call.started_at,
    'completed_at must not precede started_at',
  );

const gapSchema = z.strictObject({
  code: z.string(),
  invocation_id: nullable(z.string()),
  detail: nullable(z.string()),
});

/** NeMo Gym's `ng_trajectory` record, schema version 1.0. */
export const ngTrajectorySchema = z
  .strictObject({
    schema_version: z.literal('1.0').optional(),
    task_id: z.string(),
    rollout_id: z.string(),
    invocations: z.array(agentInvocationSchema).optional(),
    turns: z.array(turnSchema).optional(),
    model_calls: z.array(trajectoryModelCallSchema).optional(),
    tool_calls: z.array(toolCallSchema).optional(),
    gaps: z.array(gapSchema).optional(),
  })
  .superRefine((record, context) => {
    const unique = (values: string[], message: string) => {
      if (new Set(values).size !== values.length) context.addIssue({ code: 'custom', message });
    };
    unique(
      (record.invocations ?? []).map((invocation) => invocation.invocation_id),
      'invocation_id must be unique within a trajectory',
    );
    unique(
      (record.model_calls ?? []).flatMap((call) => (call.model_call_id ? [call.model_call_id] : [])),
      'model_call_id must be unique within a trajectory',
    );
    const turnKeys = new Set<string>();
    for (const turn of record.turns ?? []) {
      if (turn.task_id !== record.task_id || turn.rollout_id !== record.rollout_id)
        context.addIssue({ code: 'custom', message: 'turn identity must match the trajectory' });
      const key = JSON.stringify([turn.invocation_id, turn.turn_no]);
      if (turnKeys.has(key))
        context.addIssue({ code: 'custom', message: 'turn number must be unique within an invocation' });
      turnKeys.add(key);
    }
  });
export type NgTrajectory = z.infer<typeof ngTrajectorySchema>;
export type NgConversationItem = z.infer<typeof conversationItemSchema>;

// ---- Harbor ATIF v1.7 -----------------------------------------------------------------------

export const ATIF_SCHEMA_VERSION = 'ATIF-v1.7';

const jsonObject = z.record(z.string(), z.unknown());

/** An ISO 8601 date and time (what Python's `datetime.fromisoformat` reads, a trailing Z included). */
const isoTimestamp = z
  .string()
  .regex(/^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$/, 'an ISO 8601 timestamp');

const imageSourceSchema = z.strictObject({
  media_type: z.enum(['image/jpeg', 'image/png', 'image/gif', 'image/webp']),
  path: z.string(),
});
const contentPartSchema = z.union([
  z.strictObject({ type: z.literal('text'), text: z.string() }),
  z.strictObject({ type: z.literal('image'), source: imageSourceSchema }),
]);
const atifContent = z.union([z.string(), z.array(contentPartSchema)]);

const atifToolCallSchema = z.strictObject({
  tool_call_id: z.string(),
  function_name: z.string(),
  arguments: jsonObject,
  extra: nullable(jsonObject),
});

const subagentTrajectoryRefSchema = z
  .strictObject({
    trajectory_id: nullable(z.string()),
    trajectory_path: nullable(z.string()),
    session_id: nullable(z.string()),
    extra: nullable(jsonObject),
  })
  .refine(
    (ref) => ref.trajectory_id != null || ref.trajectory_path != null,
    'a subagent trajectory reference needs trajectory_id or trajectory_path',
  );

const observationResultSchema = z.strictObject({
  source_call_id: nullable(z.string()),
  content: nullable(atifContent),
  subagent_trajectory_ref: nullable(z.array(subagentTrajectoryRefSchema)),
  extra: nullable(jsonObject),
});

const atifMetricsSchema = z.strictObject({
  prompt_tokens: nullable(z.number().int()),
  completion_tokens: nullable(z.number().int()),
  cached_tokens: nullable(z.number().int()),
  cost_usd: nullable(z.number()),
  prompt_token_ids: nullable(z.array(z.number().int())),
  completion_token_ids: nullable(z.array(z.number().int())),
  logprobs: nullable(z.array(z.number())),
  extra: nullable(jsonObject),
});

const atifStepSchema = z
  .strictObject({
    step_id: z.number().int().min(1),
    timestamp: nullable(isoTimestamp),
    source: z.enum(['system', 'user', 'agent']),
    model_name: nullable(z.string()),
    reasoning_effort: nullable(z.union([z.string(), z.number()])),
    message: atifContent,
    reasoning_content: nullable(z.string()),
    tool_calls: nullable(z.array(atifToolCallSchema)),
    observation: nullable(z.strictObject({ results: z.array(observationResultSchema) })),
    metrics: nullable(atifMetricsSchema),
    extra: nullable(jsonObject),
    llm_call_count: nullable(nonNegativeInteger),
    is_copied_context: nullable(z.boolean()),
  })
  .superRefine((step, context) => {
    if (step.source !== 'agent')
      for (const field of [
        'model_name',
        'reasoning_effort',
        'reasoning_content',
        'tool_calls',
        'metrics',
      ] as const)
        if (step[field] != null)
          context.addIssue({ code: 'custom', path: [field], message: `${field} is only for agent steps` });
    const callIds = new Set((step.tool_calls ?? []).map((call) => call.tool_call_id));
    for (const result of step.observation?.results ?? [])
      if (result.source_call_id != null && !callIds.has(result.source_call_id))
        context.addIssue({
          code: 'custom',
          path: ['observation'],
          message: `source_call_id ${result.source_call_id} names no tool call of step ${step.step_id}`,
        });
    if (
      step.source === 'agent' &&
      step.llm_call_count === 0 &&
      (step.metrics != null || step.reasoning_content != null)
    )
      context.addIssue({ code: 'custom', message: 'a step of llm_call_count 0 has no metrics or reasoning' });
  });

const finalMetricsSchema = z.strictObject({
  total_prompt_tokens: nullable(z.number().int()),
  total_completion_tokens: nullable(z.number().int()),
  total_cached_tokens: nullable(z.number().int()),
  total_cost_usd: nullable(z.number()),
  total_steps: nullable(nonNegativeInteger),
  extra: nullable(jsonObject),
});

const atifAgentSchema = z.strictObject({
  name: z.string(),
  version: z.string(),
  model_name: nullable(z.string()),
  tool_definitions: nullable(z.array(jsonObject)),
  extra: nullable(jsonObject),
});

interface AtifTrajectoryShape {
  schema_version: string;
  session_id?: string | null;
  trajectory_id?: string | null;
  agent: z.infer<typeof atifAgentSchema>;
  steps: Array<z.infer<typeof atifStepSchema>>;
  notes?: string | null;
  final_metrics?: z.infer<typeof finalMetricsSchema> | null;
  continued_trajectory_ref?: string | null;
  extra?: Record<string, unknown> | null;
  subagent_trajectories?: AtifTrajectoryShape[] | null;
}

/** Harbor's ATIF trajectory, version 1.7 (earlier 1.x versions read too: each only added fields). */
export const atifTrajectorySchema: z.ZodType<AtifTrajectoryShape> = z.lazy(() =>
  z
    .strictObject({
      schema_version: z.string().regex(/^ATIF-v1\.\d+$/, 'an ATIF-v1.x version'),
      session_id: nullable(z.string()),
      trajectory_id: nullable(z.string()),
      agent: atifAgentSchema,
      steps: z.array(atifStepSchema),
      notes: nullable(z.string()),
      final_metrics: nullable(finalMetricsSchema),
      continued_trajectory_ref: nullable(z.string()),
      extra: nullable(jsonObject),
      subagent_trajectories: nullable(z.array(atifTrajectorySchema)),
    })
    .superRefine((trajectory, context) => {
      trajectory.steps.forEach((step, position) => {
        if (step.step_id !== position + 1)
          context.addIssue({
            code: 'custom',
            path: ['steps', position, 'step_id'],
            message: `step ${position + 1} has step_id ${step.step_id}: step ids run 1, 2, 3...`,
          });
      });
      const embedded = (trajectory.subagent_trajectories ?? []).map((sub) => sub.trajectory_id);
      if (embedded.some((id) => id == null))
        context.addIssue({
          code: 'custom',
          message: 'an embedded subagent trajectory needs a trajectory_id',
        });
      if (new Set(embedded).size !== embedded.length)
        context.addIssue({ code: 'custom', message: 'embedded subagent trajectory_ids must be unique' });
    }),
);
export type AtifTrajectory = AtifTrajectoryShape;
export type AtifStep = z.infer<typeof atifStepSchema>;
