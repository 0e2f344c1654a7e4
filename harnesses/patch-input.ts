/**
 * Handing a patch to a command in a sandbox, the way that costs the engine least.
 *
 * A patch of up to {@link STDIN_PATCH_MAX_BYTES} goes on the command's stdin, in the one exec
 * that runs the command: a file upload first would cost the engine two more calls per patch (the
 * path check of the upload's directory, then the archive extraction, its most expensive call), and
 * a SWE rollout hands over three patches. A larger patch is uploaded as a file first, since an exec
 * request travels as JSON under the daemon's body limit (16 MiB) and JSON escaping can make a
 * string up to six times longer.
 *
 * Where the command needs the patch as a file (to read it more than once), the command writes it
 * itself (`cat > FILE`) before running. That is a program of the sandbox writing into the sandbox,
 * so use it only where that program is trusted: a sandbox where nothing of the agent has run
 * (a verifier's fresh one, before the agent's patch is applied) or the harness's own sandbox.
 */
import type { ExecRequestInput, ExecResult } from '../core/schemas/exec.ts';
import type { SandboxHandle } from './harness.ts';

/** 1 MiB: six times that, JSON-escaped, still fits the daemon's 16 MiB request body. */
export const STDIN_PATCH_MAX_BYTES = 1024 * 1024;

type PatchCommand = Omit<ExecRequestInput, 'command' | 'argv' | 'stdin' | 'stdinEncoding'> & {
  command: string;
};

/** Whether a patch goes to its command on stdin (else as an uploaded file). */
export function fitsStdin(patch: string): boolean {
  return patch.length <= STDIN_PATCH_MAX_BYTES && Buffer.byteLength(patch) <= STDIN_PATCH_MAX_BYTES;
}

/**
 * Runs `request.command`, which reads the patch from the file `path`, with the patch in that
 * file: written by the command's own shell from stdin when it fits, else uploaded first.
 */
export async function execWithPatchFile(
  sandbox: SandboxHandle,
  patch: string,
  path: string,
  request: PatchCommand,
): Promise<ExecResult> {
  if (fitsStdin(patch))
    return sandbox.exec({ ...request, command: `cat > ${path} && { ${request.command}; }`, stdin: patch });
  await sandbox.writeFile(path, Buffer.from(patch));
  return sandbox.exec(request);
}
