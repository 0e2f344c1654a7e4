import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../../core/logger.ts';
import { UsageError } from '../../command.ts';
import { evalServeCommand, isLoopbackHost } from './serve.ts';

describe('gym eval serve --no-token', () => {
  it('knows a loopback address from one other machines reach', () => {
    for (const host of ['127.0.0.1', '127.5.0.1', '::1', 'localhost'])
      expect(isLoopbackHost(host), host).toBe(true);
    for (const host of ['0.0.0.0', '::', '10.0.0.5', '192.168.1.2', 'example.test', '127.0.0.1.example.test'])
      expect(isLoopbackHost(host), host).toBe(false);
  });

  it('is refused on any other address before anything starts', async () => {
    const options = { host: '0.0.0.0', token: false } as unknown as Parameters<
      typeof evalServeCommand.run
    >[0]['options'];
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    await expect(
      evalServeCommand.run({ options, args: [], env: {}, stdout, stderr, logger: silentLogger }),
    ).rejects.toThrow(UsageError);
  });
});
