// Wrapping command actions: resolve --json, turn results and errors into output and exit codes.
import type { Command } from 'commander';
import { EXIT } from '../errors';
import { emitError, type Out } from './output';

/** Wraps a command action: resolves --json, maps errors to output and exit codes. */
export function run<A extends unknown[]>(fn: (out: Out, ...args: A) => Promise<number | void>) {
  return async (...args: unknown[]): Promise<void> => {
    const cmd = args[args.length - 1] as Command;
    const g = cmd.optsWithGlobals();
    const out: Out = { json: Boolean(g.json), quiet: Boolean(g.quiet) };
    try {
      const code = await fn(out, ...(args.slice(0, -1) as A));
      process.exitCode = code ?? EXIT.OK;
    } catch (e) {
      process.exitCode = emitError(out, e);
    }
  };
}
