// Contracts with docs/CLI.md: every `verify` difference kind and every `diff` kind the docs list is
// produced by a real change to a real tree, and every `--json` shape the docs give is what the
// command prints (no documented field missing, no undocumented one). The lists and shapes are parsed
// from docs/CLI.md at run time, so the test fails when the docs and the output drift apart.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { killAt } from '../support/faults';
import { git, initRepo, Repo } from '../support/git';
import { withMountSandbox } from '../support/mounts';
import { withSandbox, type Sandbox } from '../support/sandbox';
import { describeTool, tool } from '../support/store-gc';
import { capture, expectExit, parseJson, verify, xet } from '../support/xet';

/** Whether src/allowance/<file> is still the issue 11 foundation's stub (its helper's branch not merged). */
const allowanceStub = (file: string): boolean =>
  fs
    .readFileSync(path.resolve(__dirname, '..', '..', '..', 'src', 'allowance', file), 'utf8')
    .includes('not implemented yet');

const CLI_MD = fs.readFileSync(path.resolve(__dirname, '..', '..', '..', 'docs', 'CLI.md'), 'utf8');

/** docs/CLI.md's command sections, keyed by the command words (`capture`, `handoff create`, …). */
function sections(): Map<string, string> {
  const out = new Map<string, string>();
  const parts = CLI_MD.split(/^### /m).slice(1);
  for (const part of parts) {
    const title = /^`git xet ([^`]*)`/.exec(part)?.[1];
    if (!title) continue;
    const words: string[] = [];
    for (const w of title.split(' ')) {
      // `gc --store` and `drop --remote` are documented apart from `gc` and `drop`.
      const own = (words.join(' ') === 'gc' && w === '--store') || (words.join(' ') === 'drop' && w === '--remote');
      if (!own && /^[<[(-]/.test(w)) break;
      words.push(w);
    }
    out.set(words.join(' '), part);
  }
  return out;
}

function section(name: string): string {
  const s = sections().get(name);
  assert.ok(s, `docs/CLI.md has a section for git xet ${name}`);
  return s;
}

/** The backticked names in the docs sentence that starts with `lead` (up to its full stop). */
function listedKinds(name: string, lead: RegExp): string[] {
  const text = section(name).replace(/\s+/g, ' ');
  const m = lead.exec(text);
  assert.ok(m, `docs/CLI.md's ${name} section lists kinds (${lead})`);
  const sentence = text.slice(m.index + m[0].length).split(/\.(\s|$)/)[0];
  return [...sentence.matchAll(/`([a-z*-]+)`/g)].map((x) => x[1]);
}

/** verify's kinds; `index-*` stands for the index family of the file kinds listed before it
 * (`file-unstorable`, later, is about names on disk only). */
function verifyKinds(): string[] {
  const listed = listedKinds('verify', /kinds include /);
  const files = listed
    .slice(0, listed.indexOf('index-*'))
    .filter((k) => k.startsWith('file-'))
    .map((k) => k.slice('file-'.length));
  return listed.flatMap((k) => (k === 'index-*' ? files.map((f) => `index-${f}`) : [k]));
}

/** diff's kinds; "the same with `index-`" repeats the file kinds for the index. */
function diffKinds(): string[] {
  const listed = listedKinds('diff', /Kinds: /);
  const files = listed.filter((k) => k.startsWith('file-')).map((k) => k.slice('file-'.length));
  return listed.flatMap((k) => (k === 'index-' ? files.map((f) => `index-${f}`) : [k]));
}

// --- a tiny parser for the shapes docs/CLI.md writes as `{a, b?, c: [{d}], e: "x"|"y", g: {h} | null, ...f}` ---

/** A field's value: any (null), an object (`| null` makes null allowed), an array, one of some literals. */
type Value = { object: Shape; nullable: boolean } | { array: Value } | { oneOf: unknown[] } | null;
interface Shape {
  fields: Map<string, { optional: boolean; value: Value }>;
  spread: boolean;
}

function parseShape(text: string): Shape {
  const tokens = text.match(/\.\.\.[A-Za-z]+|"[^"]*"|[A-Za-z][A-Za-z0-9]*|[{}[\]:,|?]/g) ?? [];
  let i = 0;
  const expect = (t: string) => {
    assert.equal(tokens[i], t, `shape ${text}: expected ${t} at token ${i}`);
    i++;
  };
  const value = (): Value => {
    if (tokens[i] === '{') {
      const of = object();
      const nullable = tokens[i] === '|' && tokens[i + 1] === 'null';
      if (nullable) i += 2;
      return { object: of, nullable };
    }
    if (tokens[i] === '[') {
      i++;
      const of = value();
      expect(']');
      return { array: of };
    }
    const oneOf: unknown[] = [];
    for (;;) {
      const t = tokens[i++];
      const literals: Record<string, unknown> = { true: true, false: false, null: null };
      oneOf.push(t.startsWith('"') ? t.slice(1, -1) : Object.hasOwn(literals, t) ? literals[t] : t);
      if (tokens[i] !== '|') break;
      i++;
    }
    return { oneOf };
  };
  const object = (): Shape => {
    expect('{');
    const shape: Shape = { fields: new Map(), spread: false };
    while (tokens[i] !== '}') {
      const t = tokens[i++];
      if (t.startsWith('...')) shape.spread = true;
      else {
        let optional = false;
        if (tokens[i] === '?') {
          optional = true;
          i++;
        }
        let v: Value = null;
        if (tokens[i] === ':') {
          i++;
          v = value();
        }
        shape.fields.set(t, { optional, value: v });
      }
      if (tokens[i] === ',') i++;
    }
    expect('}');
    return shape;
  };
  const s = object();
  assert.equal(i, tokens.length, `shape ${text} parsed to its end`);
  return s;
}

/** Every JSON shape docs/CLI.md gives, keyed `<command>` (and `<command> (2)` for a second one). */
function documentedShapes(): Map<string, Shape> {
  const out = new Map<string, Shape>();
  for (const [name, text] of sections()) {
    // A backticked object after a colon: "JSON: `{…}`", "List this repository's forks: `{…}`".
    let n = 0;
    for (const m of text.matchAll(/:\s+`(\{[^`]*\})`/g)) {
      out.set(n++ ? `${name} (${n})` : name, parseShape(m[1].replace(/\s+/g, ' ')));
    }
  }
  return out;
}

/** Where `value` departs from `shape`: documented fields missing, undocumented ones present. */
function shapeProblems(value: unknown, shape: Shape, where: string): string[] {
  if (!value || typeof value !== 'object' || Array.isArray(value)) return [`${where} is not an object`];
  const obj = value as Record<string, unknown>;
  const problems: string[] = [];
  for (const [key, f] of shape.fields) {
    if (key in obj) problems.push(...valueProblems(obj[key], f.value, `${where}.${key}`));
    else if (!f.optional) problems.push(`${where}.${key} is documented but missing`);
  }
  if (!shape.spread) {
    for (const k of Object.keys(obj)) if (!shape.fields.has(k)) problems.push(`${where}.${k} is not documented`);
  }
  return problems;
}

function valueProblems(v: unknown, value: Value, where: string): string[] {
  if (!value) return []; // a plain field: any value
  if ('oneOf' in value) return value.oneOf.includes(v) ? [] : [`${where} is ${v}, not ${value.oneOf.join('|')}`];
  if (v === null) return 'object' in value && value.nullable ? [] : [`${where} is null, which the docs do not allow`];
  if ('array' in value) {
    if (!Array.isArray(v)) return [`${where} is not an array`];
    return v.flatMap((x, n) => valueProblems(x, value.array, `${where}[${n}]`));
  }
  return shapeProblems(v, value.object, where);
}

function checkShape(value: unknown, shape: Shape, where: string): void {
  assert.deepEqual(shapeProblems(value, shape, where), [], JSON.stringify(value).slice(0, 600));
}

// --- a source with something of every kind to change ---

function source(sb: Sandbox, withInner = true): { r: Repo; snap: string } {
  const r = initRepo(sb, 'src');
  r.commit('c1', { 'a.txt': 'a\n', 'b.txt': 'b\n', 'c.txt': 'c\n' });
  r.git('branch', 'other');
  r.commit('c2', { 'a.txt': 'a2\n' });
  r.mkdir('empty');
  r.git('update-index', '--assume-unchanged', 'c.txt');
  // Two paths of one inode (untracked): the snapshot's filemeta records them as a link group.
  r.write('l1.txt', 'l\n');
  fs.linkSync(path.join(r.dir, 'l1.txt'), path.join(r.dir, 'l2.txt'));
  // A nested repository (a clone kept inside, not a submodule): captured as a repository of its own.
  if (withInner) initRepo(sb, 'src/inner').commit('i', { 'i.txt': 'i\n' });
  return { r, snap: capture(sb, r.dir) };
}

/** A second source stopped in a conflict of `git rebase -r` (rebase-merge state, stages 1-3 of f.txt,
 * the label ref refs/rewritten/onto): what the conflict and operation kinds change. */
function operationSource(sb: Sandbox): { r: Repo; snap: string } {
  const r = initRepo(sb, 'op-src', ['-b', 'main']);
  r.commit('base', { 'f.txt': 'base\n', 'g.txt': 'g\n' });
  r.git('checkout', '-q', '-b', 'topic');
  r.commit('topic 1', { 'f.txt': 'topic\n' });
  r.git('checkout', '-q', 'main');
  r.commit('main 1', { 'f.txt': 'main\n' });
  r.git('checkout', '-q', 'topic');
  assert.notEqual(r.gitTry('rebase', '-r', 'main').status, 0, 'fixture: the rebase stops in a conflict');
  assert.match(r.git('for-each-ref', 'refs/rewritten/'), /refs\/rewritten\/onto/);
  return { r, snap: capture(sb, r.dir) };
}

let copies = 0;
function freshCopy(sb: Sandbox, r: Repo, snap: string): string {
  const dir = sb.path(`copy-${++copies}`);
  expectExit(xet(sb, r.dir, ['restore', snap, dir, '--json']), 0);
  return dir;
}

type Diff = { kind: string; path?: string };
const brief = (ds: Diff[]) => ds.map((d) => (d.path ? `${d.kind} ${d.path}` : d.kind)).sort();

test('every verify difference kind docs/CLI.md lists comes from a real change, with the documented shape', () =>
  withSandbox((sb) => {
    const main = source(sb);
    const { r, snap } = main;
    const op = operationSource(sb);
    const blob = r.gitInput('other\n', 'hash-object', '-w', '--stdin').trim();
    const opBlob = op.r.gitInput('other\n', 'hash-object', '-w', '--stdin').trim();
    const g = (dir: string, ...args: string[]) => git(sb, dir, args);
    const gitInput = (d: string, input: string, ...args: string[]) => new Repo(sb, d).gitInput(input, ...args);
    const gitFile = (d: string, rel: string) => path.join(d, '.git', rel);
    // Each case: a change to a fresh restore of the snapshot (of `source`, or of `operationSource`
    // where the third element says so), and exactly the differences it gives.
    const cases: Record<string, [(dir: string) => void, string[], 'op'?]> = {
      'file-extra': [(d) => fs.writeFileSync(path.join(d, 'new.txt'), 'n\n'), ['file-extra new.txt']],
      'file-missing': [(d) => fs.rmSync(path.join(d, 'b.txt')), ['file-missing b.txt']],
      'file-modified': [(d) => fs.writeFileSync(path.join(d, 'b.txt'), 'B\n'), ['file-modified b.txt']],
      'file-type-changed': [
        (d) => {
          fs.rmSync(path.join(d, 'b.txt'));
          fs.symlinkSync('a.txt', path.join(d, 'b.txt'));
        },
        ['file-type-changed b.txt'],
      ],
      'empty-dir-missing': [(d) => fs.rmdirSync(path.join(d, 'empty')), ['empty-dir-missing empty']],
      'empty-dir-extra': [(d) => fs.mkdirSync(path.join(d, 'void')), ['empty-dir-extra void']],
      'index-extra': [
        (d) => g(d, 'update-index', '--add', '--cacheinfo', `100644,${blob},ghost.txt`),
        ['index-extra ghost.txt'],
      ],
      'index-missing': [(d) => g(d, 'rm', '-q', '--cached', 'b.txt'), ['index-missing b.txt']],
      'index-modified': [(d) => g(d, 'update-index', '--cacheinfo', `100644,${blob},b.txt`), ['index-modified b.txt']],
      'index-type-changed': [
        (d) => g(d, 'update-index', '--cacheinfo', `120000,${blob},b.txt`),
        ['index-type-changed b.txt'],
      ],
      'index-flag-missing': [
        (d) => g(d, 'update-index', '--no-assume-unchanged', 'c.txt'),
        ['index-flag-missing c.txt'],
      ],
      'index-flag-extra': [(d) => g(d, 'update-index', '--assume-unchanged', 'b.txt'), ['index-flag-extra b.txt']],
      head: [(d) => g(d, 'checkout', '-q', '--detach'), ['head']],
      ref: [(d) => g(d, 'branch', '-f', 'other', 'main'), ['ref refs/heads/other']],
      'ref-extra': [(d) => g(d, 'branch', 'extra'), ['ref-extra refs/heads/extra']],
      stash: [
        (d) => {
          fs.writeFileSync(path.join(d, 'b.txt'), 'stashed\n');
          g(d, 'stash', '-q');
        },
        ['stash'],
      ],
      config: [(d) => g(d, 'remote', 'add', 'up', '/nowhere'), ['config']],
      'info-exclude': [(d) => fs.writeFileSync(path.join(d, '.git/info/exclude'), '*.tmp\n'), ['info-exclude']],
      'info-attributes': [
        (d) => fs.writeFileSync(path.join(d, '.git/info/attributes'), '*.bin binary\n'),
        ['info-attributes'],
      ],
      // Conflicts and operations in progress, in a copy of the stopped rebase.
      'unmerged-missing': [
        (d) => g(d, 'add', 'f.txt'), // marked resolved as it is: stage 0 instead of stages 1-3
        ['unmerged-missing f.txt', 'unmerged-missing f.txt', 'unmerged-missing f.txt', 'index-extra f.txt'],
        'op',
      ],
      'unmerged-extra': [
        (d) => gitInput(d, `100644 ${opBlob} 1\tz.txt\n`, 'update-index', '--index-info'),
        ['unmerged-extra z.txt'],
        'op',
      ],
      'unmerged-modified': [
        (d) => gitInput(d, `100644 ${opBlob} 2\tf.txt\n`, 'update-index', '--index-info'),
        ['unmerged-modified f.txt'],
        'op',
      ],
      // In a copy of a tree with nothing in progress, a squash message starts one (git merge --squash).
      operation: [
        (d) => fs.writeFileSync(gitFile(d, 'SQUASH_MSG'), 'Squashed commit\n'),
        ['operation', 'gitstate-extra SQUASH_MSG'],
      ],
      'gitstate-missing': [
        (d) => fs.rmSync(gitFile(d, 'rebase-merge/message')),
        ['gitstate-missing rebase-merge/message'],
        'op',
      ],
      'gitstate-extra': [
        (d) => fs.writeFileSync(gitFile(d, 'rebase-merge/quiet'), ''),
        ['gitstate-extra rebase-merge/quiet'],
        'op',
      ],
      'gitstate-modified': [
        (d) => fs.appendFileSync(gitFile(d, 'rebase-merge/git-rebase-todo'), 'pick 0000000 extra\n'),
        ['gitstate-modified rebase-merge/git-rebase-todo'],
        'op',
      ],
      'operation-ref-missing': [
        (d) => g(d, 'update-ref', '-d', 'refs/rewritten/onto'),
        ['operation-ref-missing refs/rewritten/onto'],
        'op',
      ],
      'operation-ref-extra': [
        (d) => g(d, 'update-ref', 'refs/rewritten/extra', 'HEAD'),
        ['operation-ref-extra refs/rewritten/extra'],
        'op',
      ],
      sparse: [(d) => g(d, 'config', 'core.sparseCheckout', 'true'), ['sparse core.sparseCheckout']],
      // Inner repositories: a name no snapshot can hold (git refuses .Git), a repository on disk
      // that the snapshot does not have.
      'file-unstorable': [
        (d) => {
          fs.mkdirSync(path.join(d, 'deep'));
          fs.writeFileSync(path.join(d, 'deep/.Git'), 'x\n');
        },
        ['file-unstorable deep/.Git'],
      ],
      'repository-extra': [(d) => g(d, 'init', '-q', 'extra'), ['repository-extra extra']],
      // File times and hard links (the snapshot records them: filemeta).
      mtime: [(d) => fs.utimesSync(path.join(d, 'b.txt'), 1e9, 1e9), ['mtime b.txt']],
      hardlink: [
        (d) => {
          // The same bytes, but a file of its own again: the link to l1.txt is gone.
          fs.rmSync(path.join(d, 'l2.txt'));
          fs.writeFileSync(path.join(d, 'l2.txt'), 'l\n');
        },
        ['hardlink l2.txt'],
      ],
    };
    const shape = documentedShapes().get('verify');
    assert.ok(shape, 'docs/CLI.md gives the JSON of verify');
    const seen = new Map<string, Diff[]>();
    const check = (dir: string, want: string[], what: string, from = main) => {
      const v = verify(sb, from.r.dir, from.snap, dir);
      expectExit(v, 1);
      const out = parseJson(v);
      checkShape(out, shape, `verify (${what})`);
      assert.equal(out.ok, false);
      assert.equal(out.scope, 'repository');
      // The rule: mtime differences are ignored in every case but the mtime case. A file a case writes
      // anew (the stash case's b.txt, the hardlink case's l2.txt) also has a new modification time,
      // which is its own kind with its own case; in the mtime case it must be the only difference.
      const relevant = out.differences.filter((d: Diff) => d.kind !== 'mtime' || what === 'mtime');
      assert.deepEqual(brief(relevant), [...want].sort(), `${what}: ${v.stdout}`);
      for (const d of relevant) seen.set(d.kind, [...(seen.get(d.kind) ?? []), d]);
    };
    const fresh = new Set<string>();
    for (const [kind, [change, want, which]] of Object.entries(cases)) {
      const from = which === 'op' ? op : main;
      const dir = freshCopy(sb, from.r, from.snap);
      // A fresh restore of each source is identical (mtime included).
      if (!fresh.has(from.snap)) expectExit(verify(sb, from.r.dir, from.snap, dir), 0);
      fresh.add(from.snap);
      change(dir);
      check(dir, want, kind, from);
    }
    // The directory itself: gone, not a repository, a restore that did not finish.
    check(sb.path('nowhere'), [`missing ${sb.path('nowhere')}`], 'missing');
    fs.mkdirSync(sb.path('plain'));
    check(sb.path('plain'), [`not-a-repository ${sb.path('plain')}`], 'not-a-repository');
    killAt(sb, r.dir, ['restore', snap, sb.path('killed'), '--json'], 'restore:after-files');
    const hidden = fs.readdirSync(sb.root).find((n) => n.startsWith('.killed.xet-restore-'));
    assert.ok(hidden, 'the killed restore left its hidden sibling');
    check(sb.path(hidden), [`incomplete ${sb.path(hidden)}`], 'incomplete');
    // A chunk of a chunked file that the snapshot's repository lacks (unpacked, then one removed):
    // the restored copy is right, the repository is not.
    const chunky = initRepo(sb, 'chunky');
    chunky.git('config', 'xet.chunk.threshold', '64k');
    fs.writeFileSync(chunky.p('big.bin'), crypto.randomBytes(300_000));
    const chunkySnap = capture(sb, chunky.dir);
    const chunkyCopy = freshCopy(sb, chunky, chunkySnap);
    const packDir = path.join(chunky.dir, '.git', 'objects', 'pack');
    for (const f of fs.readdirSync(packDir).filter((n) => n.endsWith('.pack'))) {
      const data = fs.readFileSync(path.join(packDir, f));
      for (const n of fs.readdirSync(packDir))
        if (n.startsWith(f.slice(0, -'.pack'.length))) fs.rmSync(path.join(packDir, n));
      chunky.gitInput(data, 'unpack-objects', '-q');
    }
    const chunk = chunky.git('ls-tree', '-r', `${chunkySnap}:chunks`).split('\n')[0].split(/\s+/)[2];
    fs.rmSync(path.join(chunky.dir, '.git', 'objects', chunk.slice(0, 2), chunk.slice(2)));
    check(chunkyCopy, ['chunk-integrity big.bin'], 'chunk-integrity', { r: chunky, snap: chunkySnap });

    assert.deepEqual([...seen.keys()].sort(), [...verifyKinds()].sort(), 'the kinds produced are the documented ones');
    // What a difference carries: expected/actual where there are two sides to show.
    for (const kind of ['ref', 'head', 'stash', 'config', 'info-exclude']) {
      const d = seen.get(kind)?.[0] as Record<string, unknown>;
      assert.ok('expected' in d && 'actual' in d, `${kind} has expected and actual: ${JSON.stringify(d)}`);
    }
  }));

test('every diff kind docs/CLI.md lists comes from a real change, between snapshots and to the worktree', () =>
  withSandbox((sb) => {
    const { r, snap } = source(sb);
    const blob = r.gitInput('other\n', 'hash-object', '-w', '--stdin').trim();
    const g = (dir: string, ...args: string[]) => git(sb, dir, args);
    const cases: Record<string, [(dir: string) => void, string[]]> = {
      'file-added': [(d) => fs.writeFileSync(path.join(d, 'new.txt'), 'n\n'), ['file-added new.txt']],
      'file-deleted': [(d) => fs.rmSync(path.join(d, 'b.txt')), ['file-deleted b.txt']],
      'file-modified': [(d) => fs.writeFileSync(path.join(d, 'b.txt'), 'B\n'), ['file-modified b.txt']],
      'file-type-changed': [
        (d) => {
          fs.rmSync(path.join(d, 'b.txt'));
          fs.symlinkSync('a.txt', path.join(d, 'b.txt'));
        },
        ['file-type-changed b.txt'],
      ],
      'index-added': [
        (d) => g(d, 'update-index', '--add', '--cacheinfo', `100644,${blob},ghost.txt`),
        ['index-added ghost.txt'],
      ],
      'index-deleted': [(d) => g(d, 'rm', '-q', '--cached', 'b.txt'), ['index-deleted b.txt']],
      'index-modified': [(d) => g(d, 'update-index', '--cacheinfo', `100644,${blob},b.txt`), ['index-modified b.txt']],
      'index-type-changed': [
        (d) => g(d, 'update-index', '--cacheinfo', `120000,${blob},b.txt`),
        ['index-type-changed b.txt'],
      ],
      head: [(d) => g(d, 'checkout', '-q', '--detach'), ['head']],
      'ref-created': [(d) => g(d, 'branch', 'extra'), ['ref-created refs/heads/extra']],
      'ref-moved': [(d) => g(d, 'branch', '-f', 'other', 'main'), ['ref-moved refs/heads/other']],
      'ref-deleted': [(d) => g(d, 'branch', '-q', '-D', 'other'), ['ref-deleted refs/heads/other']],
      'repository-added': [
        (d) => initRepo(sb, path.relative(sb.root, path.join(d, 'extra'))).commit('e', { 'e.txt': 'e\n' }),
        ['repository-added extra'],
      ],
      'repository-deleted': [
        (d) => fs.rmSync(path.join(d, 'inner'), { recursive: true }),
        ['repository-deleted inner'],
      ],
    };
    const shape = documentedShapes().get('diff');
    assert.ok(shape, 'docs/CLI.md gives the JSON of diff');
    const seen = new Set<string>();
    const check = (dir: string, args: string[], want: string[], what: string) => {
      const res = xet(sb, dir, ['diff', ...args, '--exit-code', '--json']);
      expectExit(res, 1);
      const out = parseJson(res);
      checkShape(out, shape, `diff (${what})`);
      assert.equal(out.identical, false);
      assert.deepEqual(brief(out.changes), [...want].sort(), `${what}: ${res.stdout}`);
      for (const c of out.changes) seen.add(c.kind);
    };
    for (const [kind, [change, want]] of Object.entries(cases)) {
      const dir = freshCopy(sb, r, snap);
      if (!seen.size) {
        const same = parseJson(xet(sb, dir, ['diff', snap, '--json']));
        assert.deepEqual([same.identical, same.changes], [true, []], 'a fresh restore has no changes');
      }
      change(dir);
      check(dir, [snap], want, `${kind}, to the worktree`);
      // The same change between two snapshots.
      const after = capture(sb, dir);
      check(dir, [snap, after], want, `${kind}, between snapshots`);
    }
    assert.deepEqual([...seen].sort(), [...diffKinds()].sort(), 'the kinds produced are the documented ones');
  }));

const isRoot = process.getuid?.() === 0;

test(
  'every --json shape docs/CLI.md gives is what the command prints',
  { skip: isRoot ? false : 'the overlay remount needs root (CI runs as root)' },
  () =>
    withMountSandbox((sb) => {
      const shapes = documentedShapes();
      const checked = new Set<string>();
      const problems: string[] = [];
      const json = (cwd: string, args: string[], key: string, exit = 0) => {
        // `--json` is git xet's, never the task's command's: before a `--`.
        const dd = args.indexOf('--');
        const res = xet(sb, cwd, dd < 0 ? [...args, '--json'] : [...args.slice(0, dd), '--json', ...args.slice(dd)]);
        expectExit(res, exit);
        const out = parseJson(res);
        const shape = shapes.get(key);
        assert.ok(shape, `docs/CLI.md gives the JSON of ${key}`);
        problems.push(...shapeProblems(out, shape, key));
        checked.add(key);
        return out;
      };
      // Forks do not take inner repositories yet (SUBMODULE_PRESENT): the first snapshot has none.
      const { r, snap } = source(sb, false);
      json(r.dir, ['init'], 'init');
      // The repository root, without and with a limit, cheap and recounted.
      json(r.dir, ['allowance'], 'allowance');
      r.git('config', 'xet.allowance.bytes', '1G');
      assert.equal(json(r.dir, ['allowance', '--recount'], 'allowance').recounted, true);
      for (const verb of ['status', 'uninstall', 'install'])
        json(r.dir, ['hooks', verb], 'hooks install|uninstall|status');
      // Tasks: an attached run and its reads, a detached one cancelled, a recovery pass.
      const ran = json(r.dir, ['task', 'run', '--no-capture', '--', 'sh', '-c', 'echo out'], 'task run (2)');
      const taskShown = json(r.dir, ['task', 'show', ran.task], 'task show');
      problems.push(...shapeProblems(taskShown.result, shapes.get('task show (2)') as Shape, 'task show (2)'));
      checked.add('task show (2)');
      json(r.dir, ['task', 'list'], 'task list');
      json(r.dir, ['task', 'events', ran.task], 'task events');
      const detached = json(r.dir, ['task', 'run', '--detach', '--no-capture', '--', 'sleep', '30'], 'task run');
      json(r.dir, ['task', 'cancel', detached.task], 'task cancel');
      for (let end = Date.now() + 60_000; ;) {
        const t = parseJson(xet(sb, r.dir, ['task', 'show', detached.task, '--json'])).task;
        if (t.status === 'cancelled') break;
        assert.ok(Date.now() < end, `the cancelled task ends (${t.status})`);
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200);
      }
      json(r.dir, ['task', 'recover', '--all'], 'task recover');
      initRepo(sb, 'src/inner').commit('i', { 'i.txt': 'i\n' });
      r.write('untracked.txt', 'u\n');
      r.write('.env', 'SECRET=1\n');
      const cap = json(r.dir, ['capture', '-m', 'second'], 'capture');
      assert.deepEqual(cap.excludedSecrets, ['.env']);
      // docs/CLI.md gives `repositories` in prose: `[{path, kind, snapshot, files}]`.
      assert.deepEqual(
        cap.repositories.map((x: Record<string, unknown>) => [Object.keys(x).sort(), x.path, x.kind]),
        [[['files', 'kind', 'path', 'snapshot'], 'inner', 'nested']],
      );
      // Pins first, so snapshots, pins and status show a non-empty one.
      assert.equal(json(r.dir, ['pin', snap.slice(0, 8), '--reason', 'contract'], 'pin').snapshot, snap);
      assert.equal(json(r.dir, ['pins'], 'pins').pins.length, 1);
      json(r.dir, ['snapshots'], 'snapshots');
      const st = json(r.dir, ['status'], 'status');
      assert.equal(st.lastSnapshot?.snapshot, cap.snapshot);
      assert.equal(st.pins.length, 1);
      json(r.dir, ['unpin', snap], 'unpin');
      assert.equal(json(r.dir, ['drop', cap.snapshot], 'drop').dropped.length, 1);
      assert.equal(json(r.dir, ['undrop', cap.snapshot], 'undrop').undropped[0].from, 'dropped');
      json(r.dir, ['version'], 'version');
      const tar = sb.path('snap.tar');
      assert.equal(json(r.dir, ['archive', snap, '-o', tar], 'archive').output, tar);
      const shown = json(r.dir, ['show', snap], 'show');
      assert.equal(shown.snapshot, snap);
      assert.equal(json(r.dir, ['restore', snap, sb.path('restored')], 'restore').origin, null);
      // --from records where the copy came from: `origin` is then an object.
      const fromPath = json(
        r.dir,
        ['restore', snap.slice(0, 12), sb.path('restored-from'), '--from', r.dir],
        'restore',
      );
      assert.deepEqual(fromPath.origin, { name: 'xet-origin', url: r.dir });
      // cat to a file and inline; a lazy restore from a bare server (nothing chunked: nothing deferred)
      // and hydrate there.
      json(r.dir, ['cat', `${snap}:b.txt`, '-o', sb.path('cat.out')], 'cat');
      assert.equal(json(r.dir, ['cat', `${snap}:b.txt`, '--range', '0+1'], 'cat').content, 'b');
      const server = sb.path('server.git');
      git(sb, sb.root, ['init', '-q', '--bare', server]);
      git(sb, server, ['config', 'uploadpack.allowFilter', 'true']);
      git(sb, server, ['config', 'uploadpack.allowAnySHA1InWant', 'true']);
      git(sb, r.dir, ['push', '-q', server, `refs/xet/snapshots/${snap}`]);
      const lazyCopy = json(
        r.dir,
        ['restore', snap, sb.path('lazy'), '--from', `file://${server}`, '--lazy'],
        'restore',
      );
      assert.deepEqual(lazyCopy.lazy, { source: `file://${server}`, deferred: [] });
      json(sb.path('lazy'), ['hydrate'], 'hydrate');
      json(r.dir, ['verify', snap, sb.path('restored')], 'verify');
      json(r.dir, ['diff', snap, cap.snapshot], 'diff');
      const f = sb.path('fork');
      json(r.dir, ['fork', snap, f, '--mode', 'overlay'], 'fork');
      // Unmount it as a reboot would; --remount mounts it again.
      assert.equal(spawnSync('umount', [f]).status, 0);
      const remounted = json(r.dir, ['fork', '--remount', f], 'fork (2)');
      assert.equal(remounted.mounted, true);
      fs.writeFileSync(path.join(f, 'work.txt'), 'work\n');
      // In the fork: its own `fork` and `base`, and a live fork in `forks`.
      const inFork = json(f, ['status'], 'status');
      assert.equal(inFork.base?.kind, 'fork');
      assert.ok(inFork.fork && inFork.forks.length && inFork.changed === true, JSON.stringify(inFork));
      json(r.dir, ['forks', '--all'], 'forks');
      json(r.dir, ['changes', f], 'changes');
      json(r.dir, ['export', f, '--branch', 'agent/work'], 'export');
      json(r.dir, ['discard', f], 'discard');
      // reclaim: one fork reclaimed; with --idle, a copy fork refused, then one too recent.
      json(r.dir, ['fork', snap, f], 'fork');
      fs.writeFileSync(path.join(f, 'work.txt'), 'work\n');
      assert.equal(json(r.dir, ['reclaim', f], 'reclaim').reclaimed.length, 1);
      json(r.dir, ['fork', snap, f, '--mode', 'copy'], 'fork');
      // A fork root with its route (measured on wip/forks; skipped while fork-root.ts is a stub).
      if (!allowanceStub('fork-root.ts')) {
        const roots = json(r.dir, ['allowance'], 'allowance').roots;
        assert.ok(
          roots.some((x: { kind: string; route: unknown }) => x.kind === 'fork' && x.route),
          'a fork root',
        );
      }
      assert.equal(json(r.dir, ['reclaim', '--idle', '0s'], 'reclaim').refused[0].code, 'FORK_NOT_EXCLUSIVE');
      assert.equal(json(r.dir, ['reclaim', '--idle', '1d'], 'reclaim').active.length, 1);
      json(r.dir, ['discard', f], 'discard');
      const h = json(r.dir, ['handoff', 'create', snap, '--to', 'B', '--from', 'A', '--title', 'T'], 'handoff create');
      // With a request id: a retry returns the same handoff.
      const req = ['handoff', 'create', snap, '--to', 'B', '--from', 'A', '--title', 'R', '--request-id', 'req-1'];
      const first = json(r.dir, req, 'handoff create');
      assert.deepEqual([first.created, json(r.dir, req, 'handoff create').created], [true, false]);
      json(r.dir, ['handoff', 'verify', h.id], 'handoff verify');
      // Signed: an ssh key of the sandbox's own, allowed; the signature and verify's report of it.
      const key = sb.path('signing-key');
      assert.equal(spawnSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', key], { env: sb.env }).status, 0);
      const pub = fs.readFileSync(`${key}.pub`, 'utf8').split(' ').slice(0, 2).join(' ');
      fs.writeFileSync(sb.path('allowed_signers'), `a@example.com ${pub}\n`);
      r.git('config', 'gpg.format', 'ssh');
      r.git('config', 'user.signingKey', key);
      r.git('config', 'gpg.ssh.allowedSignersFile', sb.path('allowed_signers'));
      json(r.dir, ['handoff', 'sign', h.id], 'handoff sign');
      const signedReport = json(r.dir, ['handoff', 'verify', h.id], 'handoff verify').signatures[0];
      problems.push(...shapeProblems(signedReport, shapes.get('handoff verify (2)') as Shape, 'handoff verify (2)'));
      checked.add('handoff verify (2)');
      json(r.dir, ['handoff', 'accept', h.id, sb.path('accepted')], 'handoff accept');
      // After the acceptance, so that its nested shape is checked too.
      assert.equal(json(r.dir, ['handoff', 'show', h.id], 'handoff show').acceptances.length, 1);
      const listed = json(r.dir, ['handoff', 'list'], 'handoff list').handoffs;
      assert.equal(listed.find((x: { id: string }) => x.id === h.id)?.accepted, 1);
      const store = sb.path('store');
      r.git('remote', 'add', 'origin', `xet::${store}`);
      json(r.dir, ['push'], 'push');
      // The remote's store as a root, and --set (measured on wip/stores; skipped while a stub).
      if (!allowanceStub('store-root.ts')) {
        json(r.dir, ['allowance', '--store', store, '--set', '1G,10000'], 'allowance');
        const roots = json(r.dir, ['allowance'], 'allowance').roots;
        assert.ok(
          roots.some((x: { root: string }) => x.root === `store:${store}`),
          'the store root',
        );
      }
      const b = initRepo(sb, 'b');
      b.git('remote', 'add', 'origin', `xet::${store}`);
      json(b.dir, ['fetch'], 'fetch');
      // Nothing captured here yet: no last snapshot, no fork, no base.
      const none = json(b.dir, ['status'], 'status');
      assert.deepEqual([none.lastSnapshot, none.fork, none.base, none.changed], [null, null, null, null]);
      json(r.dir, ['fsck', '--store', store], 'fsck');
      // The repository's fsck and gc (a dry run, then a real run: `objects.after` null, then an object).
      json(r.dir, ['fsck'], 'fsck (2)');
      const rebuilt = json(r.dir, ['fsck', '--rebuild'], 'fsck (2)');
      assert.equal(typeof rebuilt.rebuilt?.pins, 'number');
      r.git('config', 'xet.retention.keepLast', '1');
      r.git('config', 'xet.gc.keepUnpushed', 'false');
      const dry = json(r.dir, ['gc', '--dry-run'], 'gc');
      assert.ok(dry.kept.length && dry.refs.released.length, JSON.stringify(dry).slice(0, 400));
      json(r.dir, ['gc', '--grace', '0'], 'gc');
      const again = json(r.dir, ['gc', '--grace', '0'], 'gc');
      assert.ok(again.refs.deleted.length, 'the second run deletes the drops of the first');
      // gc --store and drop --remote through test/support/store-gc-run.js, which calls what the CLI
      // calls (gcStore, dropOnRemote) and prints the same JSON.
      const viaTool = (args: string[], key: string) => {
        const res = tool(sb, r.dir, args);
        assert.equal(res.status, 0, describeTool(res));
        const shape = shapes.get(key);
        assert.ok(shape, `docs/CLI.md gives the JSON of ${key}`);
        problems.push(...shapeProblems(res.json, shape, key));
        checked.add(key);
        return res.json;
      };
      r.commit('for the store gc', { 'gc.txt': 'gc\n' });
      assert.equal(r.gitTry('push', '-q', 'origin', 'HEAD:refs/heads/gc').status, 0);
      assert.equal(viaTool(['gc', store, '--dry-run', '--grace', '0'], 'gc --store').dryRun, true);
      const collected = viaTool(['gc', store, '--grace', '0'], 'gc --store');
      assert.ok(collected.packs.deleted.length, 'nested shapes are checked too');
      assert.deepEqual(viaTool(['drop', 'origin', snap], 'drop --remote').dropped[0]?.snapshot, snap);
      assert.deepEqual(problems, [], 'the output is what docs/CLI.md says');
      assert.deepEqual(
        [...shapes.keys()].filter((k) => !checked.has(k)),
        [],
        'every shape docs/CLI.md gives is checked against real output',
      );
    }),
);
