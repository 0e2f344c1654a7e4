import { describe, expect, it } from 'vitest';
import { ReadyToken } from './one-shot-exec.ts';

function collect(token: string | null) {
  const out: string[] = [];
  const ready = new ReadyToken(token, (name, payload) => out.push(`${name}:${payload.toString()}`));
  return { ready, out };
}

describe('the exec helper ready token', () => {
  it('takes the token and the pid after it off the front of stdout, split across chunks, and passes the rest', async () => {
    const { ready, out } = collect('gym-ready-abc');
    ready.push('stdout', Buffer.from('gym-re'));
    ready.push('stderr', Buffer.from('warn'));
    ready.push('stdout', Buffer.from('ady-abc00000'));
    ready.push('stdout', Buffer.from('00042hello'));
    ready.push('stdout', Buffer.from(' world'));
    ready.flush();
    await ready.seen;
    expect(out).toEqual(['stderr:warn', 'stdout:hello', 'stdout: world']);
    // The helper's pid in the sandbox follows the token, as ten digits.
    expect(ready.nsPid).toBe(42);
  });

  it('passes output unchanged when an older helper sends no token', () => {
    const { ready, out } = collect('gym-ready-abc');
    ready.push('stdout', Buffer.from('gym-'));
    ready.push('stdout', Buffer.from('x'));
    ready.flush();
    expect(out).toEqual(['stdout:gym-x']);
  });

  it('gives back a held prefix when the stream ends', () => {
    const { ready, out } = collect('gym-ready-abc');
    ready.push('stdout', Buffer.from('gym'));
    ready.flush();
    expect(out).toEqual(['stdout:gym']);
  });

  it('does nothing without a token', () => {
    const { ready, out } = collect(null);
    ready.push('stdout', Buffer.from('gym-ready-abc'));
    expect(out).toEqual(['stdout:gym-ready-abc']);
  });
});
