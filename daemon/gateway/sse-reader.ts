/**
 * A reader of server-sent events, as both kinds of upstream stream them: the bytes of a
 * response body split into events, each with its name and its data parsed as JSON. The
 * gateway's Anthropic client reads Messages streams with it (the openai client has its own).
 */
/** Splits an SSE byte stream into events (name and JSON data); a data line that is not JSON is kept as text. */
export async function* readSse(
  body: AsyncIterable<Uint8Array>,
): AsyncGenerator<{ name: string | null; data: unknown }> {
  const decoder = new TextDecoder();
  let buffer = '';
  let name: string | null = null;
  let data: string[] = [];
  const flush = () => {
    if (data.length === 0) {
      name = null;
      return null;
    }
    const text = data.join('\n');
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // Kept as text (e.g. a `[DONE]` sentinel).
    }
    const event = { name, data: parsed };
    name = null;
    data = [];
    return event;
  };
  for await (const chunk of body) {
    buffer += decoder.decode(chunk, { stream: true });
    let newline = buffer.indexOf('\n');
    while (newline !== -1) {
      const line = buffer.slice(0, newline).replace(/\r$/, '');
      buffer = buffer.slice(newline + 1);
      newline = buffer.indexOf('\n');
      if (line === '') {
        const event = flush();
        if (event !== null) yield event;
      } else if (line.startsWith('event:')) name = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
  }
  const last = flush();
  if (last !== null) yield last;
}
