/**
 * Terminals (PTY sessions) of a sandbox: what `/v1/sandboxes/{id}/ptys` takes and answers. A
 * session is an interactive program (a shell, or a command run by `sh -c`) on a terminal of its
 * own, or, with `tty: false`, on pipes (stdout and stderr apart). Its output is kept in a bounded
 * window with absolute byte offsets, so a client in another process re-attaches and replays from
 * any offset still held (NeMo Gym's `SupportsSandboxPty` / `SupportsSandboxPtyAttach`).
 */
import { z } from 'zod';
import { AbsolutePathSchema, EnvSchema, ExecArgumentSchema } from './common.ts';

/** The id of one terminal: `pty-` and 16 random letters or digits, one per session. */
export const PTY_ID_PATTERN = /^pty-[a-z0-9]{16}$/;
/** The id of one attachment (who holds the session now): `att-` and 24 random letters or digits. */
export const ATTACHMENT_ID_PATTERN = /^att-[a-z0-9]{24}$/;

/** A terminal's side in characters; 1-1000 (no program uses more, and the kernel keeps 16 bits). */
const TerminalSideSchema = z.number().int().min(1).max(1000);

/** The signals a session takes, by name (`SIGINT`, or `INT`). */
export const PTY_SIGNALS = [
  'HUP',
  'INT',
  'QUIT',
  'KILL',
  'USR1',
  'USR2',
  'PIPE',
  'ALRM',
  'TERM',
  'CONT',
  'STOP',
  'TSTP',
  'WINCH',
] as const;

export const PtyCreateRequestSchema = z
  .object({
    /** Run by `sh -c` on the terminal; absent: the sandbox's shell (`bash -i`, else `sh -i`). */
    command: ExecArgumentSchema.min(1).optional(),
    cwd: AbsolutePathSchema.optional(),
    /** Added to (and overriding) the sandbox's environment; `TERM` defaults to `xterm-256color`. */
    env: EnvSchema.default({}),
    rows: TerminalSideSchema.default(24),
    cols: TerminalSideSchema.default(80),
    /** Run as this user (a name or a numeric uid) instead of the sandbox's. */
    user: z.string().min(1).max(256).optional(),
    /** `false`: no terminal; stdout and stderr on pipes, read apart (`rows`/`cols` ignored). */
    tty: z.boolean().default(true),
  })
  .strict();
export type PtyCreateRequestInput = z.input<typeof PtyCreateRequestSchema>;
export type PtyCreateRequest = z.output<typeof PtyCreateRequestSchema>;

export const PtyInfoSchema = z.object({
  id: z.string(),
  sandboxId: z.string(),
  /** What runs (`null`: the sandbox's shell). */
  command: z.string().nullable(),
  tty: z.boolean(),
  rows: z.number().int(),
  cols: z.number().int(),
  /** `running` until the program ends (`exited`, with `exitCode`) or its transport is lost (`lost`). */
  state: z.enum(['running', 'exited', 'lost']),
  /** The program's exit code once it ended; null while it runs, or when it was lost or killed by a signal. */
  exitCode: z.number().int().nullable(),
  /** Why the session was lost, for humans (`state: lost`). */
  reason: z.string().optional(),
  /** Absolute offsets of the output (stdout with a terminal): the first byte still held and the end. */
  output: z.object({ start: z.number().int(), end: z.number().int() }),
  /** Whether a client holds the session now (an attachment); another attaches only with `takeover`. */
  held: z.boolean(),
  createdAt: z.string(),
});
export type PtyInfo = z.infer<typeof PtyInfoSchema>;

/** A create or an attach: the session, and the attachment that now holds it. */
export const PtyAttachmentSchema = z.object({
  pty: PtyInfoSchema,
  /** Sent with reads and writes: once another client takes the session over they answer `PTY_DETACHED`. */
  attachment: z.string(),
});
export type PtyAttachment = z.infer<typeof PtyAttachmentSchema>;

export const PtyListSchema = z.object({ ptys: z.array(PtyInfoSchema) });

export const PtyAttachRequestSchema = z
  .object({
    /** Evict the client holding the session (its next read or write fails); without it a held session refuses. */
    takeover: z.boolean().default(true),
  })
  .strict();

/** The most output one read answers (its bytes travel base64 in JSON). */
export const MAX_PTY_READ_BYTES = 4 * 1024 * 1024;
/** The longest a read or a wait holds its request open for output or the end. */
export const MAX_PTY_WAIT_MS = 60_000;

export const PtyReadQuerySchema = z
  .object({
    /** Output from this absolute offset (default: the first byte still held). */
    since: z.coerce.number().int().min(0).optional(),
    /** `stderr` only without a terminal (`tty: false`); with one it is always empty. */
    stream: z.enum(['stdout', 'stderr']).default('stdout'),
    /** Wait up to this long for output past `since` (or the end) before answering empty. */
    waitMs: z.coerce.number().int().min(0).max(MAX_PTY_WAIT_MS).default(0),
    maxBytes: z.coerce
      .number()
      .int()
      .min(1)
      .max(MAX_PTY_READ_BYTES)
      .default(1024 * 1024),
    attachment: z.string().regex(ATTACHMENT_ID_PATTERN).optional(),
  })
  .strict();

export const PtyOutputSchema = z.object({
  /** The bytes, base64, from `offset` on. */
  data: z.string(),
  /** The absolute offset of the first byte of `data`. */
  offset: z.number().int(),
  /** Where the next read continues (`offset` + bytes in `data`). */
  next: z.number().int(),
  /** Bytes between `since` and `offset` no longer held (the window moved past them): replay lost them. */
  dropped: z.number().int(),
  /** The program ended and every byte up to `next` was read: nothing more will come. */
  eof: z.boolean(),
  state: PtyInfoSchema.shape.state,
  exitCode: z.number().int().nullable(),
});
export type PtyOutput = z.infer<typeof PtyOutputSchema>;

/** The most bytes one write carries (a paste, not a file upload: files have their own routes). */
export const MAX_PTY_WRITE_BYTES = 1024 * 1024;

export const PtyWriteRequestSchema = z
  .object({
    /** The bytes for the program's standard input, base64. */
    data: z.string().max(Math.ceil(MAX_PTY_WRITE_BYTES / 3) * 4),
    attachment: z.string().regex(ATTACHMENT_ID_PATTERN).optional(),
  })
  .strict();

export const PtyResizeRequestSchema = z
  .object({
    rows: TerminalSideSchema,
    cols: TerminalSideSchema,
    attachment: z.string().regex(ATTACHMENT_ID_PATTERN).optional(),
  })
  .strict();

export const PtySignalRequestSchema = z
  .object({
    /** A signal name, `SIGINT` or `INT`, sent to the session's process group. */
    signal: z
      .string()
      .transform((name) => name.toUpperCase().replace(/^SIG/, ''))
      .pipe(z.enum(PTY_SIGNALS)),
    attachment: z.string().regex(ATTACHMENT_ID_PATTERN).optional(),
  })
  .strict();

export const PtyWaitQuerySchema = z
  .object({
    /** Wait up to this long for the program to end before answering (its state then says whether it did). */
    waitMs: z.coerce.number().int().min(0).max(MAX_PTY_WAIT_MS).default(0),
  })
  .strict();

export const PtyDetachQuerySchema = z
  .object({ attachment: z.string().regex(ATTACHMENT_ID_PATTERN) })
  .strict();
