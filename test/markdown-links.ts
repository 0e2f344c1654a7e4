/**
 * Checks the relative links of markdown files the way GitHub renders them: a link's path must
 * name a file or folder that exists, and its `#anchor` a heading (or an HTML `id`/`name`) of the
 * file it points at, slugged as GitHub slugs headings. Absolute URLs are left alone: no test may
 * reach the network, and their targets are not this repository's to keep.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, extname, join, relative, resolve } from 'node:path';

/** One link as written in a markdown file, with the line it is on (1-based). */
export interface MarkdownLink {
  target: string;
  line: number;
}

/** A link that does not resolve: the file it is in (relative to the root), the link, and why. */
export interface BrokenLink {
  file: string;
  line: number;
  target: string;
  reason: string;
}

/** Lines outside fenced code blocks, each with its line number; fenced lines become empty. */
function proseLines(text: string): string[] {
  const lines = text.split('\n');
  let fence: string | undefined;
  return lines.map((line) => {
    const opener = /^\s{0,3}(`{3,}|~{3,})/.exec(line);
    if (fence === undefined && opener) {
      fence = opener[1]!;
      return '';
    }
    if (fence !== undefined) {
      if (opener && opener[1]![0] === fence[0] && opener[1]!.length >= fence.length) fence = undefined;
      return '';
    }
    return line;
  });
}

/** A line with its inline code spans blanked, so a link written as code is not a link. */
function withoutCodeSpans(line: string): string {
  return line.replace(/(`+)[^`]*?\1/g, (span) => ' '.repeat(span.length));
}

/**
 * GitHub's heading anchor: the heading's text as rendered (markup, link targets and code
 * backticks gone), lower-cased, every character that is not a letter, digit, mark, connector
 * (`_`), space or hyphen dropped, and each space made a hyphen.
 */
export function githubSlug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/<[^>]+>/g, '')
    .replace(/`/g, '')
    .trim()
    .toLowerCase();
  return text.replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '').replace(/ /g, '-');
}

/** Every anchor a file offers: its headings' slugs (repeats numbered as GitHub does) and HTML ids. */
export function anchorsOf(text: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of proseLines(text)) {
    const heading = /^\s{0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$/.exec(line);
    if (heading) {
      const slug = githubSlug(heading[1]!);
      const count = seen.get(slug) ?? 0;
      seen.set(slug, count + 1);
      anchors.add(count === 0 ? slug : `${slug}-${count}`);
    }
    for (const match of line.matchAll(/<a\s[^>]*(?:id|name)="([^"]+)"/g)) anchors.add(match[1]!);
  }
  return anchors;
}

/** Every inline link, image and reference definition outside code. */
export function linksOf(text: string): MarkdownLink[] {
  const links: MarkdownLink[] = [];
  proseLines(text).forEach((raw, index) => {
    const line = withoutCodeSpans(raw);
    // `[text](target "title")`; the text may hold one level of brackets (a code span's are blanked).
    for (const match of line.matchAll(/!?\[(?:[^[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)/g))
      links.push({ target: match[1]!, line: index + 1 });
    const definition = /^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$/.exec(line);
    if (definition) links.push({ target: definition[1]!, line: index + 1 });
  });
  return links;
}

function isExternal(target: string): boolean {
  return /^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('//');
}

/**
 * The broken relative links of `files` (absolute paths), each resolved against its own folder,
 * or against `root` when it starts with `/` (as GitHub resolves them in a repository).
 */
export function brokenLinks(root: string, files: readonly string[]): BrokenLink[] {
  const anchorCache = new Map<string, Set<string>>();
  const anchorsFor = (path: string) => {
    let anchors = anchorCache.get(path);
    if (!anchors) {
      anchors = anchorsOf(readFileSync(path, 'utf8'));
      anchorCache.set(path, anchors);
    }
    return anchors;
  };
  const broken: BrokenLink[] = [];
  for (const file of files) {
    for (const link of linksOf(readFileSync(file, 'utf8'))) {
      if (link.target === '' || isExternal(link.target)) continue;
      const report = (reason: string) =>
        broken.push({ file: relative(root, file), line: link.line, target: link.target, reason });
      const hashAt = link.target.indexOf('#');
      let decoded: string;
      let anchor: string | undefined;
      try {
        decoded = decodeURIComponent(hashAt === -1 ? link.target : link.target.slice(0, hashAt));
        anchor = hashAt === -1 ? undefined : decodeURIComponent(link.target.slice(hashAt + 1));
      } catch {
        report('the link is not valid percent-encoding');
        continue;
      }
      const path =
        decoded === ''
          ? file
          : decoded.startsWith('/')
            ? join(root, decoded)
            : resolve(dirname(file), decoded);
      if (!existsSync(path)) {
        report(`no such file: ${relative(root, path)}`);
        continue;
      }
      if (anchor === undefined || anchor === '') continue;
      if (statSync(path).isDirectory() || extname(path) !== '.md') {
        report(`an anchor into ${relative(root, path)}, which is not a markdown file`);
        continue;
      }
      if (!anchorsFor(path).has(anchor)) report(`no heading #${anchor} in ${relative(root, path)}`);
    }
  }
  return broken;
}

/** The markdown files under `directory`, recursively, skipping dependency and build folders. */
export function markdownFilesUnder(directory: string): string[] {
  if (!existsSync(directory)) return [];
  const found: string[] = [];
  for (const entry of readdirSync(directory, { withFileTypes: true })) {
    if (['node_modules', 'dist', '.tools', '.git'].includes(entry.name)) continue;
    const path = join(directory, entry.name);
    if (entry.isDirectory()) found.push(...markdownFilesUnder(path));
    else if (entry.isFile() && entry.name.endsWith('.md')) found.push(path);
  }
  return found.sort();
}
