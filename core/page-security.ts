/**
 * What every page we serve to a browser sends and checks (the results viewer, the daemon's /ui):
 * their content is agents' and models' text, so the page runs only its own script, loads nothing
 * from elsewhere, cannot be framed, and is reached with a session cookie, never a token in a URL.
 */
import { timingSafeEqual } from 'node:crypto';

/** No inline script or style, nothing from another origin, no forms, no framing, no plugins. */
export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** The headers of every response of such a page, refusals included. */
export const PAGE_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy': CONTENT_SECURITY_POLICY,
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cross-origin-resource-policy': 'same-origin',
  'cache-control': 'no-store',
};

/** Compares secrets in constant time. */
export function sameSecret(left: string, right: string): boolean {
  const a = Buffer.from(left);
  const b = Buffer.from(right);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** One cookie's value from a Cookie header. */
export function cookieValue(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const [key, ...rest] = part.trim().split('=');
    if (key === name) return rest.join('=');
  }
  return undefined;
}

/** A session cookie script cannot read and no other site's request carries. */
export function sessionCookie(name: string, value: string, path: string): string {
  return `${name}=${value}; HttpOnly; SameSite=Strict; Path=${path}`;
}
