/**
 * What an agent's model request may ask the upstream to do. The agent is the adversary (DESIGN
 * 7a) and the upstream runs on the operator's account: a request must not make the upstream
 * reach the network for the agent (server-side tools such as web fetch/search and code
 * execution, the MCP connector, remote image or document URLs the upstream downloads), touch
 * the account's stored state (uploaded files, containers, stored prompts and conversations, and
 * responses other than the rollout's own), run past the call that asked (background
 * responses), or raise the price of a call (service tiers, the 1M-context beta, several
 * choices). Such requests are refused with a VALIDATION_FAILED that
 * names the field, so the agent learns why rather than getting a silently different answer.
 * Tools are an allow-list (client tools only), and so is content, to the bottom
 * (./content-policy.ts); top-level fields known to reach out or cost more are refused by name.
 * Pure functions; the gateway calls them before a call is counted or forwarded.
 */
import { GymError } from '../../core/errors.ts';
import { checkChatContent, checkMessagesContent, checkResponsesContent } from './content-policy.ts';

type Json = Record<string, unknown>;

export interface RequestPolicy {
  /** Let image, document, audio and file URLs (which the upstream downloads) through; data: URLs always pass. */
  allowRemoteImageUrls: boolean;
}

/** What the gateway knows of the rollout a request comes from. */
export interface RolloutView {
  /** Whether the upstream gave this rollout a response of this id (a `previous_response_id` it may continue). */
  hasResponse(id: string): boolean;
}

function refuse(field: string, why: string): never {
  throw new GymError('VALIDATION_FAILED', `the gateway refuses ${field}: ${why}`, { details: { field } });
}

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const isSet = (value: unknown) => value !== undefined && value !== null;

/**
 * `stream` must be a boolean and `stream_options` an object: the gateway decides from them
 * whether a call streams and asks the upstream for its usage, and an upstream that reads `"true"`
 * or `1` as true would stream a call the gateway took for a plain one, without usage.
 */
function checkStreamFields(request: Json): void {
  if (isSet(request.stream) && typeof request.stream !== 'boolean')
    refuse('stream', 'it must be true or false');
  if (isSet(request.stream_options) && !isObject(request.stream_options))
    refuse('stream_options', 'it must be an object');
}

/** Anthropic beta flags an agent may pass on: what Claude Code sends, none of which reaches out or costs more. */
const ALLOWED_ANTHROPIC_BETAS = [
  'claude-code-',
  'interleaved-thinking-',
  'fine-grained-tool-streaming-',
  'prompt-caching-',
  'token-efficient-tools-',
  'context-management-',
  'effort-',
];

/**
 * The agent's `anthropic-beta` header with only allow-listed flags (others, e.g. mcp-client-*,
 * web-fetch-*, code-execution-*, files-api-*, context-1m-*, are dropped).
 */
export function filterAnthropicHeaders(headers: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  if (headers['anthropic-version'] !== undefined) out['anthropic-version'] = headers['anthropic-version'];
  const beta = (headers['anthropic-beta'] ?? '')
    .split(',')
    .map((flag) => flag.trim())
    .filter((flag) => ALLOWED_ANTHROPIC_BETAS.some((prefix) => flag.startsWith(prefix)));
  if (beta.length > 0) out['anthropic-beta'] = beta.join(',');
  return out;
}

/**
 * A Messages request (or count_tokens request): client tools only (each with an input_schema,
 * no server-tool `type`), no MCP servers, containers or service tiers, no remote sources.
 */
export function checkMessagesRequest(request: Json, policy: RequestPolicy): void {
  checkStreamFields(request);
  for (const field of ['mcp_servers', 'container'])
    if (request[field] !== undefined && request[field] !== null)
      refuse(field, 'it gives the upstream network access or account state on the operator key');
  if (request.service_tier !== undefined && request.service_tier !== 'standard_only')
    refuse('service_tier', 'only "standard_only" is accepted (other tiers cost more)');
  const tools = request.tools;
  if (tools !== undefined && !Array.isArray(tools)) refuse('tools', 'it must be an array');
  (tools ?? []).forEach((tool: unknown, index: number) => {
    if (
      !isObject(tool) ||
      !isObject(tool.input_schema) ||
      (tool.type !== undefined && tool.type !== 'custom')
    )
      refuse(
        `tools[${index}]${isObject(tool) && typeof tool.type === 'string' ? ` (type ${tool.type})` : ''}`,
        'only client tools with an input_schema are accepted: server-side tools run on the upstream, with network access',
      );
  });
  checkMessagesContent(request, policy);
}

/** Tool types that the client runs itself (everything else runs on the upstream). */
const CLIENT_TOOL_TYPES = new Set(['function', 'custom']);

/** Function tools, custom tools, and namespaces of them (as Codex groups some of its tools). */
function checkOpenAiTools(tools: unknown, field = 'tools'): void {
  if (tools === undefined || tools === null) return;
  if (!Array.isArray(tools)) refuse(field, 'it must be an array');
  tools.forEach((tool, index) => {
    const type = isObject(tool) ? tool.type : undefined;
    if (type === 'namespace' && isObject(tool)) {
      checkOpenAiTools(tool.tools ?? [], `${field}[${index}].tools`);
      return;
    }
    if (typeof type !== 'string' || !CLIENT_TOOL_TYPES.has(type))
      refuse(
        `${field}[${index}]${typeof type === 'string' ? ` (type ${type})` : ''}`,
        'only function tools are accepted: server-side tools (web search, file search, code interpreter, MCP) run on the upstream, with network access',
      );
  });
}

/**
 * A Chat Completions or Responses request: function tools only, no remote image or file URLs,
 * one choice; a Responses request continues only a response of its own rollout and names no
 * stored conversation, prompt or item, and none runs in the background.
 */
export function checkOpenAiRequest(
  api: 'chat.completions' | 'responses',
  request: Json,
  policy: RequestPolicy,
  rollout: RolloutView,
): void {
  checkStreamFields(request);
  checkOpenAiTools(request.tools);
  if (request.service_tier !== undefined && request.service_tier !== null) {
    if (!['auto', 'default', 'flex'].includes(String(request.service_tier)))
      refuse('service_tier', 'only "auto", "default" or "flex" is accepted (other tiers cost more)');
  }
  if (api === 'chat.completions') {
    if (request.web_search_options !== undefined && request.web_search_options !== null)
      refuse('web_search_options', 'web search runs on the upstream, with network access');
    // Several choices multiply the call's cost and what it records past the rollout's
    // accounting, and a rollout is one trajectory: sample more rollouts instead.
    if (isSet(request.n) && request.n !== 1) refuse('n', 'only one choice per call (n: 1) is accepted');
    checkChatContent(request, policy);
    return;
  }
  if (isSet(request.conversation))
    refuse(
      'conversation',
      "it names a conversation stored on the upstream account (another rollout's, or the operator's)",
    );
  if (isSet(request.prompt)) refuse('prompt', 'it names a prompt stored on the upstream account');
  if (isSet(request.background) && request.background !== false)
    refuse(
      'background',
      "a background response runs on after the call returns, outside the rollout's record and budget",
    );
  const previous = request.previous_response_id;
  if (isSet(previous) && (typeof previous !== 'string' || !rollout.hasResponse(previous)))
    refuse(
      'previous_response_id',
      "only the id of a response this rollout received is accepted (any other is another rollout's or the operator's stored conversation)",
    );
  // An item reference makes the upstream read a stored item by its id: an item of another
  // rollout's response, or the operator's (its `type` may be left out: then it has an id and no role).
  const input = Array.isArray(request.input) ? request.input : [];
  input.forEach((item, index) => {
    if (!isObject(item)) return;
    const isReference =
      item.type === 'item_reference' ||
      (!isSet(item.type) && item.id !== undefined && item.role === undefined);
    if (isReference)
      refuse(
        `input[${index}]`,
        "an item reference names an item stored on the upstream account (another rollout's, or the operator's); send the item itself, or previous_response_id of this rollout's response",
      );
  });
  checkResponsesContent(request, policy);
}
