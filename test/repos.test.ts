// Submodules and nested repositories: uninitialised gitlinks captured as they are, initialised
// submodules and nested repositories captured recursively as snapshots of their own, restored and
// verified; names git refuses to store are named, never silently dropped; discard keeps inner work.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { Repo, initRepo } from './support/git';
import { flipFirstByte } from './support/roundtrip';
import { withMountSandbox } from './support/mounts';
import { createSandbox, type Sandbox } from './support/sandbox';
import { collectGitState, compareGitStates, compareTrees, walkTree, withoutPaths } from './support/state';
import { capture, expectError, expectExit, parseJson, restore, showManifest, verify, xet } from './support/xet';

const FILE_OK = ['-c', 'protocol.file.allow=always'];

/** State of one repository that a restore must reproduce, submodule view included. */
const REPO_STATE = {
  status: { args: ['status', '--porcelain=v2', '--untracked-files=all', '--ignored=matching'], sortLines: true },
  'status (human)': { args: ['status', '--short', '--branch'] },
  'submodule status': { args: ['submodule', 'status', '--recursive'], okExit: [0, 1, 128] },
  'ls-files -s': { args: ['ls-files', '-s', '-v', '-t'] },
  'diff --cached': { args: ['diff', '--cached', '--full-index'] },
  diff: { args: ['diff', '--full-index', '--ignore-submodules=all'] },
  'log --all': { args: ['log', '--format=%H %P %s', '--exclude=refs/xet/*', '--all'] },
  refs: { args: ['for-each-ref', '--format=%(refname) %(objectname)', 'refs/heads', 'refs/tags', 'refs/remotes'] },
  'rev-parse HEAD': { args: ['rev-parse', '-q', '--verify', 'HEAD'], okExit: [0, 1] },
  config: { args: ['config', '--get-regexp', '^(branch|remote|submodule)\\.'], okExit: [0, 1] },
};

function assertSameRepo(sb: Sandbox, source: string, copy: string, what: string): void {
  const problems = compareGitStates(collectGitState(sb, source, REPO_STATE), collectGitState(sb, copy, REPO_STATE));
  assert.deepEqual(problems, [], `${what}: ${copy} differs from ${source}:\n${problems.join('\n')}`);
}

/** Files of a tree without the git dirs of the repositories inside it (their bytes differ legitimately:
 * packs, index stat data), with `.git` files (submodule links) kept. */
function files(dir: string, gitDirs: string[]) {
  return withoutPaths(
    walkTree(dir),
    gitDirs.map((d) => `${d}/`),
  );
}

function sameFiles(source: string, copy: string, gitDirs: string[]): void {
  const d = compareTrees(files(source, gitDirs), files(copy, gitDirs));
  assert.deepEqual(d, [], `files differ between ${source} and ${copy}:\n${d.join('\n')}`);
}

function verifyOk(sb: Sandbox, cwd: string, snap: string, dir: string): void {
  const v = verify(sb, cwd, snap, dir);
  assert.equal(v.status, 0, `verify: ${v.stdout}`);
}

/** A library repository with two commits, to be used as a submodule's origin. */
function library(sb: Sandbox, name: string, files: Record<string, string> = { 'lib.txt': 'lib 1\n' }): Repo {
  const lib = initRepo(sb, name);
  lib.commit(`${name} 1`, files);
  lib.commit(`${name} 2`, { 'CHANGES.md': `${name} two\n` });
  return lib;
}

test('an uninitialised submodule: gitlink in the index, empty directory, .gitmodules as a file', () => {
  const sb = createSandbox();
  try {
    const lib = library(sb, 'lib');
    const up = initRepo(sb, 'upstream');
    up.commit('init', { 'README.md': 'top\n' });
    up.git(...FILE_OK, 'submodule', 'add', '-q', lib.dir, 'libs/lib');
    up.git('commit', '-q', '-m', 'add submodule');
    // A plain clone leaves the submodule uninitialised, as most clones of git.git are.
    const src = new Repo(sb, sb.path('src'));
    up.git('clone', '-q', up.dir, src.dir);
    src.write('README.md', 'edited\n');
    assert.match(src.git('submodule', 'status'), /^-[0-9a-f]{40} libs\/lib$/m);
    assert.deepEqual(fs.readdirSync(src.p('libs/lib')), []);

    const snap = capture(sb, src.dir);
    const m = showManifest(sb, src.dir, snap);
    assert.equal(m.schema, 'xet.snapshot/v1', 'nothing a v1 reader would misread');
    assert.equal(m.repositories, undefined);
    assert.deepEqual(m.emptyDirs, ['libs/lib']);
    assert.match(src.git('ls-tree', `${snap}:index/libs`), /^160000 commit [0-9a-f]{40}\tlib$/m);

    const copy = sb.path('copy');
    restore(sb, src.dir, snap, copy);
    assertSameRepo(sb, src.dir, copy, 'superproject');
    assert.match(new Repo(sb, copy).git('submodule', 'status'), /^-[0-9a-f]{40} libs\/lib$/m);
    sameFiles(src.dir, copy, []);
    verifyOk(sb, src.dir, snap, copy);

    // A gitlink with no directory at all (update-index --cacheinfo) is captured too.
    const bare = initRepo(sb, 'bare-link');
    const head = bare.commit('init', { 'a.txt': 'a\n' });
    bare.git('update-index', '--add', '--cacheinfo', `160000,${head},sub`);
    const snap2 = capture(sb, bare.dir);
    const copy2 = sb.path('copy2');
    restore(sb, bare.dir, snap2, copy2);
    assertSameRepo(sb, bare.dir, copy2, 'gitlink without a directory');
    verifyOk(sb, bare.dir, snap2, copy2);
  } finally {
    sb.cleanup();
  }
});

test('an initialised submodule (and its own submodule) round-trips with edits, staged and ignored files, unpushed commits', () => {
  const sb = createSandbox();
  try {
    const deep = library(sb, 'deep', { 'deep.txt': 'deep 1\n' });
    const lib = library(sb, 'lib', { 'lib.txt': 'lib 1\n', '.gitignore': 'build/\n' });
    lib.git(...FILE_OK, 'submodule', 'add', '-q', deep.dir, 'vendor/deep');
    lib.git('commit', '-q', '-m', 'lib: add deep');
    const src = initRepo(sb, 'src');
    src.commit('init', { 'README.md': 'top\n', '.gitignore': '*.log\n' });
    src.git(...FILE_OK, 'submodule', 'add', '-q', lib.dir, 'libs/lib');
    src.git(...FILE_OK, 'submodule', 'update', '-q', '--init', '--recursive');
    src.git('commit', '-q', '-m', 'add submodule');
    const sub = new Repo(sb, src.p('libs/lib'));
    // A commit in the submodule that its origin never saw, recorded in the superproject.
    const unpushed = sub.commit('lib: local work', { 'lib.txt': 'lib local\n' });
    src.git('add', 'libs/lib');
    src.git('commit', '-q', '-m', 'bump lib');
    sub.write('lib.txt', 'lib dirty\n'); // unstaged
    sub.write('staged.txt', 'staged\n');
    sub.git('add', 'staged.txt'); // staged
    sub.write('untracked.txt', 'u\n');
    sub.write('build/out.bin', 'ignored\n');
    new Repo(sb, src.p('libs/lib/vendor/deep')).write('deep.txt', 'deep dirty\n');
    src.write('top.log', 'ignored at the top\n');
    assert.notEqual(lib.gitTry('cat-file', '-e', unpushed).status, 0, 'fixture: the origin lacks the commit');
    assert.match(src.git('submodule', 'status'), /^ [0-9a-f]{40} libs\/lib/m, 'no "+": gitlink = HEAD');

    const out = xet(sb, src.dir, ['capture', '--json']);
    expectExit(out, 0);
    const res = parseJson(out);
    const snap = res.snapshot as string;
    assert.deepEqual(
      res.repositories.map((r: { path: string; kind: string }) => `${r.kind} ${r.path}`),
      ['submodule libs/lib'],
    );
    const m = showManifest(sb, src.dir, snap);
    assert.equal(m.schema, 'xet.snapshot/v2', 'inner repositories: an older reader must refuse');
    assert.equal(m.repositories.length, 1);
    assert.equal(m.repositories[0].gitDir, 'modules/libs/lib');
    const inner = m.repositories[0].snapshot as string;
    assert.match(src.git('rev-list', '--parents', '-n1', snap), new RegExp(inner), 'inner snapshot is a parent');
    assert.equal(src.git('ls-tree', '-r', '--name-only', `${snap}:files`).includes('libs/lib/'), false);
    const innerM = JSON.parse(src.git('cat-file', 'blob', `${inner}:manifest.json`));
    assert.equal(innerM.repositories[0].path, 'vendor/deep', 'the submodule of the submodule');
    assert.equal(innerM.repositories[0].gitDir, 'modules/vendor/deep');

    // Restored from another repository (fetch): everything travels through the snapshot's parents.
    const copy = sb.path('copy');
    restore(sb, sb.root, snap, copy, ['--from', src.dir]);
    // restore --from names its source as the remote xet-origin (it describes the copy, not the
    // captured state, and verify ignores it); the captured config is the rest.
    assert.equal(new Repo(sb, copy).git('config', 'remote.xet-origin.url').trim(), src.dir);
    new Repo(sb, copy).git('remote', 'remove', 'xet-origin');
    sameFiles(src.dir, copy, []);
    assertSameRepo(sb, src.dir, copy, 'superproject');
    assertSameRepo(sb, src.p('libs/lib'), path.join(copy, 'libs/lib'), 'submodule');
    assertSameRepo(sb, src.p('libs/lib/vendor/deep'), path.join(copy, 'libs/lib/vendor/deep'), 'nested submodule');
    assert.equal(fs.readFileSync(path.join(copy, 'libs/lib/.git'), 'utf8'), 'gitdir: ../../.git/modules/libs/lib\n');
    assert.ok(fs.statSync(path.join(copy, '.git/modules/libs/lib/modules/vendor/deep')).isDirectory());
    const cs = new Repo(sb, path.join(copy, 'libs/lib'));
    assert.equal(cs.git('rev-parse', 'HEAD').trim(), unpushed);
    assert.equal(cs.git('config', 'core.worktree').trim(), '../../../../libs/lib');
    assert.equal(new Repo(sb, copy).git('fsck', '--no-progress').trim(), '');
    assert.equal(cs.gitTry('fsck', '--no-progress').status, 0);

    verifyOk(sb, src.dir, snap, copy);
    // The inner repositories' stat caches were seeded: their first capture reads only what changed.
    assert.equal(fs.existsSync(path.join(copy, '.git/modules/libs/lib/xet-files.index')), false);
    assert.equal(fs.readdirSync(path.join(copy, '.git/modules/libs/lib/xet/cache')).length, 1);
    assert.equal(fs.readdirSync(path.join(copy, '.git/modules/libs/lib/modules/vendor/deep/xet/cache')).length, 1);
    const again = parseJson(xet(sb, copy, ['capture', '--json']));
    assert.deepEqual(
      again.repositories.map((r: { path: string; files: number }) => `${r.path} ${r.files}`),
      res.repositories.map((r: { path: string; files: number }) => `${r.path} ${r.files}`),
    );
    verifyOk(sb, copy, again.snapshot, copy);
    const undo = flipFirstByte(path.join(copy, 'libs/lib/untracked.txt'));
    const v = verify(sb, src.dir, snap, copy);
    assert.equal(v.status, 1, v.stdout);
    assert.deepEqual(
      parseJson(v).differences.map((d: { kind: string; path: string }) => `${d.kind} ${d.path}`),
      ['file-modified libs/lib/untracked.txt'],
    );
    undo();
    fs.writeFileSync(path.join(copy, 'libs/lib/vendor/deep/new.txt'), 'n\n');
    const v2 = verify(sb, src.dir, snap, copy);
    assert.match(v2.stdout, /libs\/lib\/vendor\/deep\/new\.txt/);

    // git itself works in the copy: a commit in the submodule, seen by the superproject.
    cs.git('commit', '-q', '-am', 'in the copy');
    assert.match(new Repo(sb, copy).git('submodule', 'status'), /^\+[0-9a-f]{40} libs\/lib/m);

    // Forks share one git dir, so a snapshot with inner repositories is refused by name.
    expectError(xet(sb, src.dir, ['fork', snap, sb.path('f'), '--mode', 'copy', '--json']), 'SUBMODULE_PRESENT');
  } finally {
    sb.cleanup();
  }
});

test('a nested clone (not tracked here) is captured recursively; an exclude pattern still leaves it out', () => {
  const sb = createSandbox();
  try {
    const lib = library(sb, 'lib');
    const src = initRepo(sb, 'src');
    src.commit('init', { 'README.md': 'top\n' });
    const dep = new Repo(sb, src.p('deps/lib'));
    src.git('clone', '-q', lib.dir, dep.dir);
    const local = dep.commit('dep: local fix', { 'lib.txt': 'fixed\n' });
    dep.write('scratch.txt', 'untracked in the clone\n');
    const fixture = new Repo(sb, src.p('test/fixtures/repo'));
    fs.mkdirSync(fixture.dir, { recursive: true });
    fixture.git('init', '-q'); // an unborn fixture repository
    fixture.write('x.txt', 'x\n');
    fixture.git('add', 'x.txt');

    const snap = capture(sb, src.dir);
    const m = showManifest(sb, src.dir, snap);
    assert.equal(m.schema, 'xet.snapshot/v2');
    assert.deepEqual(
      m.repositories.map((r: { path: string; kind: string; gitDir: string | null }) => [r.path, r.kind, r.gitDir]),
      [
        ['deps/lib', 'nested', null],
        ['test/fixtures/repo', 'nested', null],
      ],
    );
    assert.deepEqual(m.skipped, []);
    const copy = sb.path('copy');
    restore(sb, src.dir, snap, copy);
    sameFiles(src.dir, copy, ['deps/lib/.git', 'test/fixtures/repo/.git']);
    assertSameRepo(sb, src.dir, copy, 'outer');
    assertSameRepo(sb, dep.dir, path.join(copy, 'deps/lib'), 'nested clone');
    assertSameRepo(sb, fixture.dir, path.join(copy, 'test/fixtures/repo'), 'unborn fixture');
    assert.equal(new Repo(sb, path.join(copy, 'deps/lib')).git('rev-parse', 'HEAD').trim(), local);
    assert.ok(fs.statSync(path.join(copy, 'deps/lib/.git')).isDirectory());
    verifyOk(sb, src.dir, snap, copy);
    // diff looks inside inner repositories too, against the worktree and between snapshots.
    const d0 = xet(sb, src.dir, ['diff', snap, '--json']);
    expectExit(d0, 0);
    assert.equal(parseJson(d0).identical, true, d0.stdout);
    dep.write('lib.txt', 'edited after the capture\n');
    const d1 = parseJson(xet(sb, src.dir, ['diff', snap, '--json']));
    assert.deepEqual(
      d1.changes.map((c: { kind: string; path: string }) => `${c.kind} ${c.path}`),
      ['file-modified deps/lib/lib.txt'],
    );
    const later = capture(sb, src.dir);
    const d2 = parseJson(xet(sb, src.dir, ['diff', snap, later, '--json']));
    assert.deepEqual(
      d2.changes.map((c: { kind: string; path: string }) => `${c.kind} ${c.path}`),
      ['file-modified deps/lib/lib.txt'],
    );
    dep.write('lib.txt', 'fixed\n');
    // A repository the snapshot does not have is a difference.
    new Repo(sb, path.join(copy, 'extra')).write('e.txt', 'e\n');
    new Repo(sb, path.join(copy, 'extra')).git('init', '-q');
    const v = verify(sb, src.dir, snap, copy);
    assert.equal(v.status, 1);
    assert.ok(
      parseJson(v).differences.some((d: { kind: string; path: string }) => d.kind === 'repository-extra'),
      v.stdout,
    );

    // Left out on purpose: --exclude, and xet.capture.exclude.
    const ex = xet(sb, src.dir, ['capture', '--exclude', 'deps/', '--json']);
    expectExit(ex, 0);
    const exSnap = parseJson(ex).snapshot as string;
    const em = showManifest(sb, src.dir, exSnap);
    assert.deepEqual(
      em.repositories.map((r: { path: string }) => r.path),
      ['test/fixtures/repo'],
    );
    assert.equal(em.policy.excludedByPattern, 1);
    const copy2 = sb.path('copy2');
    restore(sb, src.dir, exSnap, copy2);
    assert.equal(fs.existsSync(path.join(copy2, 'deps')), false);
    src.git('config', 'xet.capture.exclude', 'test/fixtures/repo');
    const em3 = showManifest(sb, src.dir, capture(sb, src.dir, ['--exclude', 'deps/']));
    assert.equal(em3.repositories, undefined);
    assert.equal(em3.schema, 'xet.snapshot/v1');
  } finally {
    sb.cleanup();
  }
});

test('restore refuses inner repositories that escape, collide or are not ancestors', () => {
  const sb = createSandbox();
  try {
    const src = initRepo(sb, 'src');
    src.commit('init', { 'a.txt': 'a\n', 'dir/b.txt': 'b\n' });
    const n = new Repo(sb, src.p('nested'));
    fs.mkdirSync(n.dir);
    n.git('init', '-q');
    n.commit('n', { 'n.txt': 'n\n' });
    const snap = capture(sb, src.dir);
    const m = JSON.parse(src.git('cat-file', 'blob', `${snap}:manifest.json`));
    const inner = m.repositories[0].snapshot as string;
    const other = capture(sb, src.dir, ['-m', 'other']); // a snapshot that is not a parent of `snap`
    const craft = (edit: (r: Record<string, unknown>) => void): string => {
      const mm = JSON.parse(JSON.stringify(m));
      edit(mm.repositories[0]);
      const blob = src.gitInput(JSON.stringify(mm), 'hash-object', '-w', '--stdin').trim();
      const tree = src
        .gitInput(
          `040000 tree ${src.git('rev-parse', `${snap}:files`).trim()}\tfiles\n` +
            `040000 tree ${src.git('rev-parse', `${snap}:index`).trim()}\tindex\n100644 blob ${blob}\tmanifest.json\n`,
          'mktree',
        )
        .trim();
      return src.git('commit-tree', tree, '-p', inner, '-m', 'crafted').trim();
    };
    const cases: [string, (r: Record<string, unknown>) => void, string][] = [
      ['dot-dot path', (r) => (r.path = '../outside'), 'PATH_ESCAPE'],
      ['a .git component', (r) => (r.path = 'x/.git'), 'PATH_ESCAPE'],
      ['onto a file', (r) => (r.path = 'a.txt'), 'PATH_CONFLICT'],
      ['above a file', (r) => (r.path = 'dir'), 'PATH_CONFLICT'],
      ['git dir escaping', (r) => ((r.kind = 'submodule'), (r.gitDir = 'modules/../../x')), 'PATH_ESCAPE'],
      ['git dir outside modules/', (r) => ((r.kind = 'submodule'), (r.gitDir = 'hooks')), 'SNAPSHOT_INVALID'],
      ['not an ancestor', (r) => (r.snapshot = other), 'SNAPSHOT_INVALID'],
    ];
    for (const [what, edit, code] of cases) {
      const bad = craft(edit);
      const target = sb.path(`t-${what.replace(/\W+/g, '-')}`);
      const r = xet(sb, src.dir, ['restore', bad, target, '--json']);
      expectError(r, code);
      assert.equal(fs.existsSync(target), false, `${what}: nothing written`);
      assert.equal(fs.existsSync(sb.path('outside')), false, `${what}: nothing outside`);
    }
  } finally {
    sb.cleanup();
  }
});

test('names git refuses to store (.GIT, .Git, a .gitmodules symlink) are skipped by name, never counted', () => {
  const sb = createSandbox();
  try {
    const src = initRepo(sb, 'src');
    src.commit('init', { 'a.txt': 'a\n' });
    src.write('sub/.GIT/config', 'not a git dir\n');
    src.write('deep/x/.Git', 'a file named .Git\n');
    src.symlink('../a.txt', 'lib/.gitmodules');
    src.write('kept.txt', 'k\n');
    const out = xet(sb, src.dir, ['capture', '--json']);
    expectExit(out, 0);
    const r = parseJson(out);
    assert.deepEqual(
      r.skipped.map((s: { path: string; reason: string }) => `${s.path} ${s.reason}`),
      ['deep/x/.Git git-refuses-path', 'lib/.gitmodules git-refuses-path', 'sub/.GIT git-refuses-path'],
    );
    const inTree = src.git('ls-tree', '-r', '--name-only', `${r.snapshot}:files`).trim().split('\n');
    assert.deepEqual(inTree, ['a.txt', 'kept.txt']);
    assert.equal(r.files, inTree.length);
    assert.equal(r.tracked + r.untracked + r.ignored, inTree.length, 'counted = stored');
    const m = showManifest(sb, src.dir, r.snapshot);
    assert.equal(m.schema, 'xet.snapshot/v2', 'a v1 reader does not know the reason');
    // verify on the source names them: they are on disk and not in the snapshot.
    const v = verify(sb, src.dir, r.snapshot, src.dir);
    assert.equal(v.status, 1, v.stdout);
    assert.deepEqual(
      parseJson(v).differences.map((d: { kind: string; path: string }) => `${d.kind} ${d.path}`),
      ['file-unstorable deep/x/.Git', 'file-unstorable lib/.gitmodules', 'file-unstorable sub/.GIT'],
    );
  } finally {
    sb.cleanup();
  }
});

test('discard of a copy fork keeps a nested repository made in it, and refuses to lose a .GIT directory', () => {
  const sb = createSandbox();
  try {
    const src = initRepo(sb, 'src');
    src.commit('init', { 'a.txt': 'a\n' });
    const snap = capture(sb, src.dir);
    const f = sb.path('fork');
    expectExit(xet(sb, src.dir, ['fork', snap, f, '--mode', 'copy', '--json']), 0);
    // An agent clones or inits a repository inside its fork and commits there.
    const inner = new Repo(sb, path.join(f, 'work'));
    fs.mkdirSync(inner.dir);
    inner.git('init', '-q');
    const commit = inner.commit('agent work', { 'result.txt': 'precious\n' });
    const d = xet(sb, src.dir, ['discard', f, '--json']);
    expectExit(d, 0);
    const kept = parseJson(d).snapshot as string;
    assert.match(kept ?? '', /^[0-9a-f]{40}$/, `the fork was dirty: ${d.stdout}`);
    assert.equal(fs.existsSync(f), false);
    const copy = sb.path('copy');
    restore(sb, src.dir, kept, copy);
    const c = new Repo(sb, path.join(copy, 'work'));
    assert.equal(c.git('rev-parse', 'HEAD').trim(), commit);
    assert.equal(c.read('result.txt').toString(), 'precious\n');

    // A directory git cannot store: the capture names it, so the discard refuses and the fork stays.
    const f2 = sb.path('fork2');
    expectExit(xet(sb, src.dir, ['fork', snap, f2, '--mode', 'copy', '--json']), 0);
    fs.mkdirSync(path.join(f2, 'notes', '.GIT'), { recursive: true });
    fs.writeFileSync(path.join(f2, 'notes', '.GIT', 'todo'), 'keep me\n');
    const d2 = xet(sb, src.dir, ['discard', f2, '--json']);
    const err = expectError(d2, 'WORK_NOT_KEPT');
    assert.deepEqual(err.details.paths, ['notes/.GIT']);
    assert.equal(fs.readFileSync(path.join(f2, 'notes', '.GIT', 'todo'), 'utf8'), 'keep me\n');
  } finally {
    sb.cleanup();
  }
});

test("an inner repository's own refusal fails the capture and names the repository", () => {
  const sb = createSandbox();
  try {
    const src = initRepo(sb, 'src');
    src.commit('init', { 'a.txt': 'a\n' });
    const n = new Repo(sb, src.p('tools/nested'));
    fs.mkdirSync(n.dir, { recursive: true });
    n.git('init', '-q');
    n.commit('n', { 'n.txt': 'n\n' });
    fs.writeFileSync(Buffer.concat([Buffer.from(`${n.dir}/bad-`), Buffer.from([0xff])]), 'x');
    const before = src.git('for-each-ref', 'refs/xet');
    const err = expectError(xet(sb, src.dir, ['capture', '--json']), 'PATH_ENCODING');
    assert.equal(err.details.repository, 'tools/nested');
    assert.match(err.message, /tools\/nested/);
    assert.equal(src.git('for-each-ref', 'refs/xet'), before, 'no outer snapshot');
  } finally {
    sb.cleanup();
  }
});

test('a shallow nested clone is named in skipped, and the outer repository stays whole', () => {
  const sb = createSandbox();
  try {
    const lib = library(sb, 'lib');
    const src = initRepo(sb, 'src');
    src.commit('init', { 'a.txt': 'a\n' });
    src.git('clone', '-q', '--depth', '1', `file://${lib.dir}`, src.p('shallow'));
    assert.equal(new Repo(sb, src.p('shallow')).git('rev-parse', '--is-shallow-repository').trim(), 'true');
    const out = xet(sb, src.dir, ['capture', '--json']);
    expectExit(out, 0);
    const r = parseJson(out);
    assert.deepEqual(r.skipped, [{ path: 'shallow', reason: 'nested-repository' }]);
    assert.deepEqual(r.repositories, []);
    // Its truncated history was not fetched into the outer repository (dangling parents).
    assert.equal(src.gitTry('fsck', '--no-progress', '--no-dangling').status, 0);
  } finally {
    sb.cleanup();
  }
});

const notRoot = process.getuid?.() === 0 ? false : 'overlay forks need root for mounts';

test(
  'discard of an overlay fork keeps a nested repository, and refuses to lose a .Git directory',
  { skip: notRoot },
  () =>
    withMountSandbox((sb) => {
      const src = initRepo(sb, 'src');
      src.commit('init', { 'a.txt': 'a\n' });
      const snap = capture(sb, src.dir);
      const f = sb.path('ov');
      expectExit(xet(sb, src.dir, ['fork', snap, f, '--mode', 'overlay', '--json']), 0);
      const inner = new Repo(sb, path.join(f, 'work'));
      fs.mkdirSync(inner.dir);
      inner.git('init', '-q');
      const commit = inner.commit('agent work', { 'result.txt': 'precious\n' });
      fs.mkdirSync(path.join(f, 'x', '.Git'), { recursive: true });
      fs.writeFileSync(path.join(f, 'x', '.Git', 'todo'), 'keep\n');
      const err = expectError(xet(sb, src.dir, ['discard', f, '--json']), 'WORK_NOT_KEPT');
      assert.deepEqual(err.details.paths, ['x/.Git']);
      fs.rmSync(path.join(f, 'x'), { recursive: true });
      const d = xet(sb, src.dir, ['discard', f, '--json']);
      expectExit(d, 0);
      const kept = parseJson(d).snapshot as string;
      const copy = sb.path('copy');
      restore(sb, src.dir, kept, copy);
      assert.equal(new Repo(sb, path.join(copy, 'work')).git('rev-parse', 'HEAD').trim(), commit);
    }),
);

test('a superproject with two submodules made from npm packages, cloned with --recurse-submodules', () => {
  const sb = createSandbox();
  try {
    const modules = path.resolve(__dirname, '..', '..', 'node_modules');
    const origins: Repo[] = [];
    for (const pkg of ['commander', 'ignore']) {
      const o = initRepo(sb, `origin-${pkg}`);
      fs.cpSync(path.join(modules, pkg), o.dir, { recursive: true });
      o.commit(`import ${pkg}`, { '.gitignore': 'node_modules/\nbuild/\n' });
      origins.push(o);
    }
    const up = initRepo(sb, 'app-origin');
    up.commit('init', { 'package.json': '{"name":"app","private":true}\n' });
    for (const o of origins) up.git(...FILE_OK, 'submodule', 'add', '-q', o.dir, `deps/${path.basename(o.dir)}`);
    up.git('commit', '-q', '-m', 'submodules');
    const src = new Repo(sb, sb.path('app'));
    up.git(...FILE_OK, 'clone', '-q', '--recurse-submodules', up.dir, src.dir);
    // Work in progress in both submodules and the superproject, plus build output.
    const cmd = new Repo(sb, src.p('deps/origin-commander'));
    cmd.write('index.js', `${cmd.read('index.js').toString()}\n// patched\n`);
    cmd.write('build/out.o', Buffer.alloc(64 * 1024, 7));
    const ign = new Repo(sb, src.p('deps/origin-ignore'));
    ign.commit('local fix', { 'FIX.md': 'fix\n' });
    src.write('notes.txt', 'wip\n');
    const snap = capture(sb, src.dir);
    const copy = sb.path('copy');
    restore(sb, src.dir, snap, copy);
    sameFiles(src.dir, copy, []);
    assertSameRepo(sb, src.dir, copy, 'superproject');
    for (const d of ['deps/origin-commander', 'deps/origin-ignore']) {
      assertSameRepo(sb, src.p(d), path.join(copy, d), d);
    }
    verifyOk(sb, src.dir, snap, copy);
    // The copy continues without setup: git submodule commands work on it.
    assert.match(new Repo(sb, copy).git('submodule', 'status'), /^\+[0-9a-f]{40} deps\/origin-ignore/m);
    new Repo(sb, copy).git(...FILE_OK, 'submodule', 'update', '-q', '--init');
    assert.match(new Repo(sb, copy).git('submodule', 'status'), /^ [0-9a-f]{40} deps\/origin-ignore/m);
  } finally {
    sb.cleanup();
  }
});

test('a nested repository stopped in a merge conflict comes back in the conflict, and the merge continues there', () => {
  const sb = createSandbox();
  try {
    const src = initRepo(sb, 'src');
    src.commit('init', { 'README.md': 'top\n' });
    const dep = initRepo(sb, 'src/deps/conflicted');
    dep.commit('base', { 'f.txt': 'base\n' });
    dep.git('checkout', '-q', '-b', 'other');
    dep.commit('theirs', { 'f.txt': 'theirs\n' });
    dep.git('checkout', '-q', 'main');
    dep.commit('ours', { 'f.txt': 'ours\n' });
    assert.notEqual(dep.gitTry('merge', 'other').status, 0, 'fixture: the merge must conflict');
    assert.notEqual(dep.git('ls-files', '-u'), '');

    const snap = capture(sb, src.dir);
    const copy = sb.path('copy');
    restore(sb, src.dir, snap, copy);
    const inner = new Repo(sb, path.join(copy, 'deps/conflicted'));
    assertSameRepo(sb, dep.dir, inner.dir, 'nested repository in a merge');
    assert.equal(inner.git('ls-files', '-u'), dep.git('ls-files', '-u'));
    assert.ok(fs.existsSync(inner.gitPath('MERGE_HEAD')), 'MERGE_HEAD is restored inside');
    verifyOk(sb, src.dir, snap, copy);
    // Resolving and continuing in the copy gives the commit the source would make.
    for (const r of [dep, inner]) {
      r.write('f.txt', 'resolved\n');
      r.git('add', 'f.txt');
      r.git('-c', 'core.editor=true', 'merge', '--continue');
    }
    assert.equal(inner.git('rev-parse', 'HEAD^{tree}'), dep.git('rev-parse', 'HEAD^{tree}'));
    assert.equal(inner.git('rev-parse', 'HEAD^1', 'HEAD^2'), dep.git('rev-parse', 'HEAD^1', 'HEAD^2'));
  } finally {
    sb.cleanup();
  }
});
