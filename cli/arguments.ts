/**
 * Parsers for option values, as commander calls them: each turns one command-line string into
 * the value the command body gets, or throws commander's InvalidArgumentError, which the CLI
 * reports as a usage error (exit 2) naming the option. A number that is not a number, a count
 * below its minimum (`--limit=-1`, `--concurrency 0`) or a malformed KEY=VALUE never reaches a
 * command.
 */
import { InvalidArgumentError } from '@commander-js/extra-typings';

const INTEGER = /^[+-]?\d+$/;
const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)$/;

/** An integer within [min, max]; `--limit 2.5`, `--limit 1e3` and `--limit ''` are refused. */
export function integer(min: number, max = Number.MAX_SAFE_INTEGER): (value: string) => number {
  return (value) => {
    const trimmed = value.trim();
    if (!INTEGER.test(trimmed)) throw new InvalidArgumentError('It must be an integer.');
    const parsed = Number(trimmed);
    if (parsed < min || parsed > max) throw new InvalidArgumentError(`It must be ${range(min, max)}.`);
    return parsed;
  };
}

/** A decimal number greater than zero (`--cpus 0.5`); no exponents, no infinities. */
export function positiveNumber(value: string): number {
  const trimmed = value.trim();
  if (!DECIMAL.test(trimmed)) throw new InvalidArgumentError('It must be a number.');
  const parsed = Number(trimmed);
  if (!(parsed > 0)) throw new InvalidArgumentError('It must be greater than 0.');
  return parsed;
}

function range(min: number, max: number): string {
  if (max === Number.MAX_SAFE_INTEGER) return min === 0 ? 'zero or more' : `at least ${min}`;
  return `between ${min} and ${max}`;
}

/**
 * A repeatable KEY=VALUE option collected into a record; commander passes the record so far as
 * `previous`. The value may hold `=`; the key may not be empty.
 */
export function keyValue(item: string, previous: Record<string, string>): Record<string, string> {
  const separator = item.indexOf('=');
  if (separator <= 0) throw new InvalidArgumentError('It must be KEY=VALUE, with a non-empty KEY.');
  return { ...previous, [item.slice(0, separator)]: item.slice(separator + 1) };
}
