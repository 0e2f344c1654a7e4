/** Which files a git diff touches, read from its headers. */

/** The paths a patch's `diff --git a/X b/Y` headers name (the Y side). */
export function patchTargets(patch: string): string[] {
  return [...patch.matchAll(/^diff --git a\/.* b\/(.*)$/gm)].map((match) => match[1]!);
}

/**
 * The files a patch changes that exist before it (its `--- a/X` sides, not `/dev/null`): the
 * test files reset to the base commit before the test patch is applied.
 */
export function filesBeforePatch(patch: string): string[] {
  const files: string[] = [];
  for (const section of patch.split(/^(?=diff --git )/m)) {
    if (!section.startsWith('diff --git ')) continue;
    // Only the header counts: a hunk line can start with "--- " too (a removed "-- " line).
    const header = section.split(/^@@ /m, 1)[0]!;
    const source = /^--- (.*)$/m.exec(header)?.[1]?.split('\t', 1)[0];
    if (source?.startsWith('a/')) files.push(source.slice(2));
  }
  return [...new Set(files)];
}
