/**
 * What the content of a model request may hold: the part of the request policy
 * (./request-policy.ts) that keeps the upstream from fetching anything for the agent. An image,
 * document, audio or file the upstream downloads by its URL is a way out of a sandbox that has no
 * network, on the operator's account; so is a stored file named by its id, or a replayed result of
 * a server tool.
 *
 * The check is an allow-list of shapes, walked to the bottom: every content block (Messages) or
 * part (Chat Completions, Responses) must be of a type listed here, carry only the fields listed
 * for it, and each field that holds a source or more content is checked the same way, however
 * deep (a document of blocks, a tool result of documents, a function output of images). What is
 * not listed is refused, so a shape added to an API later, or nested where we did not look, is
 * refused until it is listed, instead of slipping through. Remote URLs are refused unless the
 * operator allows them (`gateway.allowRemoteImageUrls`); `data:` URLs and inline data always pass.
 *
 * Left open on purpose: fields of a message or item around its content (roles, ids, tool-call
 * arguments, which are the agent's own text and fetch nothing), and tool inputs (a client tool
 * may take a URL: the agent's own tool fetches it, in the sandbox, or cannot).
 */
import { GymError } from '../../core/errors.ts';

type Json = Record<string, unknown>;

/** Whether remote URLs may go upstream (the upstream downloads them). */
export interface ContentPolicy {
  allowRemoteImageUrls: boolean;
}

/** Content nested deeper than this is refused (no real request nests more than a few levels). */
export const MAX_CONTENT_DEPTH = 16;

function refuse(field: string, why: string): never {
  throw new GymError('VALIDATION_FAILED', `the gateway refuses ${field}: ${why}`, { details: { field } });
}

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const isDataUrl = (url: string) => /^data:/i.test(url);

const REMOTE_URL_REASON =
  'the upstream would download it (a way out of the sandbox, on the operator account); send the data inline (base64 or a data: URL), or set gateway.allowRemoteImageUrls';
const STORED_FILE_REASON = 'it names a file stored on the upstream account';

/** A URL the upstream would fetch: a data: URL always passes, another only when the operator allows it. */
function checkUrl(url: unknown, field: string, policy: ContentPolicy): void {
  if (typeof url !== 'string') refuse(field, 'it must be a URL string');
  if (isDataUrl(url) || policy.allowRemoteImageUrls) return;
  refuse(field, REMOTE_URL_REASON);
}

/** A shape: the fields it may carry besides `type`, and how to check those that hold more. */
interface Shape {
  fields: readonly string[];
  check?: (value: Json, field: string, policy: ContentPolicy, depth: number) => void;
}

function checkFields(value: Json, shape: Shape, field: string, what: string): void {
  for (const key of Object.keys(value)) {
    if (key !== 'type' && !shape.fields.includes(key))
      refuse(
        `${field}.${key}`,
        `${what} carries no field "${key}" the gateway knows; it forwards only content it can check (known: ${shape.fields.join(', ')})`,
      );
  }
}

/** Checks every element of `list` (an array of typed objects) against `shapes`. */
function checkTyped(
  list: unknown,
  field: string,
  policy: ContentPolicy,
  depth: number,
  shapes: Readonly<Record<string, Shape>>,
  refusals: Readonly<Record<string, string>>,
  kind: string,
): void {
  if (depth > MAX_CONTENT_DEPTH) refuse(field, `content nested deeper than ${MAX_CONTENT_DEPTH} levels`);
  if (!Array.isArray(list)) refuse(field, 'it must be a string or an array');
  list.forEach((element, index) => {
    const at = `${field}[${index}]`;
    if (!isObject(element)) refuse(at, `a ${kind} must be an object`);
    const type = element.type;
    if (typeof type === 'string' && refusals[type] !== undefined)
      refuse(`${at} (type ${type})`, refusals[type]);
    const shape = typeof type === 'string' && Object.hasOwn(shapes, type) ? shapes[type] : undefined;
    if (shape === undefined)
      refuse(
        `${at}${typeof type === 'string' ? ` (type ${type})` : ''}`,
        `the gateway forwards only ${kind}s it can check (types: ${Object.keys(shapes).join(', ')})`,
      );
    checkFields(element, shape, at, `a ${String(type)} ${kind}`);
    shape.check?.(element, at, policy, depth);
  });
}

// --- Anthropic Messages ---------------------------------------------------------------------

/** Citations are locations in this request's own content (nothing is fetched for them). */
const CITATION_TYPES = new Set([
  'char_location',
  'page_location',
  'content_block_location',
  'search_result_location',
  'web_search_result_location',
]);

function checkCitations(value: Json, field: string): void {
  const citations = value.citations;
  if (citations === undefined || citations === null) return;
  if (isObject(citations)) {
    checkFields(citations, { fields: ['enabled'] }, `${field}.citations`, 'a citations setting');
    return;
  }
  if (!Array.isArray(citations)) refuse(`${field}.citations`, 'it must be an array or { enabled }');
  citations.forEach((citation, index) => {
    if (!isObject(citation) || typeof citation.type !== 'string' || !CITATION_TYPES.has(citation.type))
      refuse(
        `${field}.citations[${index}]`,
        `only citations of this request's content are accepted (types: ${[...CITATION_TYPES].join(', ')})`,
      );
  });
}

/** Sources by type: what each may carry, and whether a block of a kind may use it. */
const ANTHROPIC_SOURCES: Readonly<Record<string, Shape>> = {
  base64: { fields: ['media_type', 'data'] },
  text: { fields: ['media_type', 'data'] },
  content: {
    fields: ['content'],
    check: (source, field, policy, depth) => {
      if (typeof source.content !== 'string')
        checkAnthropicBlocks(source.content, `${field}.content`, policy, depth + 1);
    },
  },
  url: {
    fields: ['url'],
    check: (source, field, policy) => checkUrl(source.url, `${field}.url`, policy),
  },
};

function checkAnthropicSource(
  block: Json,
  field: string,
  policy: ContentPolicy,
  depth: number,
  allowed: readonly string[],
): void {
  const source = block.source;
  const at = `${field}.source`;
  if (!isObject(source)) refuse(at, 'it must be an object');
  const type = source.type;
  if (type === 'file') refuse(at, `file sources: ${STORED_FILE_REASON}`);
  if (type === 'url' && !policy.allowRemoteImageUrls) refuse(at, `URL sources: ${REMOTE_URL_REASON}`);
  if (typeof type !== 'string' || !allowed.includes(type))
    refuse(at, `the gateway forwards only sources it can check here (types: ${allowed.join(', ')})`);
  const shape = ANTHROPIC_SOURCES[type]!;
  checkFields(source, shape, at, `a ${type} source`);
  shape.check?.(source, at, policy, depth);
}

/** Content that is a string or blocks. */
function checkAnthropicContent(content: unknown, field: string, policy: ContentPolicy, depth: number): void {
  if (typeof content === 'string' || content === undefined) return;
  checkAnthropicBlocks(content, field, policy, depth);
}

const ANTHROPIC_BLOCKS: Readonly<Record<string, Shape>> = {
  text: {
    fields: ['text', 'citations', 'cache_control'],
    check: (block, field) => checkCitations(block, field),
  },
  image: {
    fields: ['source', 'cache_control'],
    check: (block, field, policy, depth) =>
      checkAnthropicSource(block, field, policy, depth, ['base64', 'url']),
  },
  document: {
    fields: ['source', 'title', 'context', 'citations', 'cache_control'],
    check: (block, field, policy, depth) => {
      checkAnthropicSource(block, field, policy, depth, ['base64', 'text', 'content', 'url']);
      checkCitations(block, field);
    },
  },
  // Its `source` is a name for citations (a string), not something the upstream fetches.
  search_result: {
    fields: ['source', 'title', 'content', 'citations', 'cache_control'],
    check: (block, field, policy, depth) => {
      if (typeof block.source !== 'string') refuse(`${field}.source`, 'it must be a string');
      checkAnthropicContent(block.content, `${field}.content`, policy, depth + 1);
      checkCitations(block, field);
    },
  },
  tool_use: { fields: ['id', 'name', 'input', 'cache_control', 'caller'] },
  tool_result: {
    fields: ['tool_use_id', 'content', 'is_error', 'cache_control'],
    check: (block, field, policy, depth) =>
      checkAnthropicContent(block.content, `${field}.content`, policy, depth + 1),
  },
  thinking: { fields: ['thinking', 'signature'] },
  redacted_thinking: { fields: ['data'] },
};

const SERVER_TOOL_REASON =
  'server tools run on the upstream with network access; their calls and results cannot be replayed through the gateway';

/** Known block types refused with their own reason (anything else unknown gets the general one). */
const ANTHROPIC_REFUSALS: Readonly<Record<string, string>> = {
  container_upload: 'container uploads use upstream containers',
  server_tool_use: SERVER_TOOL_REASON,
  web_search_tool_result: SERVER_TOOL_REASON,
  web_fetch_tool_result: SERVER_TOOL_REASON,
  code_execution_tool_result: SERVER_TOOL_REASON,
  bash_code_execution_tool_result: SERVER_TOOL_REASON,
  text_editor_code_execution_tool_result: SERVER_TOOL_REASON,
  tool_search_tool_result: SERVER_TOOL_REASON,
  mcp_tool_use: 'the MCP connector reaches MCP servers from the upstream',
  mcp_tool_result: 'the MCP connector reaches MCP servers from the upstream',
};

function checkAnthropicBlocks(blocks: unknown, field: string, policy: ContentPolicy, depth: number): void {
  checkTyped(blocks, field, policy, depth, ANTHROPIC_BLOCKS, ANTHROPIC_REFUSALS, 'content block');
}

/** The system prompt and every message's content of a Messages request (tool results, documents and search results inside included). */
export function checkMessagesContent(request: Json, policy: ContentPolicy): void {
  checkAnthropicContent(request.system, 'system', policy, 0);
  const messages = Array.isArray(request.messages) ? request.messages : [];
  messages.forEach((message, index) => {
    if (isObject(message)) checkAnthropicContent(message.content, `messages[${index}].content`, policy, 0);
  });
}

// --- OpenAI Chat Completions and Responses --------------------------------------------------

/** `{ url, detail }` or a bare URL string, as Chat's image_url (and vLLM's audio_url, video_url) take it. */
function checkUrlObject(value: unknown, field: string, policy: ContentPolicy): void {
  if (typeof value === 'string') {
    checkUrl(value, field, policy);
    return;
  }
  if (!isObject(value)) refuse(field, 'it must be a URL or { url }');
  checkFields(value, { fields: ['url', 'detail'] }, field, 'a URL object');
  checkUrl(value.url, `${field}.url`, policy);
}

function noStoredFile(part: Json, field: string): void {
  if (part.file_id !== undefined && part.file_id !== null) refuse(`${field}.file_id`, STORED_FILE_REASON);
}

/** Content parts of both APIs (an upstream refuses a part of the other API; none of these fetches unchecked). */
const OPENAI_PARTS: Readonly<Record<string, Shape>> = {
  text: { fields: ['text', 'cache_control'] },
  refusal: { fields: ['refusal'] },
  image_url: {
    fields: ['image_url', 'cache_control'],
    check: (part, field, policy) => checkUrlObject(part.image_url, `${field}.image_url`, policy),
  },
  // vLLM's multimodal parts: its server downloads the URL.
  audio_url: {
    fields: ['audio_url'],
    check: (part, field, policy) => checkUrlObject(part.audio_url, `${field}.audio_url`, policy),
  },
  video_url: {
    fields: ['video_url'],
    check: (part, field, policy) => checkUrlObject(part.video_url, `${field}.video_url`, policy),
  },
  input_audio: {
    fields: ['input_audio'],
    check: (part, field) => {
      if (!isObject(part.input_audio)) refuse(`${field}.input_audio`, 'it must be { data, format }');
      checkFields(part.input_audio, { fields: ['data', 'format'] }, `${field}.input_audio`, 'input audio');
    },
  },
  file: {
    fields: ['file'],
    check: (part, field) => {
      if (!isObject(part.file)) refuse(`${field}.file`, 'it must be { file_data, filename }');
      noStoredFile(part.file, `${field}.file`);
      checkFields(part.file, { fields: ['file_data', 'filename', 'file_id'] }, `${field}.file`, 'a file');
    },
  },
  input_text: { fields: ['text', 'cache_control'] },
  output_text: { fields: ['text', 'annotations', 'logprobs'] },
  summary_text: { fields: ['text'] },
  reasoning_text: { fields: ['text'] },
  input_image: {
    fields: ['image_url', 'detail', 'file_id'],
    check: (part, field, policy) => {
      noStoredFile(part, field);
      if (part.image_url !== undefined && part.image_url !== null)
        checkUrl(part.image_url, `${field}.image_url`, policy);
    },
  },
  input_file: {
    fields: ['file_data', 'filename', 'file_url', 'file_id'],
    check: (part, field, policy) => {
      noStoredFile(part, field);
      if (part.file_url !== undefined && part.file_url !== null)
        checkUrl(part.file_url, `${field}.file_url`, policy);
    },
  },
};

/** Content that is a string or parts. */
function checkOpenAiContent(content: unknown, field: string, policy: ContentPolicy, depth: number): void {
  if (typeof content === 'string' || content === undefined || content === null) return;
  checkTyped(content, field, policy, depth, OPENAI_PARTS, {}, 'content part');
}

/** Every Chat message's content, and a predicted output's. */
export function checkChatContent(request: Json, policy: ContentPolicy): void {
  const messages = Array.isArray(request.messages) ? request.messages : [];
  messages.forEach((message, index) => {
    if (isObject(message)) checkOpenAiContent(message.content, `messages[${index}].content`, policy, 0);
  });
  if (isObject(request.prediction))
    checkOpenAiContent(request.prediction.content, 'prediction.content', policy, 0);
}

const withContent =
  (...keys: string[]): Shape['check'] =>
  (item, field, policy, depth) => {
    for (const key of keys) checkOpenAiContent(item[key], `${field}.${key}`, policy, depth + 1);
  };

/**
 * Responses input items by type. Their other fields (ids, call ids, arguments, encrypted
 * reasoning) are the agent's or the upstream's own and fetch nothing, so only the type is
 * allow-listed and the content they carry is walked.
 */
const RESPONSES_ITEMS: Readonly<Record<string, Shape['check'] | null>> = {
  message: withContent('content'),
  function_call: null,
  function_call_output: withContent('output'),
  custom_tool_call: null,
  custom_tool_call_output: withContent('output'),
  reasoning: withContent('summary', 'content'),
  compaction: null,
};

/** The input items of a Responses request (and `instructions` given as items), content walked. */
export function checkResponsesContent(request: Json, policy: ContentPolicy): void {
  for (const key of ['input', 'instructions'] as const) {
    const items = request[key];
    if (!Array.isArray(items)) continue;
    items.forEach((item, index) => {
      const at = `${key}[${index}]`;
      if (!isObject(item)) refuse(at, 'an input item must be an object');
      // An item without a type is a message when it has a role.
      const type = item.type ?? (item.role !== undefined ? 'message' : undefined);
      if (typeof type !== 'string' || !Object.hasOwn(RESPONSES_ITEMS, type))
        refuse(
          `${at}${typeof type === 'string' ? ` (type ${type})` : ''}`,
          `the gateway forwards only input items it can check (types: ${Object.keys(RESPONSES_ITEMS).join(', ')}); results of server tools cannot be replayed`,
        );
      RESPONSES_ITEMS[type]?.(item, at, policy, 0);
    });
  }
}
