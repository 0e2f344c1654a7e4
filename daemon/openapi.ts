/**
 * The OpenAPI document, derived from the routes themselves: every route declares its zod schemas
 * (`schema: { body, querystring, headers, response }`) where it is registered, fastify's swagger
 * plug-in lists every route the router holds, and the zod type provider's transform turns the
 * schemas into JSON Schema. A route cannot be missing from the document, and a schema a route
 * names is the one the document shows.
 *
 * The schemas document; they do not validate here. Each route still parses its input with
 * `parseOrThrow` (or the service it calls does), so its errors keep their codes and messages and
 * its checks their order (an unknown sandbox before a bad body). `useRouteSchemas` installs
 * compilers that leave requests and answers as they are.
 */
import swagger from '@fastify/swagger';
import type { FastifyInstance } from 'fastify';
import { jsonSchemaTransform } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { ErrorBodySchema } from '../core/schemas/api.ts';

/** An answer with a JSON body. */
export function jsonAnswer(description: string, schema: z.ZodType) {
  return { description, content: { 'application/json': { schema } } };
}

/** An answer of another media type (`schema` absent: any bytes). */
export function contentAnswer(description: string, content: Record<string, z.ZodType | undefined>) {
  return {
    description,
    content: Object.fromEntries(
      Object.entries(content).map(([type, schema]) => [type, { schema: schema ?? BYTES }]),
    ),
  };
}

/** An answer without a body (204, or a redirect). */
export function emptyAnswer(description: string) {
  return z.null().meta({ description });
}

/** Raw bytes, in a request or an answer. */
export const BYTES = z.string().meta({ format: 'binary' });

const ERROR_ANSWER = jsonAnswer(
  'an error: `{"error": {"code", "message", "details"}}`, its HTTP status the code\'s own',
  ErrorBodySchema,
);

/** The error answers a route documents, by status. */
export function errorAnswers(...statuses: number[]): Record<number, typeof ERROR_ANSWER> {
  return Object.fromEntries(statuses.map((status) => [status, ERROR_ANSWER]));
}

/** A request body of other media types than JSON: `{content: {type: zod schema}}`. */
export function contentBody(content: Record<string, z.ZodType>) {
  return { content: Object.fromEntries(Object.entries(content).map(([type, schema]) => [type, { schema }])) };
}

/**
 * Marks a route's body as optional in the document (swagger marks every declared body
 * required): `{ ...optionalBody, body: Schema }`.
 */
export const optionalBody = { 'x-gym-optional-body': true } as const;

declare module 'fastify' {
  interface FastifySchema {
    'x-gym-optional-body'?: boolean;
  }
}

/** Requests and answers pass as they are: the routes parse (see the module's comment). */
export function useRouteSchemas(app: FastifyInstance): void {
  app.setValidatorCompiler(() => () => true);
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));
}

function isZod(value: unknown): value is z.ZodType {
  return value instanceof z.ZodType;
}

function toJson(schema: z.ZodType, io: 'input' | 'output'): Record<string, unknown> {
  const { $schema: _ignored, ...rest } = z.toJSONSchema(schema, { io, unrepresentable: 'any' }) as Record<
    string,
    unknown
  >;
  return rest;
}

type TransformInput = Parameters<typeof jsonSchemaTransform>[0];

/**
 * The zod type provider's transform, plus what it leaves to plain JSON: a body given per media
 * type (files, tars, a build plan) is converted here.
 */
function transform(input: TransformInput): ReturnType<typeof jsonSchemaTransform> {
  const schema = input.schema as Record<string, unknown> | undefined;
  const body = schema?.body as { content?: Record<string, { schema: unknown }> } | undefined;
  if (schema === undefined || body === undefined || isZod(body) || body.content === undefined)
    return jsonSchemaTransform(input);
  const { body: _body, ...rest } = schema;
  const transformed = jsonSchemaTransform({ ...input, schema: rest } as TransformInput);
  const content = Object.fromEntries(
    Object.entries(body.content).map(([type, media]) => [
      type,
      { schema: isZod(media.schema) ? toJson(media.schema, 'input') : media.schema },
    ]),
  );
  return { ...transformed, schema: { ...transformed.schema, body: { content } } };
}

type Operation = { requestBody?: { required?: boolean }; 'x-gym-optional-body'?: boolean };

/** Bodies a route marked optional are documented so (`optionalBody`). */
function markOptionalBodies(document: Record<string, unknown>): Record<string, unknown> {
  const paths = document.paths as Record<string, Record<string, Operation>>;
  for (const item of Object.values(paths))
    for (const operation of Object.values(item)) {
      if (operation['x-gym-optional-body'] !== true) continue;
      delete operation['x-gym-optional-body'];
      if (operation.requestBody !== undefined) operation.requestBody.required = false;
    }
  return document;
}

/** Registers the plug-in that collects the routes; call before registering any route. */
export async function registerOpenApi(app: FastifyInstance, version: string): Promise<void> {
  useRouteSchemas(app);
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'gym sandbox daemon',
        version,
        description:
          'Sandboxes for agent environments. Every route but /healthz needs `Authorization: Bearer <token>` (the token is in the state directory). Errors carry a stable `code`.',
      },
      components: {
        securitySchemes: {
          bearer: {
            type: 'http',
            scheme: 'bearer',
            description:
              'the daemon token; or a scoped credential (`gym-access.…`) on the routes and sandboxes it grants (docs/api.md, "Scoped access")',
          },
          rolloutKey: { type: 'http', scheme: 'bearer', description: "a gateway rollout's key" },
          portKey: {
            type: 'apiKey',
            in: 'header',
            name: 'x-gym-port-key',
            description:
              "a sandbox's port key (GET /v1/sandboxes/{id}/ports/{port}), for its declared ports alone",
          },
          uiSession: {
            type: 'apiKey',
            in: 'cookie',
            name: 'gym_ui_session',
            description: 'the /ui session a login link sets (docs/api.md)',
          },
        },
      },
      security: [{ bearer: [] }],
    },
    // A discriminator's `const` stays a const (the Python generator names union members by it).
    convertConstToEnum: false,
    transform,
    transformObject: (document) =>
      markOptionalBodies((document as { openapiObject: Record<string, unknown> }).openapiObject),
  });
}

/** The document of a built server (its routes all registered). */
export function openApiDocument(app: FastifyInstance): Record<string, unknown> {
  return app.swagger() as unknown as Record<string, unknown>;
}
