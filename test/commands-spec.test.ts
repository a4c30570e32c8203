// The definition layer itself: every command is one definition (src/commands/registry.ts) that the
// command line is built from, with a schema both front ends validate with. These check the
// definitions' own consistency and that the CLI really is built from them.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Command } from 'commander';
import { z } from 'zod';
import { buildProgram } from '../src/cli/main';
import { parseInput, unwrapField } from '../src/cli/from-spec';
import { COMMANDS } from '../src/commands/registry';
import { kebab } from '../src/commands/spec';
import { codeOf } from './support/errors';

/** Every leaf command of the program, by its words. */
function leaves(cmd: Command, words: string[] = []): string[][] {
  if (!cmd.commands.length) return [words];
  return cmd.commands.flatMap((c) => leaves(c, [...words, c.name()]));
}

test('every command of the CLI is a definition in the registry, and every definition is a command', () => {
  const program = buildProgram();
  const cli = leaves(program)
    .map((w) => w.join(' '))
    .filter((w) => w !== 'help')
    .sort();
  const defined = COMMANDS.map((c) => c.path.join(' ')).sort();
  assert.deepEqual(cli, defined);
});

test('definitions are consistent: described inputs, known args/paths/names, unique snake_case tools', () => {
  const tools = new Set<string>();
  for (const spec of COMMANDS) {
    const name = spec.path.join(' ');
    const shape = spec.input as Record<string, z.ZodType>;
    for (const [key, field] of Object.entries(shape)) {
      assert.ok(field.description, `${name}: input ${key} has no description (help and the MCP schema need one)`);
    }
    for (const key of [...(spec.args ?? []), ...Object.keys(spec.paths ?? {}), ...(spec.names ?? [])]) {
      assert.ok(key in shape, `${name}: ${key} is not an input`);
    }
    // Only the last positional may be variadic or optional-followed-by-nothing.
    (spec.args ?? []).forEach((key, i, all) => {
      const { base } = unwrapField(shape[key]);
      const isArray = (base as unknown as { _zod: { def: { type: string } } })._zod.def.type === 'array';
      if (isArray) assert.equal(i, all.length - 1, `${name}: variadic ${key} must be the last argument`);
    });
    if (spec.tool !== null) {
      assert.match(spec.tool, /^[a-z][a-z_]*$/, `${name}: tool name`);
      assert.ok(!tools.has(spec.tool), `${name}: tool ${spec.tool} defined twice`);
      tools.add(spec.tool);
      assert.ok(spec.output, `${name}: a tool needs an output schema (MCP outputSchema)`);
    }
    if (spec.annotations.readOnly)
      assert.equal(spec.annotations.destructive, false, `${name}: read-only yet destructive`);
  }
});

test("the CLI's help lists every flag and argument of each definition", () => {
  const program = buildProgram();
  for (const spec of COMMANDS) {
    let cmd: Command = program;
    for (const w of spec.path) cmd = cmd.commands.find((c) => c.name() === w) as Command;
    assert.ok(cmd, spec.path.join(' '));
    const help = cmd.helpInformation();
    for (const key of Object.keys(spec.input)) {
      const flag = spec.flags?.[key]?.flag ?? kebab(key);
      if ((spec.args ?? []).includes(key))
        assert.match(help, new RegExp(`[<\\[]${flag}(\\.\\.\\.)?[>\\]]`), `${spec.path.join(' ')} ${key}`);
      else
        assert.ok(
          help.includes(`--${spec.flags?.[key]?.negate ? 'no-' : ''}${flag}`),
          `${spec.path.join(' ')}: --${flag}`,
        );
    }
  }
});

test('parseInput: unknown keys, wrong types and bad choices are USAGE naming the argument; defaults fill in', () => {
  const capture = COMMANDS.find((c) => c.path.join(' ') === 'capture');
  assert.ok(capture);
  assert.equal(
    codeOf(() => parseInput(capture, { bogus: 1 })),
    'USAGE',
  );
  assert.equal(
    codeOf(() => parseInput(capture, { message: 5 })),
    'USAGE',
  );
  assert.equal(
    codeOf(() => parseInput(capture, { ignored: 'some' })),
    'USAGE',
  );
  try {
    parseInput(capture, { ignored: 'some' });
  } catch (e) {
    assert.equal((e as { details: { argument: string } }).details.argument, 'ignored');
  }
  assert.deepEqual(parseInput(capture, {}), { include: [], exclude: [] });
  const restore = COMMANDS.find((c) => c.path.join(' ') === 'restore');
  assert.ok(restore);
  assert.equal(
    codeOf(() => parseInput(restore, { snapshot: 'abcd' })),
    'USAGE',
  );
});
