/**
 * Terminals (PTY sessions) of a sandbox: `/v1/sandboxes/{id}/ptys/...` (daemon/ptys/). A scoped
 * credential with the `pty` right on the sandbox may use them, on that sandbox only; a terminal
 * id is looked up under the route's own sandbox, so another sandbox's terminal is no terminal.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { GymError } from '../../core/errors.ts';
import { SANDBOX_ID_PATTERN } from '../../core/ids.ts';
import {
  PTY_ID_PATTERN,
  PtyAttachmentSchema,
  PtyAttachRequestSchema,
  PtyCreateRequestSchema,
  PtyDetachQuerySchema,
  PtyInfoSchema,
  PtyListSchema,
  PtyOutputSchema,
  PtyReadQuerySchema,
  PtyResizeRequestSchema,
  PtySignalRequestSchema,
  PtyWaitQuerySchema,
  PtyWriteRequestSchema,
} from '../../core/schemas/pty.ts';
import { parseOrThrow } from '../../core/validate.ts';
import { emptyAnswer, errorAnswers, jsonAnswer, optionalBody } from '../openapi.ts';
import type { PtySessions } from '../ptys/pty-sessions.ts';

const scopedPty = { config: { scoped: 'pty' as const } };

function ids(request: FastifyRequest): { sandboxId: string; ptyId: string } {
  const { id, ptyId } = request.params as { id: string; ptyId?: string };
  if (!SANDBOX_ID_PATTERN.test(id))
    throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist (not a sandbox id)`, {
      details: { sandboxId: id },
    });
  if (ptyId !== undefined && !PTY_ID_PATTERN.test(ptyId))
    throw new GymError('PTY_NOT_FOUND', `sandbox ${id} has no terminal ${ptyId} (not a terminal id)`, {
      details: { sandboxId: id, ptyId },
    });
  return { sandboxId: id, ptyId: ptyId ?? '' };
}

export const ptySchemas = {
  create: {
    summary:
      'open a terminal: a command (run by `sh -c`) or the shell, on a PTY of `rows`x`cols` (or on pipes, `tty: false`); the caller holds it (`attachment`)',
    ...optionalBody,
    body: PtyCreateRequestSchema,
    response: {
      201: jsonAnswer('the terminal and the attachment that holds it', PtyAttachmentSchema),
      ...errorAnswers(400, 404, 429, 501),
    },
  },
  list: {
    summary: "the sandbox's terminals, oldest first",
    response: { 200: jsonAnswer('terminals', PtyListSchema), ...errorAnswers(404) },
  },
  inspect: {
    summary: 'one terminal; with `waitMs`, answered once it ended or that time passed',
    querystring: PtyWaitQuerySchema,
    response: { 200: jsonAnswer('the terminal', PtyInfoSchema), ...errorAnswers(400, 404) },
  },
  attach: {
    summary:
      'hold a terminal from this client (another process re-attaching); `takeover` (default true) evicts the holder, whose next call fails with PTY_DETACHED',
    ...optionalBody,
    body: PtyAttachRequestSchema,
    response: {
      200: jsonAnswer('the terminal and the new attachment', PtyAttachmentSchema),
      ...errorAnswers(404, 409),
    },
  },
  detach: {
    summary: 'let go of a terminal (it keeps running for the next attach); idempotent',
    querystring: PtyDetachQuerySchema,
    response: { 204: emptyAnswer('let go'), ...errorAnswers(400, 404) },
  },
  read: {
    summary:
      'output from an absolute byte offset (`since`), waiting up to `waitMs` for some; bytes that left the bounded window are counted in `dropped`',
    querystring: PtyReadQuerySchema,
    response: {
      200: jsonAnswer('the bytes (base64) and where to read next', PtyOutputSchema),
      ...errorAnswers(400, 404, 409),
    },
  },
  write: {
    summary: "bytes (base64) to the terminal's input",
    body: PtyWriteRequestSchema,
    response: { 204: emptyAnswer('written'), ...errorAnswers(400, 404, 409) },
  },
  resize: {
    summary: 'resize the terminal (the program gets SIGWINCH)',
    body: PtyResizeRequestSchema,
    response: { 200: jsonAnswer('the terminal', PtyInfoSchema), ...errorAnswers(400, 404, 409) },
  },
  signal: {
    summary: 'send a signal (`SIGINT`, `SIGTERM`, ...) to every process of the terminal',
    body: PtySignalRequestSchema,
    response: { 200: jsonAnswer('the terminal', PtyInfoSchema), ...errorAnswers(400, 404, 409, 502) },
  },
  close: {
    summary: 'end a terminal: every process of it killed, its output let go; idempotent',
    response: { 204: emptyAnswer('closed, or no such terminal'), ...errorAnswers(404) },
  },
};

export function registerPtyRoutes(app: FastifyInstance, ptys: PtySessions): void {
  // A long poll (up to a minute) must not hold the daemon's drain when it stops.
  app.addHook('preClose', (done) => {
    ptys.releaseWaiters();
    done();
  });
  const base = '/v1/sandboxes/:id/ptys';
  app.post(base, { ...scopedPty, schema: ptySchemas.create }, async (request, reply) => {
    const created = await ptys.create(ids(request).sandboxId, request.body ?? {});
    reply.status(201);
    return created;
  });
  app.get(base, { ...scopedPty, schema: ptySchemas.list }, async (request) => ({
    ptys: ptys.list(ids(request).sandboxId),
  }));
  app.get(`${base}/:ptyId`, { ...scopedPty, schema: ptySchemas.inspect }, async (request) => {
    const { sandboxId, ptyId } = ids(request);
    return ptys.get(sandboxId, ptyId, request.query);
  });
  app.delete(`${base}/:ptyId`, { ...scopedPty, schema: ptySchemas.close }, async (request, reply) => {
    const { sandboxId, ptyId } = ids(request);
    await ptys.close(sandboxId, ptyId);
    reply.status(204);
  });
  app.post(`${base}/:ptyId/attach`, { ...scopedPty, schema: ptySchemas.attach }, async (request) => {
    const { sandboxId, ptyId } = ids(request);
    return ptys.attach(sandboxId, ptyId, request.body ?? {});
  });
  app.delete(`${base}/:ptyId/attach`, { ...scopedPty, schema: ptySchemas.detach }, async (request, reply) => {
    const { sandboxId, ptyId } = ids(request);
    const query = parseOrThrow(PtyDetachQuerySchema, request.query, 'query');
    ptys.detach(sandboxId, ptyId, query.attachment);
    reply.status(204);
  });
  app.get(`${base}/:ptyId/output`, { ...scopedPty, schema: ptySchemas.read }, async (request) => {
    const { sandboxId, ptyId } = ids(request);
    return ptys.read(sandboxId, ptyId, request.query);
  });
  app.post(`${base}/:ptyId/input`, { ...scopedPty, schema: ptySchemas.write }, async (request, reply) => {
    const { sandboxId, ptyId } = ids(request);
    ptys.write(sandboxId, ptyId, request.body);
    reply.status(204);
  });
  app.post(`${base}/:ptyId/resize`, { ...scopedPty, schema: ptySchemas.resize }, async (request) => {
    const { sandboxId, ptyId } = ids(request);
    return ptys.resize(sandboxId, ptyId, request.body);
  });
  app.post(`${base}/:ptyId/signal`, { ...scopedPty, schema: ptySchemas.signal }, async (request) => {
    const { sandboxId, ptyId } = ids(request);
    return ptys.signal(sandboxId, ptyId, request.body);
  });
}
