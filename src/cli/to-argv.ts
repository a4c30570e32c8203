// The inverse of from-spec.ts: a validated input back to the command line that parses to it. The MCP
// server runs long tools as a child `git xet <words> <argv> --json` (src/mcp/child.ts); building the
// argv from the spec, next to the parser built from the same spec, keeps the two directions one
// definition (test/mcp.test.ts round-trips every spec through both).

import { kebab, type AnyCommandSpec } from '../commands/spec';
import type { Field } from '../commands/schema';
import { typeOf, unwrapField } from './from-spec';

/** The arguments after `git xet` for `input` (already validated by parseInput): the command's words,
 * every option as `--name=value` (a value starting with '-' stays a value), then `--` and the
 * positional arguments (so a positional starting with '-' is never read as an option). A boolean
 * option without `negate` is spelled only when true: false and absent parse alike (commander has no
 * `--x=false`). `extra` (such as `--json`) goes before the `--`. */
export function toArgv(spec: AnyCommandSpec, input: Record<string, unknown>, extra: string[] = []): string[] {
  const shape = spec.input as Record<string, Field>;
  const args = spec.args ?? [];
  const options: string[] = [];
  for (const key of Object.keys(shape)) {
    if (args.includes(key)) continue;
    const value = input[key];
    if (value === undefined || value === null) continue;
    const f = spec.flags?.[key] ?? {};
    const name = `--${f.flag ?? kebab(key)}`;
    const { base, defaultValue } = unwrapField(shape[key]);
    const t = typeOf(base);
    if (t === 'boolean') {
      if (f.negate) {
        if (value === false) options.push(`--no-${f.flag ?? kebab(key)}`);
      } else if (value === true) options.push(name);
      continue;
    }
    if (Array.isArray(value)) {
      // A repeatable flag at its default (`[]`) is the same as absent.
      if (value.length === 0 && Array.isArray(defaultValue)) continue;
      for (const v of value) options.push(`${name}=${String(v)}`);
      continue;
    }
    options.push(`${name}=${String(value)}`);
  }
  const positional: string[] = [];
  for (const key of args) {
    const value = input[key];
    if (value === undefined || value === null) continue;
    if (Array.isArray(value)) positional.push(...value.map(String));
    else positional.push(String(value));
  }
  return [...spec.path, ...options, ...extra, ...(positional.length ? ['--', ...positional] : [])];
}
