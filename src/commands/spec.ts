// One definition per command, read by both front ends: the command line (src/cli/from-spec.ts builds
// its commander command, flags and help from it, and validates with its schema) and the MCP server
// (src/mcp/, which offers it as a tool with the same schema as zod, the same argument names and the
// same result as --json). A command's file in this folder exports its definitions; registry.ts
// lists them all. Schemas are written with ./schema's builder, not zod: loading zod is most of a
// start-up, and only the MCP server needs it (toZod).

import { s, type Field, type InferShape, type Shape } from './schema';
import type { GitConfig } from '../git/config';
import type { Repo } from '../git/repo';

/** What a command does to the world, as MCP's tool annotations say it. */
export interface Annotations {
  /** Changes nothing anywhere (it may still recover a crashed run's leftovers, as every command does). */
  readOnly: boolean;
  /** May remove or overwrite what it did not create (discard, drop, gc without --dry-run). */
  destructive: boolean;
  /** Calling it again with the same input has no further effect. */
  idempotent: boolean;
  /** Talks to something outside this machine's repository (a remote, a store). */
  openWorld?: boolean;
}

/** How an input's value is a filesystem path, for the MCP server's confinement (src/mcp/confine.ts).
 * - `existing`: must exist; resolved with symlinks followed.
 * - `target`: may not exist yet (a restore or fork directory); its nearest existing ancestor is
 *   resolved, and the rest must not climb out with `..`.
 * - `source`: a path, file:// or xet:: URL or a remote's name (restore --from, push, fetch): a path
 *   or URL's path is confined as `existing`; a remote's name must be a configured remote. */
export type PathKind = 'existing' | 'target' | 'source';

/** How one input is spelled on the command line, beyond what its schema type says. */
export interface FlagSpec {
  /** A one-letter alias: `-m`. */
  short?: string;
  /** The value's placeholder in help: `<msg>` (default `<kebab-name>`). */
  value?: string;
  /** A boolean that defaults to true, spelled `--no-<name>` (task run --no-capture). */
  negate?: boolean;
  /** The flag's name when it is not the kebab-case of the input's (`--continue` for `continueTask`). */
  flag?: string;
}

/** What a command's code gets besides its input. */
export interface CommandContext {
  /** The directory the command runs in: the CLI's cwd, the MCP server's repository. */
  cwd: string;
  /** Reports the current phase of a long command (a terminal's progress line, an MCP progress
   * notification); undefined when nobody listens. */
  progress?: (phase: string) => void;
  /** Informational notes for a person (stderr on a terminal; nothing under --json, --quiet, MCP). */
  note: (text: string) => void;
  /** A warning for a person: on stderr whenever the output is not --json (whose result carries it),
   * terminal or not, as git's warnings are; absent where nobody reads stderr (MCP). */
  warn?: (text: string) => void;
  /** Set when the caller gave up (MCP cancellation, the client of a line the daemon runs gone);
   * long commands run as child processes for MCP (spec.long), so in-process commands may ignore
   * it, but a push checks it before it publishes anything. */
  signal?: AbortSignal;
  /** Which front end runs the command. */
  via: 'cli' | 'mcp';
}

export interface CommandSpec<S extends Shape = Shape, R = unknown> {
  /** The command's words: ['capture'], ['handoff', 'create']. */
  path: string[];
  /** The MCP tool's name (`handoff_create`); null for commands that are not tools (hooks, init). */
  tool: string | null;
  description: string;
  /** The input, one schema field per argument and flag, each with .describe(): the one schema both
   * front ends validate with. Names are the CLI's own (camelCase of the flag): restore takes
   * `snapshot` and `dir`. */
  input: S;
  /** Positional arguments, in order, as keys of `input`; a required one is a required field; the
   * last may be an array (variadic). */
  args?: (keyof S & string)[];
  flags?: { [K in keyof S]?: FlagSpec };
  /** Inputs that are filesystem paths, and how (for MCP confinement). */
  paths?: { [K in keyof S]?: PathKind };
  /** Inputs passed on to git as names (refs, remotes, ids): MCP refuses one starting with '-'. */
  names?: (keyof S & string)[];
  annotations: Annotations;
  /** Runs long enough to need progress and cancellation: the MCP server runs it as a child
   * `git xet … --json` process (killed on cancellation, with the CLI's crash guarantees) rather than
   * in its own process. A function says it for one input (handoff create is long with --push). */
  long?: boolean | ((input: InferShape<S>) => boolean);
  /** The result's shape (MCP's outputSchema); loose objects: every field --json prints is allowed. */
  output?: Field;
  /** MCP only: values for inputs the client left out, where an agent's safe default differs from
   * the command line's (gc is a dry run unless asked: `{ dryRun: true }`). */
  mcpDefaults?: { [K in keyof S]?: unknown };
  /** Whether the daemon may run this command line for a thin client (src/daemon/relay.ts): in its
   * own process and environment, with none of the client's stdin, terminal or agents. true; or a
   * check of the parsed input that says why not (the client then runs the line itself, nothing
   * done), null when it may. Absent: the daemon declines every line of the command. */
  relayable?: true | ((input: InferShape<S>, ctx: CommandContext) => Promise<string | null>);
  /** Cross-field checks the schema cannot say (fork --remount takes only a directory): throw USAGE. */
  refine?: (input: InferShape<S>) => void;
  /** Does the work and returns what --json prints (and MCP's structuredContent). */
  run: (input: InferShape<S>, ctx: CommandContext) => Promise<R>;
  /** The text a person sees on stdout for the result ('' for none); the input too, for a text that
   * names what was asked (export's "nothing to export: <source>"). */
  human?: (result: R, ctx: CommandContext, input: InferShape<S>) => string;
  /** The exit code for a result (verify's 1 for differences); default 0. The input too, for a code
   * a flag asks for (diff --exit-code). */
  exitCode?: (result: R, input: InferShape<S>) => number;
  /** MCP only: whether a result is an error result (isError) though it is not a thrown error. */
  mcpIsError?: (result: R) => boolean;
  /** CLI only: replaces run+human+exitCode for a command whose command-line form streams (archive
   * to stdout, task run attached, events --follow). Input is already validated. */
  cliAction?: (
    input: InferShape<S>,
    ctx: CommandContext,
    out: { json: boolean; quiet: boolean },
  ) => Promise<number | void>;
}

/** What a relayable check read (the repository and its config), kept for the run of the same
 * input, which comes next in the same process: read once per line, not twice. */
const readByCheck = new WeakMap<object, unknown>();
function keepForRun<T>(input: object, value: T): T {
  readByCheck.set(input, value);
  return value;
}
export function takeFromCheck<T>(input: object): T | undefined {
  const value = readByCheck.get(input) as T | undefined;
  readByCheck.delete(input);
  return value;
}

/** A relayable check's reads: the repository of `cwd` and its config (in the daemon's own worktree
 * its repository and config memo, as its captures use: invocation().warm), kept for the run
 * (keepForRun), and whether a reference-transaction hook of the user's would run there. */
export async function checkedRepo(
  input: object,
  cwd: string,
): Promise<{ repo: Repo; config: GitConfig; userHook: boolean }> {
  const [{ findRepo, repoOpts }, { readConfig }, { runsUserHook }, { invocation }] = await Promise.all([
    import('../git/repo'),
    import('../git/config'),
    import('../hooks/install'),
    import('../cli/invocation'),
  ]);
  const warm = await invocation().warm?.(cwd);
  const repo = warm?.repo ?? (await findRepo(cwd, true));
  const config = await (warm ? warm.readConfig() : readConfig(repoOpts(repo)));
  keepForRun(input, { repo, config });
  return { repo, config, userHook: runsUserHook(repo, config, 'reference-transaction') };
}

/** Identity with inference: `export const capture = defineCommand({...})`. */
export function defineCommand<S extends Shape, R>(spec: CommandSpec<S, R>): CommandSpec<S, R> {
  return spec;
}

/** The erased form the registry holds. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyCommandSpec = CommandSpec<any, any>;

/** Whether a command runs long (spec.long) for this input. */
export function isLong(spec: AnyCommandSpec, input: Record<string, unknown>): boolean {
  return typeof spec.long === 'function' ? spec.long(input) : spec.long === true;
}

/** The tool name a command would get: words joined by '_'. */
export function toolName(path: string[]): string {
  return path.join('_');
}

/** camelCase → kebab-case: `correlationId` → `correlation-id`. */
export function kebab(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

/** Repeatable string flags (`--include a --include b`). */
export const repeatable = (description: string) => s.array(s.string()).default([]).describe(description);
