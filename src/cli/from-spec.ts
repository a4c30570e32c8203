// The command line's front end over command definitions (src/commands/spec.ts): builds a commander
// command from a spec (arguments, flags, help from the schema's descriptions), then validates what
// commander parsed with the same schema the MCP server uses (as zod there), and prints the result.
// zod is not loaded here: definitions are written with src/commands/schema.ts's builder, whose
// nodes read like zod's (`_zod.def`) and validate like it.

import { Command, Option } from 'commander';
import type * as Zod from 'zod';
import { EXIT, XetError } from '../errors';
import { kebab, type AnyCommandSpec, type CommandContext } from '../commands/spec';
import { isSchema, s, toZod, type Field, type Issue, type Shape } from '../commands/schema';
import { chatty, emit, progressLine, type Out } from './output';
import { invocation } from './invocation';
import { run } from './run';

/** A field's type with optional/default/nullable peeled off, and what was peeled. Reads `_zod.def`,
 * which the builder's nodes present as zod's own schemas have it (a test's definition may be zod). */
export function unwrapField<F extends Field>(schema: F): { base: F; optional: boolean; defaultValue?: unknown } {
  let s: F = schema;
  let optional = false;
  let defaultValue: unknown;
  for (;;) {
    const def = (s as unknown as { _zod: { def: { type: string; innerType?: Field; defaultValue?: unknown } } })._zod
      .def;
    if (def.type === 'optional' || def.type === 'nullable') {
      optional = true;
      s = def.innerType as F;
    } else if (def.type === 'default' || def.type === 'prefault') {
      optional = true;
      defaultValue = typeof def.defaultValue === 'function' ? (def.defaultValue as () => unknown)() : def.defaultValue;
      s = def.innerType as F;
    } else if (def.type === 'pipe' || def.type === 'transform') {
      // A refinement or transform keeps its input's shape for the command line.
      const inner = (def as unknown as { in?: F }).in;
      if (!inner) break;
      s = inner;
    } else break;
  }
  return { base: s, optional, defaultValue };
}

export const typeOf = (s: Field): string => (s as unknown as { _zod: { def: { type: string } } })._zod.def.type;

/** The flag text of an input: `-m, --message <msg>`, `--no-capture`, `--to <value>`. */
function flagText(spec: AnyCommandSpec, key: string, base: Field): string {
  const f = spec.flags?.[key] ?? {};
  const name = f.flag ?? kebab(key);
  const short = f.short ? `-${f.short}, ` : '';
  if (typeOf(base) === 'boolean') return `${short}--${f.negate ? 'no-' : ''}${name}`;
  return `${short}--${name} ${f.value ?? `<${name}>`}`;
}

const collect = (v: string, prev: string[] | undefined): string[] => [...(prev ?? []), v];

/** Adds `spec` under `parent` (the program, or its group command for `handoff create`). */
export function registerSpec(parent: Command, spec: AnyCommandSpec): Command {
  const shape = spec.input as Record<string, Field>;
  const args = spec.args ?? [];
  const cmd = parent.command(spec.path[spec.path.length - 1]).description(spec.description);
  for (const key of args) {
    const { base, optional } = unwrapField(shape[key]);
    const variadic = typeOf(base) === 'array' ? '...' : '';
    const name = spec.flags?.[key]?.flag ?? kebab(key);
    cmd.argument(optional ? `[${name}${variadic}]` : `<${name}${variadic}>`, shape[key].description ?? '');
  }
  const optionKeys = Object.keys(shape).filter((k) => !args.includes(k));
  for (const key of optionKeys) {
    const { base, defaultValue } = unwrapField(shape[key]);
    const opt = new Option(flagText(spec, key, base), shape[key].description ?? '');
    const t = typeOf(base);
    if (t === 'array') opt.argParser(collect);
    else if (t === 'enum') opt.choices((base as unknown as { options: string[] }).options);
    // Defaults are the schema's (one place); commander's `--no-x` would otherwise set x=true itself. A
    // valued flag's default is also given to commander, which shows it in help (`default: "auto"`).
    if (defaultValue !== undefined && t !== 'boolean') opt.default(defaultValue);
    // Commander names the attribute after the flag; map it back to the input's key (before
    // addOption, which reads the name once to store the value under it).
    const f = spec.flags?.[key];
    if (f?.flag) opt.attributeName = () => key;
    cmd.addOption(opt);
  }
  cmd.action(
    run(async (out: Out, ...rest: unknown[]) => {
      const opts = rest[args.length] as Record<string, unknown>;
      const raw: Record<string, unknown> = {};
      args.forEach((k, i) => {
        if (rest[i] !== undefined) raw[k] = rest[i];
      });
      for (const key of optionKeys) if (opts[key] !== undefined) raw[key] = opts[key];
      const input = parseInput(spec, raw);
      const ctx: CommandContext = {
        cwd: invocation().cwd(),
        progress: progressLine(out),
        note: (text) => {
          if (chatty(out)) invocation().stderr(text.endsWith('\n') ? text : `${text}\n`);
        },
        warn: (text) => {
          if (!out.json) invocation().stderr(`warning: ${text}${text.endsWith('\n') ? '' : '\n'}`);
        },
        via: 'cli',
        // A relayed line's client may go away: a command that publishes stops before it does.
        ...(invocation().signal ? { signal: invocation().signal } : {}),
      };
      const io = invocation();
      if (io.relayed) {
        const why = await relayRefusal(spec, input, ctx);
        if (why !== null) {
          io.decline(why);
          return EXIT.OK;
        }
      }
      if (spec.cliAction) return spec.cliAction(input, ctx, { json: out.json, quiet: Boolean(out.quiet) });
      const result = await spec.run(input, ctx);
      emit(out, result, () => (spec.human ? spec.human(result, ctx, input) : ''));
      return spec.exitCode ? spec.exitCode(result, input) : EXIT.OK;
    }),
  );
  return cmd;
}

/** Why the daemon must not run this relayed line (spec.relayable), or null. A check that fails
 * declines too: the CLI, run by the client, meets the same failure and reports it as it always does. */
async function relayRefusal(
  spec: AnyCommandSpec,
  input: Record<string, unknown>,
  ctx: CommandContext,
): Promise<string | null> {
  if (spec.relayable === true) return null;
  if (!spec.relayable) return `${spec.path.join(' ')} is not run by the daemon`;
  try {
    return await spec.relayable(input, ctx);
  } catch (e) {
    return `checking whether the daemon may run it failed: ${(e as Error).message}`;
  }
}

/** A definition's input as one object schema that refuses unknown keys (`z.object(input).strict()`),
 * made once per definition. */
const inputSchemas = new WeakMap<object, { safeParse(raw: unknown): InputResult }>();
type InputResult = { success: true; data: Record<string, unknown> } | { success: false; error: { issues: Issue[] } };

function inputSchema(input: Record<string, Field>): { safeParse(raw: unknown): InputResult } {
  let made = inputSchemas.get(input);
  if (!made) {
    if (Object.values(input).every(isSchema)) {
      made = s.strictObject(input as Shape) as { safeParse(raw: unknown): InputResult };
    } else {
      // A definition written in zod (a test's own): only then is zod loaded.
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const { z } = require('zod') as typeof Zod;
      const shape = Object.fromEntries(Object.entries(input).map(([k, v]) => [k, toZod(v)]));
      made = z.object(shape).strict() as unknown as { safeParse(raw: unknown): InputResult };
    }
    inputSchemas.set(input, made);
  }
  return made;
}

/** Validates raw input (from commander or an MCP client) with the spec's schema: USAGE naming the
 * argument on failure, before any effect. */
export function parseInput(spec: AnyCommandSpec, raw: unknown): Record<string, unknown> {
  const r = inputSchema(spec.input as Record<string, Field>).safeParse(raw);
  if (!r.success) {
    const issue = r.error.issues[0];
    const where = issue.path.length ? `${issue.path.map(String).join('.')}: ` : '';
    throw new XetError('USAGE', `${spec.path.join(' ')}: ${where}${issue.message}`, {
      command: spec.path.join(' '),
      argument: issue.path.map(String).join('.') || null,
      issues: r.error.issues.map((i) => ({ path: i.path.map(String), message: i.message })),
    });
  }
  spec.refine?.(r.data);
  return r.data;
}

/** Registers every spec, making group commands (`handoff`, `task`) as their first word needs. */
export function registerSpecs(program: Command, specs: AnyCommandSpec[], groups: Record<string, string>): void {
  const made = new Map<string, Command>();
  for (const spec of specs) {
    let parent = program;
    for (const word of spec.path.slice(0, -1)) {
      let g = made.get(word) ?? program.commands.find((c) => c.name() === word);
      if (!g) {
        g = program.command(word).description(groups[word] ?? '');
        made.set(word, g);
      }
      parent = g;
    }
    registerSpec(parent, spec);
  }
}
