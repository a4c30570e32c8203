// The definitions of snapshots, show, diff, fork, forks, changes, discard, reclaim, export, fsck,
// archive, status, version, drop, undrop, hooks and allowance, init (src/commands/): each tool's
// output schema (MCP's outputSchema) accepts what the real CLI prints with --json, and each
// command's help still lists the flags it had before it became a definition.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import { test } from 'node:test';
import type { z } from 'zod';
import { COMMANDS } from '../../src/commands/registry';
import type { AnyCommandSpec } from '../../src/commands/spec';
import { initRepo } from '../support/git';
import { createSandbox } from '../support/sandbox';
import { capture, describeRun, expectExit, parseJson, xet } from '../support/xet';

const MINE = [
  'init',
  'snapshots',
  'show',
  'diff',
  'fork',
  'forks',
  'changes',
  'discard',
  'reclaim',
  'export',
  'fsck',
  'archive',
  'status',
  'version',
  'drop',
  'undrop',
  'hooks install',
  'hooks uninstall',
  'hooks block',
  'hooks status',
  'allowance',
];

const spec = (words: string): AnyCommandSpec => {
  const s = COMMANDS.find((c) => c.path.join(' ') === words);
  assert.ok(s, `${words} is a definition in COMMANDS`);
  return s;
};

/** Usage line and flags of each command's help before the conversion (the foundation commit). */
const HELP: Record<string, { usage: string; flags: string[] }> = {
  init: { usage: 'init [options]', flags: ['--no-hooks'] },
  snapshots: { usage: 'snapshots [options]', flags: [] },
  show: { usage: 'show [options] <snapshot>', flags: [] },
  diff: { usage: 'diff [options] <snapshot> [other]', flags: ['--exit-code'] },
  fork: {
    usage: 'fork [options] <snapshot> [dir]',
    flags: ['--mode <mode>', '--remount', '--allowance <bytes[,files]>', 'default: "auto"'],
  },
  forks: { usage: 'forks [options]', flags: ['--all'] },
  changes: { usage: 'changes [options] <fork-dir>', flags: [] },
  discard: { usage: 'discard [options] <fork-dir>', flags: ['--no-capture'] },
  reclaim: { usage: 'reclaim [options] [fork-dir]', flags: ['--idle <duration>', '--force'] },
  export: {
    usage: 'export [options] <source>',
    flags: ['--branch <name>', '--patch <file>', '-m, --message <msg>', '--force', '--task <id>'],
  },
  fsck: { usage: 'fsck [options]', flags: ['--store <path>', '--rebuild'] },
  archive: {
    usage: 'archive [options] <snapshot>',
    flags: ['--format <format>', '--prefix <dir/>', '-o, --output <file>'],
  },
  status: { usage: 'status [options]', flags: [] },
  version: { usage: 'version [options]', flags: [] },
  drop: { usage: 'drop [options] <snapshots...>', flags: ['--remote <name>'] },
  undrop: { usage: 'undrop [options] <snapshots...>', flags: [] },
  'hooks install': { usage: 'hooks install [options]', flags: [] },
  'hooks uninstall': { usage: 'hooks uninstall [options]', flags: ['--force'] },
  'hooks block': { usage: 'hooks block [options] <hook>', flags: [] },
  'hooks status': { usage: 'hooks status [options]', flags: [] },
  allowance: {
    usage: 'allowance [options]',
    flags: ['--recount', '--store <remote|path>', '--set <BYTES[,FILES]|none>', '--headroom <SIZE|PCT>'],
  },
};

test('each converted command is one definition, and its --help lists the flags it listed before', () => {
  const sb = createSandbox();
  try {
    for (const words of MINE) {
      const s = spec(words);
      if (['init', 'version'].includes(words) || words.startsWith('hooks ')) assert.equal(s.tool, null, words);
      else assert.equal(s.tool, s.path.join('_'), words);
      const h = xet(sb, sb.root, [...words.split(' '), '--help']);
      expectExit(h, 0);
      const want = HELP[words];
      assert.ok(h.stdout.startsWith(`Usage: git xet ${want.usage}\n`), `${words}: ${h.stdout.split('\n')[0]}`);
      for (const flag of [...want.flags, '-h, --help']) assert.ok(h.stdout.includes(flag), `${words} --help: ${flag}`);
      // Nothing more: every flag the help lists is one of the old ones.
      const listed = [...h.stdout.matchAll(/^ {2}(?:-\w, )?(--[\w-]+)/gm)].map((m) => m[1]);
      for (const flag of listed) {
        assert.ok(flag === '--help' || want.flags.some((f) => f.includes(flag)), `${words} --help lists ${flag}`);
      }
    }
  } finally {
    sb.cleanup();
  }
});

test("each tool's output schema accepts what the CLI prints with --json (and its exit codes stay)", () => {
  const sb = createSandbox('xet-specs-a-', fs.existsSync('/dev/shm') ? '/dev/shm' : undefined);
  const checked = new Set<string>();
  const json = (words: string, args: string[], cwd: string, code = 0) => {
    const r = xet(sb, cwd, [...words.split(' '), ...args, '--json']);
    expectExit(r, code);
    const out = parseJson(r);
    const schema = spec(words).output as z.ZodType | undefined;
    if (spec(words).tool !== null) assert.ok(schema, `${words} has an output schema`);
    if (schema) {
      const p = schema.safeParse(out);
      assert.ok(p.success, `${words} ${args.join(' ')}: ${p.success ? '' : p.error.message}\n${describeRun(r)}`);
      checked.add(words);
    }
    return out;
  };
  try {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n', 'b.txt': 'b\n' });
    json('init', ['--no-hooks'], r.dir);
    json('init', [], r.dir);
    const one = capture(sb, r.dir, ['-m', 'one']);
    r.write('a.txt', 'changed\n');
    r.write('new.txt', 'new\n');
    const two = capture(sb, r.dir);
    json('snapshots', [], r.dir);
    json('show', [one.slice(0, 12)], r.dir);
    assert.equal(json('diff', [one, two, '--exit-code'], r.dir, 1).identical, false);
    assert.equal(json('diff', [two], r.dir).identical, true);
    json('status', [], r.dir);
    json('version', [], r.dir);
    json('allowance', [], r.dir);
    json('allowance', ['--recount'], r.dir);
    json('fsck', [], r.dir);
    json('fsck', ['--rebuild'], r.dir);

    const dir = sb.path('f1');
    assert.equal(json('fork', [one, dir, '--mode', 'copy'], r.dir).mode, 'copy');
    fs.writeFileSync(`${dir}/a.txt`, 'in the fork\n');
    json('forks', ['--all'], r.dir);
    assert.deepEqual(json('changes', [dir], r.dir).modified, ['a.txt']);
    const patch = sb.path('work.patch');
    assert.equal(json('export', [dir, '--patch', patch], r.dir).patch, patch);
    assert.equal(json('export', [dir, '--patch', '-'], r.dir).patch, '-');
    assert.equal(json('export', [one, '--branch', 'from-one'], r.dir).commit, null);
    assert.ok(json('discard', [dir], r.dir).snapshot);
    const dir2 = sb.path('f2');
    json('fork', [two, dir2, '--mode', 'copy'], r.dir);
    assert.equal(json('reclaim', [dir2, '--force'], r.dir).reclaimed.length, 1);
    // A fork made and not touched since: --idle 0s reclaims it, or reports it as refused/active.
    json('fork', [two, sb.path('f3'), '--mode', 'copy'], r.dir);
    json('reclaim', ['--idle', '0s'], r.dir);

    const tar = sb.path('two.tar.gz');
    assert.equal(json('archive', [two, '-o', tar], r.dir).format, 'tar.gz');

    const three = capture(sb, r.dir, ['--always']);
    assert.equal(json('drop', [three], r.dir).dropped[0].created, true);
    assert.equal(json('undrop', [three], r.dir).undropped[0].from, 'dropped');

    // A xet store: fsck --store, allowance --store and drop --remote report it.
    const store = sb.path('store');
    r.git('remote', 'add', 'st', `xet::${store}`);
    r.git('push', '-q', 'st', 'main');
    expectExit(xet(sb, r.dir, ['push', 'st', three, '--json']), 0);
    assert.equal(json('fsck', ['--store', store], r.dir).ok, true);
    json('allowance', ['--store', store], r.dir);
    assert.equal(json('drop', [three, '--remote', 'st'], r.dir).kind, 'xet');

    json('hooks status', [], r.dir);
    json('hooks uninstall', [], r.dir);
    json('hooks install', [], r.dir);
    json('hooks block', ['pre-commit'], r.dir);

    const tools = MINE.filter((w) => spec(w).tool !== null);
    assert.deepEqual(
      tools.filter((w) => !checked.has(w)),
      [],
      'every tool was checked against real output',
    );
  } finally {
    sb.cleanup();
  }
});

test('the checks that were in the old actions still come before any effect, with the same codes', async () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    const snap = capture(sb, r.dir);
    const usage = (args: string[], message: RegExp) => {
      const x = xet(sb, r.dir, [...args, '--json']);
      expectExit(x, 2);
      const e = parseJson(x).error;
      assert.equal(e.code, 'USAGE', describeRun(x));
      assert.match(e.message, message, describeRun(x));
    };
    usage(['fork', snap], /^fork needs <snapshot> and <dir>$/);
    usage(['fork', '--remount', 'x', 'y'], /^fork --remount takes only the fork directory$/);
    usage(['fork', snap, sb.path('f'), '--mode', 'bogus'], /argument 'bogus' is invalid/);
    usage(['fsck', '--store', sb.path('s'), '--rebuild'], /^--rebuild applies to the repository/);
    usage(['allowance', '--set', '1G'], /^--set needs exactly one --store <path>$/);
    usage(['allowance', '--headroom', '5%'], /^--headroom goes with --set$/);
    usage(['archive', snap], /^--json needs -o FILE/);
    usage(['hooks', 'block', 'post-commit'], /^no guard for hook post-commit/);
    assert.equal(fs.existsSync(sb.path('f')), false, 'no fork directory was made');
    // The tool (run, not the command line's cliAction) writes an archive only to a file.
    for (const output of [undefined, '-']) {
      await assert.rejects(
        spec('archive').run({ snapshot: snap, output }, { cwd: r.dir, note: () => {}, via: 'mcp' }),
        (e: { code?: string }) => e.code === 'USAGE',
      );
    }
  } finally {
    sb.cleanup();
  }
});
