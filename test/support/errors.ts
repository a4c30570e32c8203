// The error code a synchronous call throws: a XetError's code, or a marker for anything untyped.
import { isXetError } from '../../src/errors';

export function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (e) {
    return isXetError(e) ? e.code : `untyped: ${(e as Error).message}`;
  }
  return undefined;
}
