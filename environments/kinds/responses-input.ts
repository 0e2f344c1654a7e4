/**
 * NeMo Gym rows carry their prompt as OpenAI Responses create parameters
 * (`responses_create_params.input`: a string, or a list of messages whose content is a string or
 * a list of text parts; `instructions` before them). NeMo Gym sends that to the model as it is;
 * here it becomes the conversation the model-driven harnesses send (as Chat Completions
 * messages), and the text of its system and user messages is the instruction of the harnesses
 * that take one prompt. What cannot be a prompt (images, tool calls) is refused, naming the item.
 */
import { z } from 'zod';

const TextPartSchema = z.looseObject({
  type: z.enum(['input_text', 'output_text', 'text'], {
    message: 'only text parts (input_text, output_text) can be a prompt here',
  }),
  text: z.string(),
});

const InputMessageSchema = z.looseObject({
  type: z
    .literal('message', { message: 'only messages can be a prompt here (no tool calls or outputs)' })
    .optional(),
  role: z.enum(['system', 'developer', 'user', 'assistant']),
  content: z.union([z.string(), z.array(TextPartSchema)]),
});

/**
 * The create parameters a row may carry. An empty `input` list is a row whose agent reads its task
 * elsewhere (NeMo Gym's `swe_agents` rows keep it under `metadata`): the kind's own fields must then
 * give the prompt. The sampling settings may be null, as NeMo Gym echoes unset ones.
 */
export const ResponsesCreateParamsSchema = z.looseObject({
  input: z.union([
    z.string().trim().min(1, 'must not be empty'),
    z.array(InputMessageSchema, { message: 'must be a string or a list of messages' }),
  ]),
  instructions: z.string().nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  max_output_tokens: z.number().int().positive().nullish(),
});
export type ResponsesCreateParams = z.output<typeof ResponsesCreateParamsSchema>;

/** One message of a prompt, as Chat Completions takes it. */
export interface PromptMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

/** The conversation of valid create parameters: `instructions` first, developer turns as system. */
export function promptMessages(params: ResponsesCreateParams): PromptMessage[] {
  const messages: PromptMessage[] = [];
  if (typeof params.instructions === 'string' && params.instructions.trim() !== '')
    messages.push({ role: 'system', content: params.instructions });
  if (typeof params.input === 'string') return [...messages, { role: 'user', content: params.input }];
  for (const item of params.input) {
    const content =
      typeof item.content === 'string' ? item.content : item.content.map((part) => part.text).join('');
    messages.push({ role: item.role === 'developer' ? 'system' : item.role, content });
  }
  return messages;
}

/** The row's conversation, or undefined when it has no (valid, non-empty) `responses_create_params`. */
export function rowConversation(row: Record<string, unknown>): PromptMessage[] | undefined {
  const parsed = ResponsesCreateParamsSchema.safeParse(row.responses_create_params);
  if (!parsed.success) return undefined;
  const messages = promptMessages(parsed.data);
  return messages.length === 0 ? undefined : messages;
}

/** One prompt from a conversation: its system and user texts, in order (answers of few-shot turns left out). */
export function promptText(messages: readonly PromptMessage[]): string {
  return messages
    .filter((message) => message.role !== 'assistant')
    .map((message) => message.content)
    .join('\n\n');
}

/** The sampling settings a row asks for, as Chat Completions names them (NeMo Gym sends them with the input). */
export function rowSampling(
  row: Record<string, unknown>,
): { temperature?: number; top_p?: number; max_tokens?: number } | undefined {
  const parsed = ResponsesCreateParamsSchema.safeParse(row.responses_create_params);
  if (!parsed.success) return undefined;
  const { temperature, top_p, max_output_tokens } = parsed.data;
  const sampling = {
    ...(typeof temperature === 'number' ? { temperature } : {}),
    ...(typeof top_p === 'number' ? { top_p } : {}),
    ...(typeof max_output_tokens === 'number' ? { max_tokens: max_output_tokens } : {}),
  };
  return Object.keys(sampling).length === 0 ? undefined : sampling;
}
