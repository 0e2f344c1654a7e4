/**
 * A sandbox whose service is busybox httpd on port 8080, healthy once it answers: what the
 * service and port tests of each provider create, and how they check the page it serves.
 */
import { expect } from 'vitest';
import type { GymClient } from '../client/client.ts';
import type { SandboxSpecInput } from '../core/schemas/sandbox.ts';

/** The spec: `page` at `root`/index.html, served on 8080, create gated on a health check. */
export function httpdServiceSpec(image: string, page: string, root = '/www'): SandboxSpecInput {
  return {
    image,
    ports: [8080],
    files: [{ path: `${root}/index.html`, content: page }],
    entrypoint: ['httpd', '-f', '-p', '8080', '-h', root],
    healthcheck: {
      test: ['CMD', 'wget', '-q', '-O', '/dev/null', 'http://127.0.0.1:8080/'],
      intervalMs: 200,
    },
  };
}

/** The daemon at `daemonUrl` serves the sandbox's page on 8080 with the port's headers, and refuses it without them. */
export async function expectServedPage(
  client: GymClient,
  daemonUrl: string,
  sandboxId: string,
  page: string,
) {
  const { path, headers } = await client.portEndpoint(sandboxId, 8080);
  const served = await fetch(`${daemonUrl}${path}index.html`, { headers });
  expect(await served.text()).toBe(page);
  expect((await fetch(`${daemonUrl}${path}index.html`)).status).toBe(401);
}
