/**
 * What a scripted model answers. A script is stateless over HTTP: the reply for a request is
 * chosen from the conversation in that request (which task it is, how many assistant turns it
 * already has, what the last message says), so concurrent rollouts never disturb each other.
 */
import { z } from 'zod';

export const ScriptedToolCallSchema = z.object({
  name: z.string().min(1),
  /** An object (sent as JSON) or a raw string (sent as it is, e.g. to test malformed arguments). */
  arguments: z.union([z.record(z.string(), z.unknown()), z.string()]).default({}),
});

export const ScriptedReplySchema = z
  .object({
    content: z.string().optional(),
    toolCalls: z.array(ScriptedToolCallSchema).optional(),
    /** Answer with this HTTP error instead (to test retries and agent errors). */
    error: z
      .object({ status: z.number().int().min(400).max(599), message: z.string().default('scripted error') })
      .optional(),
    finishReason: z.enum(['stop', 'length', 'tool_calls']).optional(),
    /** Merged into the top level of the response (e.g. prompt_token_ids). */
    extra: z.record(z.string(), z.unknown()).optional(),
    /** Merged into the choice (chat) or the output message (responses), e.g. logprobs, token_ids. */
    choiceExtra: z.record(z.string(), z.unknown()).optional(),
    /**
     * Asked for token ids (vLLM's `return_token_ids`), answer with a prompt whose first assistant
     * turn was re-tokenised into other ids (see ./token-ids.ts): the drift a trainer must see.
     */
    retokeniseHistory: z.boolean().optional(),
    /** Asked for token ids, answer without them (as a server that does not know `return_token_ids`): a call whose ids are lost. */
    withholdTokenIds: z.boolean().optional(),
  })
  .strict();
export type ScriptedReply = z.infer<typeof ScriptedReplySchema>;

export const ScriptedRuleSchema = z
  .object({
    /** Applies when the last non-system message contains this text. */
    lastMessageContains: z.string().optional(),
    /** Applies at this assistant turn (0 = the first reply). */
    turn: z.number().int().nonnegative().optional(),
    /** Applies only when the request does (true) or does not (false) declare tools (side calls such as title generation declare none). */
    hasTools: z.boolean().optional(),
    reply: ScriptedReplySchema,
  })
  .strict();

export const ScriptedConversationSchema = z
  .object({
    /** This conversation script is used when any message contains this text (a task id, say). */
    match: z.string().optional(),
    /** Reply i answers assistant turn i; past the end, the last reply repeats (an endless agent). */
    replies: z.array(ScriptedReplySchema).default([]),
    /** Checked before `replies`, first match wins. */
    rules: z.array(ScriptedRuleSchema).default([]),
  })
  .strict();

export const ModelScriptSchema = z
  .object({
    model: z.string().default('scripted-model'),
    conversations: z.array(ScriptedConversationSchema).min(1),
  })
  .strict();
export type ModelScript = z.output<typeof ModelScriptSchema>;

/** A conversation reduced to what scripts match on, from any of the three wire formats. */
export interface ConversationView {
  texts: string[];
  lastText: string;
  assistantTurns: number;
  hasTools: boolean;
}

export function chooseReply(script: ModelScript, conversation: ConversationView): ScriptedReply {
  const all = conversation.texts.join('\n');
  const chosen = script.conversations.find(
    (candidate) => candidate.match === undefined || all.includes(candidate.match),
  );
  if (chosen === undefined)
    return { content: `no scripted conversation matches this request (model ${script.model})` };
  for (const rule of chosen.rules) {
    const isTurn = rule.turn === undefined || rule.turn === conversation.assistantTurns;
    const isText =
      rule.lastMessageContains === undefined || conversation.lastText.includes(rule.lastMessageContains);
    const isTools = rule.hasTools === undefined || rule.hasTools === conversation.hasTools;
    if (isTurn && isText && isTools) return rule.reply;
  }
  if (chosen.replies.length === 0) return { content: '' };
  return chosen.replies[Math.min(conversation.assistantTurns, chosen.replies.length - 1)]!;
}

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => {
        if (typeof part === 'string') return part;
        const record = part as Record<string, unknown>;
        if (typeof record.text === 'string') return record.text;
        if (typeof record.output === 'string') return record.output;
        if (record.content !== undefined) return textOf(record.content);
        return '';
      })
      .join('\n');
  }
  return content === null || content === undefined ? '' : JSON.stringify(content);
}

/** Chat Completions `messages`, Responses `input` (+`instructions`), or Anthropic `messages` (+`system`). */
export function viewConversation(body: Record<string, unknown>): ConversationView {
  const texts: string[] = [];
  let assistantTurns = 0;
  let lastText = '';
  const note = (text: string) => {
    texts.push(text);
    lastText = text;
  };
  if (typeof body.instructions === 'string') texts.push(body.instructions);
  if (body.system !== undefined) texts.push(textOf(body.system));
  const items = Array.isArray(body.messages)
    ? body.messages
    : Array.isArray(body.input)
      ? body.input
      : typeof body.input === 'string'
        ? [{ role: 'user', content: body.input }]
        : [];
  let previousWasAssistant = false;
  for (const raw of items as Array<Record<string, unknown>>) {
    const role = raw.role as string | undefined;
    const type = raw.type as string | undefined;
    // Responses: one assistant turn may be several items (message + function_call); count it once.
    const isAssistant = role === 'assistant' || type === 'function_call';
    if (isAssistant && !previousWasAssistant) assistantTurns += 1;
    previousWasAssistant = isAssistant;
    if (role === 'system' || role === 'developer') {
      texts.push(textOf(raw.content));
      continue;
    }
    if (type === 'function_call_output') note(textOf(raw.output));
    else if (type === 'function_call') note(String(raw.arguments ?? ''));
    else note(textOf(raw.content));
  }
  return { texts, lastText, assistantTurns, hasTools: Array.isArray(body.tools) && body.tools.length > 0 };
}
