/**
 * The slice of pino's logger that our code uses. Modules take a `Logger` instead of importing
 * pino, so tests can pass a silent one and the composition root decides where logs go.
 */
export interface LogFn {
  (object: Record<string, unknown>, message?: string): void;
  (message: string): void;
}

export interface Logger {
  trace: LogFn;
  debug: LogFn;
  info: LogFn;
  warn: LogFn;
  error: LogFn;
  child(bindings: Record<string, unknown>): Logger;
}

const noop: LogFn = () => {};

export const silentLogger: Logger = {
  trace: noop,
  debug: noop,
  info: noop,
  warn: noop,
  error: noop,
  child: () => silentLogger,
};
