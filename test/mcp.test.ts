// git xet mcp through a real client: the SDK's Client with StdioClientTransport spawning bin/git-xet
// mcp in a sandbox repository. The tools and their schemas come from the command definitions; results
// are the CLI's --json; errors carry the stable code; progress arrives for long tools; and every path
// and name is confined, including each hole the official git MCP server shipped
// (modelcontextprotocol/servers #604, #4550, CVE-2025-68145). Also: to-argv (the child CLI's argv)
// round-trips every definition through the CLI's own parse.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import { test } from 'node:test';
import { Command } from 'commander';
import { z } from 'zod';
import { COMMANDS, GROUPS } from '../src/commands/registry';
import type { AnyCommandSpec } from '../src/commands/spec';
import { parseInput, registerSpecs, unwrapField } from '../src/cli/from-spec';
import { toArgv } from '../src/cli/to-argv';
import { createServer } from '../src/mcp/server';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { initRepo, pseudoRandomBytes, type Repo } from './support/git';
import { callError, callOk, waitGone, withMcp, type McpSession } from './support/mcp';
import { withSandbox, type Sandbox } from './support/sandbox';
import { capture, expectError, parseJson, verify, xet } from './support/xet';

const typeOf = (s: z.ZodType): string => (s as unknown as { _zod: { def: { type: string } } })._zod.def.type;

/** What the CLI's parse of `argv` hands to the command: the definition's run, given the input. */
async function cliParse(spec: AnyCommandSpec, argv: string[]): Promise<Record<string, unknown> | undefined> {
  let got: Record<string, unknown> | undefined;
  const probe: AnyCommandSpec = {
    ...spec,
    cliAction: undefined,
    run: (input: Record<string, unknown>) => {
      got = input;
      return Promise.resolve({});
    },
    human: () => '',
    exitCode: () => 0,
  };
  const program = new Command().exitOverride().option('--json').option('-q, --quiet');
  registerSpecs(program, [probe], GROUPS);
  const before = process.exitCode;
  try {
    await program.parseAsync(argv, { from: 'user' });
  } finally {
    process.exitCode = before;
  }
  return got;
}

/** A sample input for a definition: each field a value its own schema accepts, preferring ones a
 * naive argv would get wrong (a leading '-', spaces, '='), and a negated boolean as false; optional
 * fields are dropped when the definition's cross-field checks refuse them. */
function sampleInput(spec: AnyCommandSpec): Record<string, unknown> {
  const shape = spec.input as Record<string, z.ZodType>;
  const raw: Record<string, unknown> = {};
  for (const [key, field] of Object.entries(shape)) {
    const { base } = unwrapField(field);
    const t = typeOf(base);
    const candidates: unknown[] =
      t === 'string'
        ? ['-v a=b c', 'x', '1', '1h', 'a,b']
        : t === 'enum'
          ? [...(base as unknown as { options: string[] }).options].reverse()
          : t === 'boolean'
            ? spec.flags?.[key]?.negate
              ? [false, true]
              : [true, false]
            : t === 'array'
              ? [['-a', 'b c'], ['x'], ['1']]
              : t === 'number'
                ? [7, 1]
                : ['x', 1, true];
    const v = candidates.find((c) => field.safeParse(c).success);
    if (v !== undefined) raw[key] = v;
  }
  const args = spec.args ?? [];
  for (;;) {
    try {
      return parseInput(spec, raw);
    } catch (e) {
      const optional = Object.keys(raw).filter((k) => unwrapField(shape[k]).optional && !args.includes(k));
      assert.ok(optional.length, `${spec.path.join(' ')}: no sample input parses: ${(e as Error).message}`);
      delete raw[optional[optional.length - 1]];
    }
  }
}

test('to-argv round-trips every definition: a sample input -> argv -> the CLI parse gives the same input', async () => {
  for (const spec of COMMANDS) {
    const input = sampleInput(spec);
    const argv = toArgv(spec, input);
    assert.deepEqual(argv.slice(0, spec.path.length), spec.path);
    const back = await cliParse(spec, argv);
    assert.deepEqual(back, input, `${spec.path.join(' ')}: ${JSON.stringify(argv)}`);
    // Only required fields: what an agent that leaves every option out gets (unless the
    // definition's cross-field checks need more: fork needs a dir without --remount).
    let required: Record<string, unknown> | undefined;
    try {
      required = parseInput(
        spec,
        Object.fromEntries(Object.entries(input).filter(([k]) => !unwrapField(spec.input[k]).optional)),
      );
    } catch {
      required = undefined;
    }
    if (required) assert.deepEqual(await cliParse(spec, toArgv(spec, required)), required, spec.path.join(' '));
  }
  // A flag named otherwise than its input (task run's --continue for continueTask), which the CLI
  // once dropped: a definition of its own, so the round trip holds whichever commands exist.
  const renamed: AnyCommandSpec = {
    path: ['probe'],
    tool: 'probe',
    description: 'probe',
    input: { continueTask: z.string().optional().describe('a renamed flag') },
    flags: { continueTask: { flag: 'continue' } },
    annotations: { readOnly: true, destructive: false, idempotent: true },
    run: () => Promise.resolve({}),
  };
  assert.deepEqual(toArgv(renamed, { continueTask: 't1' }), ['probe', '--continue=t1']);
  assert.deepEqual(await cliParse(renamed, ['probe', '--continue=t1']), { continueTask: 't1' });
  // The shapes that need care, on a definition that has them: positionals after `--`.
  const restore = COMMANDS.find((s) => s.tool === 'restore') as AnyCommandSpec;
  assert.deepEqual(toArgv(restore, { snapshot: '-x', dir: 'd', allowExec: true }, ['--json']), [
    'restore',
    '--allow-exec',
    '--json',
    '--',
    '-x',
    'd',
  ]);
});

test('the server applies mcpDefaults under the client input and reports a result off its output schema as INTERNAL', async () => {
  // Definitions of the test's own, served in-process (no repository: neither has a path argument).
  const echo: AnyCommandSpec = {
    path: ['echo'],
    tool: 'echo',
    description: 'echo',
    input: { dryRun: z.boolean().optional().describe('d'), n: z.string().optional().describe('n') },
    mcpDefaults: { dryRun: true },
    annotations: { readOnly: true, destructive: false, idempotent: true },
    output: z.looseObject({ dryRun: z.boolean().optional() }),
    run: (input: Record<string, unknown>) => Promise.resolve({ ...input }),
  };
  const liar: AnyCommandSpec = {
    ...echo,
    path: ['liar'],
    tool: 'liar',
    output: z.looseObject({ count: z.number() }),
    run: () => Promise.resolve({ count: 'three' }),
  };
  const { server } = createServer({ repo: '/nonexistent', roots: [], specs: [echo, liar] });
  const [a, b] = InMemoryTransport.createLinkedPair();
  await server.connect(a);
  const client = new Client({ name: 'in-process', version: '1' });
  await client.connect(b);
  try {
    const { tools } = await client.listTools();
    const props = (tools.find((t) => t.name === 'echo')?.inputSchema as JsonSchema).properties;
    assert.equal(props?.dryRun?.default, true, 'the schema says what an agent gets');
    type Result = { isError?: boolean; structuredContent?: { error?: { code: string; message: string } } };
    const call = async (name: string, args: Record<string, unknown>) =>
      (await client.callTool({ name, arguments: args })) as Result;
    assert.deepEqual((await call('echo', {})).structuredContent, { dryRun: true });
    assert.deepEqual((await call('echo', { dryRun: false, n: 'x' })).structuredContent, { dryRun: false, n: 'x' });
    const lie = await call('liar', {});
    assert.equal(lie.isError, true);
    assert.equal(lie.structuredContent?.error?.code, 'INTERNAL');
    assert.match(lie.structuredContent?.error?.message ?? '', /output schema/);
  } finally {
    await client.close();
    await server.close();
  }
});

function repoWithFiles(sb: Sandbox): Repo {
  const r = initRepo(sb, 'repo');
  r.write('.gitignore', 'build/\n');
  r.commit('c1', { 'a.txt': 'a\n', 'src/b.js': 'b\n' });
  r.write('a.txt', 'edited\n');
  r.write('notes/u.txt', 'untracked\n');
  r.write('build/out.bin', Buffer.from([0, 1, 2]));
  return r;
}

type JsonSchema = { properties?: Record<string, { default?: unknown }>; required?: string[] };

test('mcp --daemon keeps the worktree daemon for the session: captures go to it, and it stops with the server', async (t) => {
  await withSandbox(async (sb) => {
    const r = repoWithFiles(sb);
    let pid = 0;
    await withMcp(sb, ['--repo', r.dir, '--daemon'], async (s) => {
      const status = parseJson(xet(sb, r.dir, ['daemon', 'status', '--json']));
      assert.equal(status.running, true, s.stderr());
      pid = status.pid;
      const before = status.watch as { dirs: number; reason: string | null };
      assert.equal(before.dirs, 0, 'no capture yet');
      const cap = await callOk(s, 'capture', { message: 'through the daemon' });
      assert.equal(cap.unchanged, false);
      // The daemon made it: its watch now follows the worktree's directories.
      const after = parseJson(xet(sb, r.dir, ['daemon', 'status', '--json'])).watch as {
        watching: boolean;
        dirs: number;
        reason: string | null;
      };
      if (after.reason?.startsWith('the native module')) t.diagnostic(`watch not checked: ${after.reason}`);
      else {
        assert.equal(after.watching, true, String(after.reason));
        assert.ok(after.dirs >= 3, `${after.dirs} directories watched`);
      }
      // The same snapshot the CLI makes of the same tree.
      const cli = parseJson(xet(sb, r.dir, ['capture', '--json'], { env: { GIT_XET_NO_DAEMON: '1' } }));
      assert.equal(cli.snapshot, cap.snapshot);
    });
    assert.ok(pid > 0);
    await waitGone(pid, 15_000, 'the daemon this server started');
  });
});

test('tools/list: one tool per definition with a tool name, its annotations, the CLI argument names, output schemas', async () => {
  await withSandbox(async (sb) => {
    const r = repoWithFiles(sb);
    await withMcp(sb, ['--repo', r.dir], async (s) => {
      const { tools } = await s.client.listTools();
      const expected = COMMANDS.filter((c) => c.tool !== null);
      assert.deepEqual(tools.map((t) => t.name).sort(), expected.map((c) => c.tool as string).sort());
      assert.ok(!tools.some((t) => t.name === 'mcp'), 'mcp itself is not a tool');
      for (const spec of expected) {
        const t = tools.find((x) => x.name === spec.tool);
        assert.ok(t, `${spec.tool} listed`);
        assert.equal(t.description, spec.description);
        assert.deepEqual(t.annotations, {
          readOnlyHint: spec.annotations.readOnly,
          destructiveHint: spec.annotations.destructive,
          idempotentHint: spec.annotations.idempotent,
          openWorldHint: spec.annotations.openWorld ?? false,
        });
        const schema = t.inputSchema as JsonSchema;
        assert.deepEqual(Object.keys(schema.properties ?? {}).sort(), Object.keys(spec.input).sort(), spec.tool ?? '');
        assert.equal((t.inputSchema as { additionalProperties?: unknown }).additionalProperties, false);
        for (const [k, v] of Object.entries(spec.mcpDefaults ?? {}))
          assert.deepEqual(schema.properties?.[k]?.default, v);
        if (spec.output) assert.equal(t.outputSchema?.type, 'object', `${spec.tool} has an output schema`);
      }
      const restore = tools.find((t) => t.name === 'restore');
      assert.deepEqual(Object.keys((restore?.inputSchema as JsonSchema).properties ?? {}).slice(0, 2), [
        'snapshot',
        'dir',
      ]);
      assert.deepEqual((restore?.inputSchema as JsonSchema).required, ['snapshot', 'dir']);
      assert.equal(tools.find((t) => t.name === 'verify')?.annotations?.readOnlyHint, true);
      assert.equal(tools.find((t) => t.name === 'capture')?.annotations?.readOnlyHint, false);
    });
  });
});

test('--read-only offers only the read-only tools; --tools picks some; an unknown or a writing one is USAGE', async () => {
  await withSandbox(async (sb) => {
    const r = repoWithFiles(sb);
    await withMcp(sb, ['--repo', r.dir, '--read-only'], async (s) => {
      const { tools } = await s.client.listTools();
      const readOnly = COMMANDS.filter((c) => c.tool !== null && c.annotations.readOnly).map((c) => c.tool as string);
      assert.deepEqual(tools.map((t) => t.name).sort(), readOnly.sort());
      assert.ok(tools.every((t) => t.annotations?.readOnlyHint === true));
      assert.ok(tools.some((t) => t.name === 'verify') && !tools.some((t) => t.name === 'capture'));
      // A tool not offered is not callable either.
      await assert.rejects(s.client.callTool({ name: 'capture', arguments: {} }), /no tool capture/);
    });
    await withMcp(sb, ['--repo', r.dir, '--tools', 'capture,verify'], async (s) => {
      const { tools } = await s.client.listTools();
      assert.deepEqual(tools.map((t) => t.name).sort(), ['capture', 'verify']);
    });
    expectError(xet(sb, r.dir, ['mcp', '--tools', 'capture,nosuch', '--json']), 'USAGE', 2);
    expectError(xet(sb, r.dir, ['mcp', '--read-only', '--tools', 'capture', '--json']), 'USAGE', 2);
    expectError(xet(sb, sb.root, ['mcp', '--json']), 'NOT_A_REPOSITORY', 3);
    expectError(xet(sb, r.dir, ['mcp', '--root', sb.path('nowhere'), '--json']), 'USAGE', 2);
  });
});

test('capture, restore and verify through MCP: structuredContent is the CLI --json, the copy verifies', async () => {
  await withSandbox(async (sb) => {
    const r = repoWithFiles(sb);
    fs.mkdirSync(sb.path('copies'));
    await withMcp(sb, ['--repo', r.dir, '--root', sb.path('copies')], async (s) => {
      const cap = await callOk(s, 'capture', { message: 'through mcp' });
      assert.match(cap.snapshot, /^[0-9a-f]{40}$/);
      assert.equal(cap.unchanged, false);
      // The same fields as the CLI's --json (a second capture is unchanged: same snapshot, same counts).
      const cli = parseJson(xet(sb, r.dir, ['capture', '--json']));
      assert.deepEqual(Object.keys(cap).sort(), Object.keys(cli).sort());
      assert.equal(cli.snapshot, cap.snapshot);
      assert.equal(cli.files, cap.files);

      const res = await callOk(s, 'restore', { snapshot: cap.snapshot, dir: sb.path('copies', 'one') });
      assert.equal(res.snapshot, cap.snapshot);
      assert.equal(res.dir, sb.path('copies', 'one'));
      assert.equal(fs.readFileSync(sb.path('copies', 'one', 'a.txt'), 'utf8'), 'edited\n');
      assert.equal(fs.readFileSync(sb.path('copies', 'one', 'build', 'out.bin')).length, 3);

      const ver = await callOk(s, 'verify', { snapshot: cap.snapshot, dir: sb.path('copies', 'one') });
      assert.equal(ver.ok, true, JSON.stringify(ver));
      assert.deepEqual(ver, parseJson(verify(sb, r.dir, cap.snapshot, sb.path('copies', 'one'))));
      // A relative path is relative to the repository, not to where the server was started.
      const here = await callOk(s, 'verify', { snapshot: cap.snapshot, dir: '.' });
      assert.equal(here.dir, r.dir);
      assert.equal(here.ok, true);
      // Differences are a result (the CLI's exit 1), not an error.
      fs.writeFileSync(sb.path('copies', 'one', 'a.txt'), 'changed\n');
      const diff = await callOk(s, 'verify', { snapshot: cap.snapshot, dir: sb.path('copies', 'one') });
      assert.equal(diff.ok, false);
      assert.ok(diff.differences.length > 0);
    });
  });
});

test('errors are tool errors with the stable code: SNAPSHOT_NOT_FOUND, USAGE for a bad input', async () => {
  await withSandbox(async (sb) => {
    const r = repoWithFiles(sb);
    fs.mkdirSync(sb.path('copies'));
    await withMcp(sb, ['--repo', r.dir, '--root', sb.path('copies')], async (s) => {
      const missing = '0123456789abcdef0123456789abcdef01234567';
      // In-process (verify) and through a child CLI (restore, a long tool): the same code.
      await callError(s, 'verify', { snapshot: missing, dir: '.' }, 'SNAPSHOT_NOT_FOUND');
      await callError(s, 'restore', { snapshot: missing, dir: sb.path('copies', 'x') }, 'SNAPSHOT_NOT_FOUND');
      assert.ok(!fs.existsSync(sb.path('copies', 'x')));
      const usage = await callError(s, 'verify', { snapshot: missing }, 'USAGE');
      assert.equal(usage.details.argument, 'dir');
      await callError(s, 'verify', { snapshot: 42, dir: '.' }, 'USAGE');
      await callError(s, 'capture', { ignored: 'some' }, 'USAGE');
      await callError(s, 'capture', { always: 'yes' }, 'USAGE');
    });
  });
});

test('long tools send progress notifications when the call has a progressToken', async () => {
  await withSandbox(async (sb) => {
    const r = repoWithFiles(sb);
    await withMcp(sb, ['--repo', r.dir], async (s) => {
      const seen: { progress: number; message?: string }[] = [];
      const res = await s.client.callTool({ name: 'capture', arguments: { always: true } }, undefined, {
        onprogress: (p) => seen.push(p),
        timeout: 120_000,
      });
      assert.ok(!res.isError, JSON.stringify(res));
      assert.ok(seen.length >= 2, `progress notifications: ${JSON.stringify(seen)}`);
      assert.ok(
        seen.some((p) => p.message === 'scanning the working tree'),
        JSON.stringify(seen),
      );
      for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress, 'progress increases');
    });
  });
});

test('a capture through MCP that compresses in worker threads completes (the orphan guard acts only in the main thread)', async () => {
  await withSandbox(async (sb) => {
    const r = initRepo(sb, 'repo');
    r.commit('c1', { 'a.txt': 'a\n' });
    // Over the pack writer's 8 MiB threshold for its compression workers, in small files.
    for (let i = 0; i < 48; i++) r.write(`data/${i}.bin`, pseudoRandomBytes(256 * 1024, i + 1));
    await withMcp(
      sb,
      ['--repo', r.dir],
      async (s) => {
        const cap = await callOk(s, 'capture', {});
        assert.ok(cap.files >= 49, JSON.stringify(cap));
        assert.equal(parseJson(xet(sb, r.dir, ['verify', cap.snapshot, '.', '--json'])).ok, true);
      },
      { XET_PACK_WORKERS: '2' },
    );
  });
});

test('GIT_XET_PROGRESS=json: the CLI prints each phase as a JSON line on stderr, not a terminal, --json or not', async () => {
  await withSandbox((sb) => {
    const r = repoWithFiles(sb);
    for (const args of [
      ['capture', '--json'],
      ['capture', '--always', '-q'],
    ]) {
      const res = xet(sb, r.dir, args, { env: { GIT_XET_PROGRESS: 'json' } });
      assert.equal(res.status, 0, res.stderr);
      const lines = res.stderr.split('\n').filter(Boolean);
      assert.ok(lines.length >= 3, res.stderr);
      for (const line of lines) assert.equal(typeof JSON.parse(line).progress, 'string', line);
      assert.ok(lines.includes('{"progress":"scanning the working tree"}'), res.stderr);
    }
    // Without it (and not on a terminal): no progress at all.
    assert.equal(xet(sb, r.dir, ['capture', '--always', '--json']).stderr, '');
  });
});

/** Each hole of the official git MCP server, and ours: refused with ARGUMENT_NOT_ALLOWED, nothing made. */
test('confinement: traversal, symlinks out, prefix roots, option-like names, other repositories, git dirs', async () => {
  await withSandbox(async (sb) => {
    const r = repoWithFiles(sb);
    const snap = capture(sb, r.dir);
    fs.mkdirSync(sb.path('a'));
    fs.mkdirSync(sb.path('ab'));
    fs.mkdirSync(sb.path('outside'));
    const other = initRepo(sb, 'other');
    other.commit('o', { 'secret.txt': 'x\n' });
    r.symlink(sb.path('outside'), 'out-link');
    r.symlink(sb.path('nowhere'), 'dangling');
    r.git('worktree', 'add', '-q', '--detach', sb.path('wt'));
    r.git('remote', 'add', 'origin', other.dir);
    await withMcp(sb, ['--repo', r.dir, '--root', sb.path('a')], async (s) => {
      const refused = async (tool: string, args: Record<string, unknown>, made?: string) => {
        const e = await callError(s, tool, args, 'ARGUMENT_NOT_ALLOWED');
        if (made) assert.ok(!fs.existsSync(made), `${made} was not created`);
        return e;
      };
      // `..` traversal (#604: any path on the machine).
      await refused('verify', { snapshot: snap, dir: '../outside' });
      await refused('verify', { snapshot: snap, dir: 'src/../../outside' });
      await refused('restore', { snapshot: snap, dir: '../escaped' }, sb.path('escaped'));
      await refused('restore', { snapshot: snap, dir: 'new/../../../escaped' }, sb.path('escaped'));
      await refused('verify', { snapshot: snap, dir: '/etc' });
      // A symlink inside the repository pointing out; `link/..` is the parent of its target, not
      // the repository (a lexical normalisation would have let it in).
      await refused('verify', { snapshot: snap, dir: 'out-link' });
      await refused('restore', { snapshot: snap, dir: 'out-link/copy' }, sb.path('outside', 'copy'));
      await refused('restore', { snapshot: snap, dir: 'out-link/../escaped' }, sb.path('escaped'));
      await refused('restore', { snapshot: snap, dir: 'dangling' }, sb.path('nowhere'));
      // A root that is a string prefix of another directory: /…/a admits /…/a/x, not /…/ab/x.
      await refused('restore', { snapshot: snap, dir: sb.path('ab', 'x') }, sb.path('ab', 'x'));
      const ok = await callOk(s, 'restore', { snapshot: snap, dir: sb.path('a', 'x') });
      assert.equal(ok.dir, sb.path('a', 'x'));
      // Names and paths git would read as options (CVE-2025-68145's neighbours, #4550).
      await refused('verify', { snapshot: '--output=/tmp/x', dir: '.' });
      await refused('restore', { snapshot: '-c', dir: sb.path('a', 'y') }, sb.path('a', 'y'));
      await refused('verify', { snapshot: snap, dir: '-C/etc' });
      await refused('restore', { snapshot: snap, dir: sb.path('a', 'z'), from: '-c core.sshCommand=touch /tmp/pwned' });
      await refused('restore', { snapshot: snap, dir: sb.path('a', 'z'), from: '--upload-pack=touch /tmp/pwned' });
      // Sources: only configured remotes, local paths and file:// / xet:: URLs inside the reach.
      await refused('restore', { snapshot: snap, dir: sb.path('a', 'z'), from: 'ext::sh -c touch% /tmp/pwned' });
      await refused('restore', { snapshot: snap, dir: sb.path('a', 'z'), from: 'https://example.invalid/r.git' });
      await refused('restore', { snapshot: snap, dir: sb.path('a', 'z'), from: 'example.invalid:r.git' });
      await refused('restore', { snapshot: snap, dir: sb.path('a', 'z'), from: other.dir });
      await refused('restore', { snapshot: snap, dir: sb.path('a', 'z'), from: `file://${other.dir}` });
      await refused('restore', { snapshot: snap, dir: sb.path('a', 'z'), from: `xet::${sb.path('outside')}` });
      assert.ok(!fs.existsSync(sb.path('a', 'z')));
      // The repository cannot be switched (CVE-2025-68145: a repo_path never checked): no tool has
      // such an argument, and another repository's paths are out of reach.
      for (const key of ['repo', 'repo_path', 'cwd']) {
        const e = await callError(s, 'verify', { snapshot: snap, dir: '.', [key]: other.dir }, 'USAGE');
        assert.match(e.message, new RegExp(key));
      }
      await refused('verify', { snapshot: snap, dir: other.dir });
      // Inside a git directory: hooks and config are code.
      await refused('restore', { snapshot: snap, dir: '.git/hooks/x' }, r.p('.git/hooks/x'));
      await refused('verify', { snapshot: snap, dir: '.git' });
      await refused('restore', { snapshot: snap, dir: sb.path('a', 'x', '.git', 'hooks', 'y') });
      // What is in reach: a linked worktree (forks are), a configured remote, the repository itself.
      const wt = await callOk(s, 'verify', { snapshot: snap, dir: sb.path('wt') });
      assert.equal(wt.dir, sb.path('wt'));
      await callOk(s, 'restore', { snapshot: snap, dir: sb.path('a', 'from-self'), from: r.dir });
      await callError(
        s,
        'restore',
        { snapshot: snap, dir: sb.path('a', 'from-origin'), from: 'origin' },
        'SNAPSHOT_NOT_FOUND',
      );
    });
  });
});

/** Waits for an MCP session's server to exit; returns how. */
function exited(s: McpSession): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  if (s.process.exitCode !== null || s.process.signalCode !== null) {
    return Promise.resolve({ code: s.process.exitCode, signal: s.process.signalCode });
  }
  return new Promise((resolve) => s.process.once('exit', (code, signal) => resolve({ code, signal })));
}

test('the server exits when stdin closes', async () => {
  await withSandbox(async (sb) => {
    const r = repoWithFiles(sb);
    await withMcp(sb, ['--repo', r.dir], async (s) => {
      await callOk(s, 'verify', { snapshot: capture(sb, r.dir), dir: '.' });
      const done = exited(s);
      s.process.stdin?.end();
      const how = await Promise.race([done, new Promise((res) => setTimeout(() => res('still running'), 1500))]);
      // Before the SDK's own close would SIGTERM it (2 s): by itself, with exit 0.
      assert.deepEqual(how, { code: 0, signal: null });
    });
  });
});

/** Inputs that look like paths or names by key or description but are neither, each with why. */
const NOT_CONFINED: Record<string, string> = {
  'fork.snapshot': 'a snapshot id, or with --remount a fork the repository already registered (names: no leading -)',
  'export.source': 'a snapshot id or a fork of this repository: resolved against its forks, never written',
  'handoff create.from': 'an agent name stored in the descriptor, not a path',
  'handoff list.from': 'an agent name to filter by',
  'handoff create.artifact': 'a path inside the snapshot, stored as text in the descriptor',
  'archive.prefix': 'a directory name inside the archive, not on disk',
  'cat.target': '<snapshot>:<path>: a snapshot id (resolved as a name) and a path inside its files tree, never on disk',
  'cat.range': 'a byte range of the file (digits and - or +), parsed strictly',
  'capture.include': 'gitignore patterns matched inside the worktree',
  'capture.exclude': 'gitignore patterns matched inside the worktree',
  'task run.command': 'the argv the task runs: arbitrary execution by design (see the MCP section)',
  'handoff create.correlationId': 'opaque text stored in JSON, never a git argument',
  'handoff create.requestId': 'opaque text hashed into the request, never a git argument',
  'task run.correlationId': 'opaque text stored in the manifest',
  'task run.sessionId': 'opaque text stored in the manifest',
};
const PATHY_KEY = /^(dir|from|remote|store|output|patch|in|source|file|path|repo|root|descriptor|forkDir)$/i;
const PATHY_TEXT = /\b(path|directory|file|url|remote)\b/i;
const NAMEY_KEY = /(id|ids|snapshot|snapshots|other|branch|task|fork|supersedes|continueTask)$/i;

test('every tool input that can name a path, URL or remote is confined, and every id/ref is a name (or allow-listed with a reason)', () => {
  const missing: string[] = [];
  for (const spec of COMMANDS) {
    if (spec.tool === null) continue;
    for (const [key, field] of Object.entries(spec.input)) {
      const label = `${spec.path.join(' ')}.${key}`;
      if (NOT_CONFINED[label]) continue;
      const inner = unwrapField(field as z.ZodType).base;
      const isString =
        inner instanceof z.ZodString || (inner instanceof z.ZodArray && inner.element instanceof z.ZodString);
      if (!isString) continue;
      const text = (field as z.ZodType).description ?? '';
      const paths = (spec.paths ?? {}) as Record<string, unknown>;
      const names = (spec.names ?? []) as string[];
      if ((PATHY_KEY.test(key) || PATHY_TEXT.test(text)) && !(key in paths)) missing.push(`${label}: not in paths`);
      if (NAMEY_KEY.test(key) && !names.includes(key)) missing.push(`${label}: not in names`);
    }
  }
  assert.deepEqual(missing, []);
});

test('confinement of targets: an existing file, core.hooksPath and the git dir are refused; a new file is allowed', async () => {
  await withSandbox(async (sb) => {
    const repo = repoWithFiles(sb);
    fs.mkdirSync(`${repo.dir}/myhooks`);
    fs.writeFileSync(`${repo.dir}/notes.txt`, 'untracked user data\n');
    const { readReach, confinePath } = await import('../src/mcp/confine');
    const { gitText } = await import('../src/git/exec');
    await gitText(['config', 'core.hooksPath', 'myhooks'], { cwd: repo.dir });
    const reach = await readReach(fs.realpathSync(repo.dir), []);
    const refused = (v: string, kind: 'target' | 'existing' = 'target') =>
      assert.throws(
        () => confinePath('output', v, reach, kind),
        (e: { code?: string }) => e.code === 'ARGUMENT_NOT_ALLOWED',
      );
    refused('notes.txt');
    refused('myhooks/pre-commit');
    refused('myhooks/pre-commit', 'existing');
    refused('.git/hooks/pre-commit');
    assert.equal(confinePath('output', 'new.tar', reach, 'target'), `${fs.realpathSync(repo.dir)}/new.tar`);
    assert.equal(fs.readFileSync(`${repo.dir}/notes.txt`, 'utf8'), 'untracked user data\n');
  });
});

test('drop: remote is confined as a source (a store outside the roots is refused)', () => {
  const drop = COMMANDS.find((c) => c.tool === 'drop') as AnyCommandSpec;
  assert.equal((drop.paths as Record<string, string>).remote, 'source');
});
