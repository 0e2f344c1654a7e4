import { describe, expect, it } from 'vitest';
import {
  checkChatContent,
  checkMessagesContent,
  checkResponsesContent,
  MAX_CONTENT_DEPTH,
} from './content-policy.ts';

const strict = { allowRemoteImageUrls: false };
const open = { allowRemoteImageUrls: true };

const refusal = (check: () => void): string => {
  try {
    check();
  } catch (error) {
    return (error as Error).message;
  }
  return 'passed';
};

describe('content policy', () => {
  const nestedUrl = {
    messages: [
      {
        role: 'user',
        content: [
          {
            type: 'tool_result',
            tool_use_id: 't',
            content: [
              {
                type: 'document',
                source: {
                  type: 'content',
                  content: [{ type: 'image', source: { type: 'url', url: 'https://example.org/x.png' } }],
                },
              },
            ],
          },
        ],
      },
    ],
  };

  it('names the exact place of a refused nested source', () => {
    expect(refusal(() => checkMessagesContent(nestedUrl, strict))).toContain(
      'refuses messages[0].content[0].content[0].source.content[0].source:',
    );
  });

  it('lets remote URLs through when the operator allows them, never stored files', () => {
    expect(refusal(() => checkMessagesContent(nestedUrl, open))).toBe('passed');
    const file = {
      messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'file', file_id: 'f' } }] }],
    };
    expect(refusal(() => checkMessagesContent(file, open))).toContain('stored on the upstream account');
    expect(
      refusal(() =>
        checkChatContent(
          { messages: [{ role: 'user', content: [{ type: 'file', file: { file_id: 'f' } }] }] },
          open,
        ),
      ),
    ).toContain('file.file_id');
    expect(
      refusal(() =>
        checkResponsesContent(
          {
            input: [
              { role: 'user', content: [{ type: 'input_file', file_url: 'https://example.org/f.pdf' }] },
            ],
          },
          open,
        ),
      ),
    ).toBe('passed');
  });

  it('takes data: URLs in any case, and refuses every other scheme', () => {
    const chat = (url: string) => ({
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }] }],
    });
    expect(refusal(() => checkChatContent(chat('DATA:image/png;base64,AA'), strict))).toBe('passed');
    for (const url of [
      'file:///etc/passwd',
      'ftp://example.org/x',
      '//example.org/x',
      'https://example.org/x',
    ])
      expect(
        refusal(() => checkChatContent(chat(url), strict)),
        url,
      ).toContain('image_url.url');
  });

  it('refuses content nested past the depth bound instead of walking it', () => {
    let content: unknown = [{ type: 'text', text: 'deep' }];
    for (let level = 0; level <= MAX_CONTENT_DEPTH + 1; level += 1)
      content = [{ type: 'tool_result', tool_use_id: 't', content }];
    expect(refusal(() => checkMessagesContent({ messages: [{ role: 'user', content }] }, strict))).toContain(
      'nested deeper',
    );
  });

  it('walks the system prompt, a predicted output and instructions given as items', () => {
    const image = { type: 'image', source: { type: 'url', url: 'https://example.org/x.png' } };
    expect(refusal(() => checkMessagesContent({ system: [image], messages: [] }, strict))).toContain(
      'system[0]',
    );
    expect(
      refusal(() =>
        checkChatContent(
          {
            messages: [],
            prediction: { type: 'content', content: [{ type: 'image_url', image_url: 'https://x' }] },
          },
          strict,
        ),
      ),
    ).toContain('prediction.content[0]');
    expect(
      refusal(() =>
        checkResponsesContent(
          { instructions: [{ role: 'system', content: [{ type: 'input_image', image_url: 'https://x' }] }] },
          strict,
        ),
      ),
    ).toContain('instructions[0].content[0].image_url');
  });
});
