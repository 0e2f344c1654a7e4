import { describe, expect, it } from 'vitest';
import { imageFolderName } from './image-folder.ts';

describe('image folders', () => {
  it('names a folder per reference, and refuses references that would name another place', () => {
    expect(imageFolderName('gym/debian-base:4b06821801f1')).toBe('gym_debian-base_4b06821801f1');
    expect(imageFolderName('a/../b')).toBe('a_.._b');
    // Seen: the image ".." named the host's work directory, which holds every sandbox's state file.
    for (const reference of ['..', '.', '...', '.hidden', ''])
      expect(() => imageFolderName(reference)).toThrow(/cannot name an image folder/);
  });
});
