// End-to-end fidelity: build a real repository with git, capture it, restore it into a new
// directory, and require the copy to be indistinguishable from the source.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { buildIgnoredFixture, buildRichFixture, fileSha, ignoredEntries, treeFingerprint } from './support/fixtures';
import { git, gitTry, initRepo, pseudoRandomBytes, Repo } from './support/git';
import { assertVerifyReports, roundTrip } from './support/roundtrip';
import { withSandbox } from './support/sandbox';
import { collectGitState, compareGitStates, sha256 } from './support/state';
import { capture, describeRun, parseJson, restore, showManifest, verify } from './support/xet';

test('unborn branch with staged and untracked files', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src', ['-b', 'trunk']);
    r.write('staged.txt', 'staged\n');
    r.write('dir/staged2.txt', 'staged two\n');
    r.git('add', 'staged.txt', 'dir/staged2.txt');
    r.write('staged.txt', 'staged, then edited\n');
    r.write('untracked.txt', 'untracked\n');
    r.write('dir/sub/untracked2.txt', 'untracked two\n');
    assert.notEqual(r.gitTry('rev-parse', '-q', '--verify', 'HEAD').status, 0, 'fixture: HEAD must be unborn');
    const { copy } = roundTrip(sb, r.dir);
    assert.equal(git(sb, copy, ['symbolic-ref', 'HEAD']).trim(), 'refs/heads/trunk');
    assert.notEqual(gitTry(sb, copy, ['rev-parse', '-q', '--verify', 'HEAD']).status, 0, 'copy HEAD must be unborn');
  }));

test('detached HEAD (with a commit reachable only from HEAD)', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('c1', { 'a.txt': '1\n' });
    const c2 = r.commit('c2', { 'a.txt': '2\n' });
    r.commit('c3', { 'a.txt': '3\n', 'b.txt': 'b\n' });
    r.git('checkout', '-q', '--detach', c2);
    const detachedOnly = r.commit('commit reachable only from the detached HEAD', { 'd.txt': 'd\n' });
    r.write('a.txt', 'edited on detached head\n');
    r.write('u.txt', 'u\n');
    const { copy } = roundTrip(sb, r.dir);
    assert.equal(gitTry(sb, copy, ['symbolic-ref', '-q', 'HEAD']).status, 1, 'copy HEAD must be detached');
    assert.equal(git(sb, copy, ['rev-parse', 'HEAD']).trim(), detachedOnly);
    assert.equal(git(sb, copy, ['rev-parse', 'HEAD~1']).trim(), c2);
    assert.equal(git(sb, copy, ['rev-parse', 'main']).trim(), git(sb, r.dir, ['rev-parse', 'main']).trim());
  }));

test('unpushed commits on HEAD and on other local branches; copy is self-contained', async (t) =>
  withSandbox(async (sb) => {
    const r = initRepo(sb, 'src');
    r.commit('c1', { 'a.txt': '1\n' });
    r.git('branch', 'topic');
    r.commit('c2', { 'a.txt': '2\n' });
    r.git('checkout', '-q', '-b', 'feature');
    r.commit('f1', { 'f.txt': 'f1\n' });
    r.commit('f2', { 'f.txt': 'f2\n', 'g.txt': 'g\n' });
    r.git('checkout', '-q', 'main');
    r.git('pack-refs', '--all'); // some refs packed, later ones loose
    r.commit('c3', { 'a.txt': '3\n' });
    r.git('branch', 'nested/deep/name', 'feature~1');
    r.write('a.txt', 'dirty\n');
    const res = roundTrip(sb, r.dir);
    const revs = (dir: string) => git(sb, dir, ['rev-list', '--branches', '--tags', '--date-order']);
    const logOf = (dir: string) =>
      git(sb, dir, ['log', '--branches', '--format=%H %T %P %an <%ae> %ad %cn <%ce> %cd %s', '--date=raw']);
    const expectedRevs = revs(r.dir);
    const expectedLog = logOf(r.dir);
    assert.equal(revs(res.copy), expectedRevs);
    assert.equal(logOf(res.copy), expectedLog);
    await t.test('copy works after the source is deleted (git fsck --full)', () => {
      fs.rmSync(r.dir, { recursive: true, force: true });
      const fsck = gitTry(sb, res.copy, ['fsck', '--full', '--no-dangling']);
      assert.equal(fsck.status, 0, `git fsck in copy failed: ${fsck.stderr.toString()}`);
      assert.equal(revs(res.copy), expectedRevs);
      assert.equal(logOf(res.copy), expectedLog);
      assert.equal(git(sb, res.copy, ['status', '--porcelain']).trim(), 'M a.txt');
    });
  }));

test('lightweight and annotated tags (nested, on a blob, on an otherwise unreachable commit, packed)', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('c1', { 'a.txt': '1\n' });
    r.git('tag', 'v0.1');
    r.commit('c2', { 'a.txt': '2\n' });
    r.git('tag', '-a', 'v1.0', '-m', 'Release 1.0\n\nWith a body.');
    r.git('tag', '-a', 'release/2', '-m', 'nested name', 'HEAD~1');
    r.git('tag', '-a', 'tag-of-tag', '-m', 'points at a tag', 'v1.0');
    r.git('tag', 'lw/blob', r.git('rev-parse', 'HEAD:a.txt').trim());
    r.git('checkout', '-q', '-b', 'doomed');
    r.commit('only reachable from a tag once the branch is gone', { 'doomed.txt': 'x\n' });
    r.git('tag', '-a', 'orphan-tag', '-m', 'tag on a commit of a deleted branch');
    r.git('checkout', '-q', 'main');
    r.git('branch', '-q', '-D', 'doomed');
    r.git('pack-refs', '--all');
    r.write('a.txt', 'dirty\n');
    const { copy } = roundTrip(sb, r.dir);
    const tagsOf = (dir: string) =>
      git(sb, dir, [
        'for-each-ref',
        '--format=%(refname) %(objectname) %(objecttype) %(*objectname) %(*objecttype) %(contents)',
        'refs/tags',
      ]);
    assert.equal(tagsOf(copy), tagsOf(r.dir));
    assert.equal(git(sb, copy, ['cat-file', '-p', 'v1.0']), git(sb, r.dir, ['cat-file', '-p', 'v1.0']));
  }));

test('refs/stash with two entries (stash list preserved)', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('c1', { 'a.txt': 'a\n', 'b.txt': 'b\n' });
    r.write('a.txt', 'a staged\n');
    r.git('add', 'a.txt');
    r.write('a.txt', 'a staged then edited\n');
    r.git('stash', 'push', '-q', '-m', 'first stash');
    r.write('b.txt', 'b edited\n');
    r.write('untracked-in-stash.txt', 'u\n');
    r.git('stash', 'push', '-q', '--include-untracked', '-m', 'second stash');
    r.write('a.txt', 'worktree after stashing\n');
    r.write('c.txt', 'c\n');
    assert.equal(r.git('stash', 'list').trim().split('\n').length, 2, 'fixture: two stash entries');
    const { copy } = roundTrip(sb, r.dir);
    const stashOf = (dir: string) => ({
      list: git(sb, dir, ['stash', 'list']),
      fmt: git(sb, dir, ['stash', 'list', '--format=%gd %H %gs']),
      show0: git(sb, dir, ['stash', 'show', '-p', '--binary', '--full-index', 'stash@{0}']),
      show1: git(sb, dir, ['stash', 'show', '-p', '--binary', '--full-index', 'stash@{1}']),
      untracked0: git(sb, dir, ['show', '--format=%H', '--name-status', 'stash@{0}^3']),
    });
    assert.deepEqual(stashOf(copy), stashOf(r.dir));
  }));

test('upstream config (branch.<name>.remote/merge with a remote)', async (t) =>
  withSandbox(async (sb) => {
    const remote = sb.path('remote.git');
    git(sb, sb.root, ['init', '-q', '--bare', remote]);
    const r = initRepo(sb, 'src');
    r.commit('c1', { 'a.txt': '1\n' });
    r.git('remote', 'add', 'origin', remote);
    r.git('push', '-q', '-u', 'origin', 'main');
    r.git('checkout', '-q', '-b', 'feature');
    r.commit('f1', { 'f.txt': 'f\n' });
    r.git('push', '-q', '-u', 'origin', 'feature');
    r.commit('f2 unpushed', { 'f.txt': 'f2\n' });
    r.git('config', 'branch.feature.rebase', 'true');
    r.git('checkout', '-q', 'main');
    r.commit('c2 unpushed', { 'a.txt': '2\n' });
    r.git('branch', '--track', 'tracks-main', 'origin/main');
    assert.match(r.git('config', '--get-regexp', '^branch\\.'), /branch\.main\.remote origin/);
    const { copy } = roundTrip(sb, r.dir);
    assert.equal(git(sb, copy, ['config', 'branch.main.remote']).trim(), 'origin');
    assert.equal(git(sb, copy, ['config', 'branch.main.merge']).trim(), 'refs/heads/main');
    await t.test('remote config, remote-tracking refs and ahead/behind are preserved', () => {
      const cmds = {
        "config --get-regexp '^remote\\.'": { args: ['config', '--get-regexp', '^remote\\.'] },
        'for-each-ref refs/remotes': { args: ['for-each-ref', 'refs/remotes'] },
        'rev-list --left-right --count main@{u}...main': {
          args: ['rev-list', '--left-right', '--count', 'main@{u}...main'],
        },
        'status --porcelain=v2 --branch': { args: ['status', '--porcelain=v2', '--branch'] },
      };
      const problems = compareGitStates(collectGitState(sb, r.dir, cmds), collectGitState(sb, copy, cmds));
      assert.deepEqual(problems, [], problems.join('\n'));
    });
  }));

test('staged new, modified, deleted and renamed files', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('c1', {
      'mod.txt': 'original\n',
      'del.txt': 'to delete\n',
      'old-name.txt': 'renamed content that is long enough to be detected as a rename\n'.repeat(3),
      'cached-del.txt': 'removed from index only\n',
      'dir/nested.txt': 'nested\n',
    });
    r.write('new.txt', 'brand new\n');
    r.write('dir/new-nested.txt', 'new nested\n');
    r.git('add', 'new.txt', 'dir/new-nested.txt');
    r.write('mod.txt', 'modified and staged\n');
    r.git('add', 'mod.txt');
    r.git('rm', '-q', 'del.txt');
    r.git('mv', 'old-name.txt', 'new-name.txt');
    r.git('rm', '-q', '--cached', 'cached-del.txt');
    r.mkdir('moved');
    r.git('mv', 'dir/nested.txt', 'moved/nested.txt');
    roundTrip(sb, r.dir);
  }));

test('staged binary change plus a different unstaged edit of the same file', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    const v1 = pseudoRandomBytes(8192, 1);
    v1[10] = 0;
    r.commit('c1', { 'blob.bin': v1, 'text.txt': 'text\n' });
    const v2 = Buffer.from(v1);
    v2.fill(0xab, 100, 300);
    r.write('blob.bin', v2);
    r.git('add', 'blob.bin');
    const v3 = Buffer.concat([v2, pseudoRandomBytes(1000, 3)]);
    v3.fill(0x00, 2000, 2100);
    r.write('blob.bin', v3);
    assert.match(r.git('status', '--porcelain'), /^MM blob\.bin$/m);
    const { copy } = roundTrip(sb, r.dir);
    assert.ok(fs.readFileSync(path.join(copy, 'blob.bin')).equals(v3));
  }));

test('intent-to-add entries (git add -N)', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('c1', { 'base.txt': 'base\n' });
    r.write('ita.txt', 'intent to add\n');
    r.write('ita-empty.txt', '');
    r.write('dir/ita-nested.txt', 'nested intent\n');
    r.git('add', '-N', 'ita.txt', 'ita-empty.txt', 'dir/ita-nested.txt');
    r.write('real-empty.txt', '');
    r.git('add', 'real-empty.txt');
    assert.match(r.git('status', '--porcelain'), /^ A ita\.txt$/m);
    const { copy } = roundTrip(sb, r.dir);
    assert.match(git(sb, copy, ['status', '--porcelain']), /^ A ita\.txt$/m, 'ita.txt must still be intent-to-add');
    assert.match(git(sb, copy, ['status', '--porcelain']), /^A {2}real-empty\.txt$/m);
    assert.equal(git(sb, copy, ['diff', '--cached', '--name-only']).trim(), 'real-empty.txt');
  }));

test('skip-worktree and assume-unchanged flags (and their hidden worktree content)', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('c1', { 'sw.txt': 'skip\n', 'au.txt': 'assume\n', 'sw-gone.txt': 'gone\n', 'plain.txt': 'p\n' });
    r.git('update-index', '--skip-worktree', 'sw.txt', 'sw-gone.txt');
    r.git('update-index', '--assume-unchanged', 'au.txt');
    r.write('sw.txt', 'edited behind skip-worktree\n');
    r.write('au.txt', 'edited behind assume-unchanged\n');
    r.rm('sw-gone.txt');
    const lsv = r.git('ls-files', '-v', '-t');
    assert.match(lsv, /^S sw\.txt$/m);
    assert.match(lsv, /^h au\.txt$/m);
    const { copy } = roundTrip(sb, r.dir, { mutate: ['sw.txt', 'au.txt', 'plain.txt'] });
    assert.equal(fs.readFileSync(path.join(copy, 'sw.txt'), 'utf8'), 'edited behind skip-worktree\n');
    assert.equal(fs.readFileSync(path.join(copy, 'au.txt'), 'utf8'), 'edited behind assume-unchanged\n');
    assert.equal(fs.existsSync(path.join(copy, 'sw-gone.txt')), false);
  }));

test('staged and unstaged mode changes (chmod +x / -x)', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.write('staged-x.sh', 'echo a\n', 0o644);
    r.write('unstaged-x.sh', 'echo b\n', 0o644);
    r.write('unstaged-minus-x.sh', 'echo c\n', 0o755);
    r.write('both.sh', 'echo d\n', 0o755);
    r.write('content-and-mode.sh', 'echo e\n', 0o644);
    r.commit('c1');
    r.chmod('staged-x.sh', 0o755);
    r.git('add', 'staged-x.sh');
    r.chmod('unstaged-x.sh', 0o755);
    r.chmod('unstaged-minus-x.sh', 0o644);
    r.git('update-index', '--chmod=-x', 'both.sh'); // staged -x, worktree still +x
    r.write('content-and-mode.sh', 'echo e2\n', 0o755);
    r.git('add', 'content-and-mode.sh');
    r.chmod('content-and-mode.sh', 0o644);
    roundTrip(sb, r.dir);
  }));

test('type changes: file -> symlink, symlink -> file, tracked file replaced by a directory', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.write('target.txt', 'target\n');
    r.write('f2l.txt', 'file that becomes a link\n');
    r.write('staged-f2l.txt', 'file that becomes a staged link\n');
    r.write('f2dir', 'file that becomes a directory\n');
    r.symlink('target.txt', 'l2f');
    r.commit('c1');
    r.rm('f2l.txt');
    r.symlink('target.txt', 'f2l.txt');
    r.rm('staged-f2l.txt');
    r.symlink('f2l.txt', 'staged-f2l.txt');
    r.git('add', 'staged-f2l.txt');
    r.rm('f2dir');
    r.write('f2dir/inner.txt', 'now inside a directory\n');
    r.rm('l2f');
    r.write('l2f', 'link became a file\n');
    const st = r.git('status', '--porcelain=v2');
    assert.match(st, /^1 \.T /m, 'fixture: unstaged typechange');
    assert.match(st, /^1 T\. /m, 'fixture: staged typechange');
    roundTrip(sb, r.dir);
  }));

test('unstaged edits and deletions', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('c1', {
      'edit.txt': 'one\ntwo\nthree\n',
      'truncate.txt': 'will be emptied\n',
      'delete.txt': 'deleted\n',
      'gone/a.txt': 'a\n',
      'gone/b/c.txt': 'c\n',
      'keep/x.txt': 'x\n',
    });
    r.write('edit.txt', 'one\n2\nthree\nfour\n');
    r.write('truncate.txt', '');
    r.rm('delete.txt');
    r.rm('gone');
    r.rm('keep/x.txt');
    r.write('keep/y.txt', 'y\n');
    roundTrip(sb, r.dir);
  }));

test('untracked files in nested directories', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('c1', { 'top.txt': 'top\n', 'tracked/t.txt': 't\n' });
    r.write('n1/n2/n3/n4/deep.txt', 'deep\n');
    r.write('n1/shallow.txt', 'shallow\n');
    r.write('tracked/untracked-sibling.txt', 'sibling\n');
    r.write('tracked/more/u.bin', pseudoRandomBytes(3000, 9));
    r.write('.hidden/dotfile', 'dot\n');
    r.write('only-dirs/a/b/leaf.txt', 'leaf\n');
    roundTrip(sb, r.dir);
  }));

test('names with spaces, unicode, newline, tab, quotes, backslash and leading dash', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    const names = [
      'with space.txt',
      'dir with space/inner file.txt',
      'ünïcödé-日本語.txt',
      'caf\u00e9.txt', // NFC
      'cafe\u0301.txt', // NFD: a different file on Linux
      'emoji-🎉.txt',
      'new\nline.txt',
      'tab\there.txt',
      'double"quote.txt',
      "single'quote.txt",
      'back\\slash.txt',
      '-leading-dash.txt',
      '--double-dash',
      'dir/-n',
      'star*and?question.txt',
      ' leading-space.txt',
      'trailing-space.txt ',
    ];
    names.forEach((n, i) => r.write(n, `content ${i}\n`));
    r.commit('c1');
    // modify some, delete one, stage one, add untracked ones with odd names
    r.write('with space.txt', 'modified\n');
    r.write('new\nline.txt', 'modified newline file\n');
    r.git('add', '--', 'new\nline.txt');
    r.write('tab\there.txt', 'unstaged tab edit\n');
    r.rm('double"quote.txt');
    r.write('untracked \u00e4\u00f6\u00fc\n"x"\\y.txt', 'untracked odd\n');
    r.write('-untracked dir/--x', 'u\n');
    r.symlink('ünïcödé-日本語.txt', 'link with space');
    const { copy } = roundTrip(sb, r.dir);
    assert.equal(
      fs.readFileSync(path.join(copy, 'cafe\u0301.txt'), 'utf8'),
      `content ${names.indexOf('cafe\u0301.txt')}\n`,
    );
    assert.equal(
      fs.readFileSync(path.join(copy, 'caf\u00e9.txt'), 'utf8'),
      `content ${names.indexOf('caf\u00e9.txt')}\n`,
    );
  }));

test('empty directories (nested, inside tracked dirs and inside ignored dirs)', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('c1', { '.gitignore': 'ignored-dir/\ncache/\n', 'tracked/file.txt': 'f\n' });
    r.mkdir('empty');
    r.mkdir('nested/a/b/c');
    r.mkdir('nested/a/other-empty');
    r.mkdir('tracked/empty-child');
    r.mkdir('empty with space');
    r.write('ignored-dir/file.txt', 'ignored\n');
    r.mkdir('ignored-dir/empty-inside-ignored');
    r.mkdir('ignored-dir/deeper/empty');
    r.mkdir('cache'); // an ignored directory that is itself empty
    const res = roundTrip(sb, r.dir);
    assert.deepEqual(res.copyTree.emptyDirs, [
      'cache',
      'empty',
      'empty with space',
      'ignored-dir/deeper/empty',
      'ignored-dir/empty-inside-ignored',
      'nested/a/b/c',
      'nested/a/other-empty',
      'tracked/empty-child',
    ]);
    const manifest = showManifest(sb, r.dir, res.snapshot);
    const listed = JSON.stringify(manifest.emptyDirs);
    assert.ok(Array.isArray(manifest.emptyDirs), `manifest.emptyDirs should be an array: ${listed}`);
    for (const d of ['empty', 'nested/a/b/c', 'ignored-dir/empty-inside-ignored']) {
      assert.ok(listed.includes(JSON.stringify(d).slice(1, -1)), `manifest.emptyDirs should list ${d}: ${listed}`);
    }
  }));

test('line endings: .gitattributes eol=crlf, core.autocrlf=true, CRLF/LF/mixed files stay byte-identical', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.git('config', 'core.autocrlf', 'true');
    r.write('.gitattributes', '* text=auto eol=crlf\n*.txt text eol=crlf\n*.bin binary\n');
    r.git('add', '.gitattributes');
    r.git('commit', '-q', '-m', 'attributes');
    const files: Record<string, string | Buffer> = {
      'crlf.txt': 'one\r\ntwo\r\n',
      'lf.txt': 'one\ntwo\n',
      'mixed.txt': 'one\r\ntwo\nthree\r\n',
      'noext-lf': 'x\ny\n',
      'code.js': 'a();\r\nb();\n',
      'data.bin': Buffer.from('bin\r\n\0\n\r\n', 'latin1'),
      'no-final-newline.txt': 'a\r\nb',
    };
    r.commit('files', files);
    // unstaged edits with different endings, staged edit, and untracked files
    r.write('crlf.txt', 'one\ntwo\nthree\n');
    r.write('lf.txt', 'one\r\ntwo\r\n');
    r.write('code.js', 'a();\nb();\r\nc();\n');
    r.git('add', 'code.js');
    r.write('code.js', 'a();\nb();\r\nc();\r\nd();\n');
    r.write('untracked-crlf.txt', 'u\r\nv\r\n');
    r.write('untracked-lf.md', 'u\nv\n');
    r.write('untracked-mixed.txt', 'u\r\nv\nw\r');
    const before: Record<string, string> = {};
    for (const f of [...Object.keys(files), 'untracked-crlf.txt', 'untracked-lf.md', 'untracked-mixed.txt']) {
      before[f] = fileSha(r.p(f));
    }
    const { copy } = roundTrip(sb, r.dir);
    for (const [f, sum] of Object.entries(before)) {
      assert.equal(fileSha(path.join(copy, f)), sum, `${f} must be byte-identical in the copy`);
    }
    assert.equal(fs.readFileSync(path.join(copy, 'noext-lf'), 'latin1'), 'x\ny\n', 'LF file must not be converted');
    assert.equal(fs.readFileSync(path.join(copy, 'mixed.txt'), 'latin1'), 'one\r\ntwo\nthree\r\n');
    assert.equal(fs.readFileSync(path.join(copy, 'lf.txt'), 'latin1'), 'one\r\ntwo\r\n');
  }));

test('ignored files: node_modules with .bin symlinks, build outputs, logs, .git/info/exclude', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    buildIgnoredFixture(r);
    const st = r.git('status', '--porcelain', '--ignored');
    assert.match(st, /^!! node_modules\/$/m, 'fixture: node_modules ignored');
    assert.match(st, /^!! local-only\/$/m, 'fixture: info/exclude applies');
    const { copy } = roundTrip(sb, r.dir);
    assert.equal(
      fs.readFileSync(path.join(copy, '.git', 'info', 'exclude'), 'utf8'),
      fs.readFileSync(r.gitPath('info/exclude'), 'utf8'),
      '.git/info/exclude must be the same in the copy',
    );
    assert.equal(fs.readlinkSync(path.join(copy, 'node_modules/.bin/pkg')), '../pkg/bin/cli.js');
    assert.equal(fs.statSync(path.join(copy, 'node_modules/.bin/pkg')).mode & 0o111, 0o111);
  }));

test('--ignored none leaves ignored files out (also via git config xet.capture.ignored)', async (t) =>
  withSandbox(async (sb) => {
    const r = initRepo(sb, 'src');
    buildIgnoredFixture(r);
    const ignored = ignoredEntries(r);
    for (const e of ['node_modules/', 'build/out/', 'build/tool', 'debug.log', 'a/b/tmp-scratch', 'src/local.cfg']) {
      assert.ok(ignored.includes(e), `fixture: git reports ${e} as ignored: ${JSON.stringify(ignored)}`);
    }
    const res = roundTrip(sb, r.dir, { captureArgs: ['--ignored', 'none'], expectAbsent: ignored });
    for (const p of [
      'node_modules',
      'build/out',
      'debug.log',
      'src/sub/trace.log',
      'local-only',
      'settings.local',
      'a',
    ]) {
      assert.equal(fs.existsSync(path.join(res.copy, p)), false, `${p} must not be in the copy`);
    }
    for (const p of ['untracked.txt', 'keep.log', 'src/rooted.txt', 'local.cfg']) {
      assert.ok(fs.existsSync(path.join(res.copy, p)), `${p} is untracked but not ignored: it must be captured`);
    }
    assert.equal(
      fs.readFileSync(path.join(res.copy, 'build/tracked-in-ignored-dir.txt'), 'utf8'),
      'tracked, edited\n',
      'a tracked file inside an ignored directory is captured with its working-tree content',
    );
    assert.equal(fs.readFileSync(path.join(res.copy, 'vendor.log'), 'utf8'), 'tracked log, edited\n');
    assert.doesNotMatch(git(sb, res.copy, ['status', '--porcelain', '--ignored']), /^!!/m);
    await t.test('git config xet.capture.ignored none has the same effect', () => {
      r.git('config', 'xet.capture.ignored', 'none');
      const res2 = roundTrip(sb, r.dir, { expectAbsent: ignored });
      assert.equal(fs.existsSync(path.join(res2.copy, 'node_modules')), false);
    });
    await t.test('--ignored all overrides the config', () => {
      const res3 = roundTrip(sb, r.dir, { captureArgs: ['--ignored', 'all'] });
      assert.equal(fs.existsSync(path.join(res3.copy, 'node_modules/pkg/index.js')), true);
    });
  }));

test('symlinks: to files, to directories, dangling, absolute, chained', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.write('target.txt', 'target\n');
    r.write('dir/inside.txt', 'inside\n');
    r.symlink('target.txt', 'link-file');
    r.symlink('dir', 'link-dir');
    r.symlink('../target.txt', 'dir/up-link');
    r.commit('c1');
    r.symlink('does/not/exist', 'dangling');
    r.symlink('/etc/hostname', 'absolute');
    r.symlink('/nonexistent/xet/absolute/dangling', 'absolute-dangling');
    r.symlink(r.p('dir'), 'absolute-into-repo');
    r.symlink('link-file', 'chain');
    r.symlink('.', 'self-dir');
    r.symlink('dir/inside.txt', 'untracked-dir/link');
    r.rm('link-dir');
    r.symlink('dir/inside.txt', 'link-dir'); // retargeted tracked link
    const { copy } = roundTrip(sb, r.dir);
    assert.equal(fs.readlinkSync(path.join(copy, 'absolute')), '/etc/hostname');
    assert.equal(fs.readlinkSync(path.join(copy, 'dangling')), 'does/not/exist');
    assert.ok(fs.lstatSync(path.join(copy, 'link-file')).isSymbolicLink());
  }));

test('executables: tracked, untracked, ignored, nested', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.write('.gitignore', 'out/\n');
    r.write('tool.sh', '#!/bin/sh\necho tool\n', 0o755);
    r.write('bin/nested-tool', '#!/bin/sh\necho nested\n', 0o755);
    r.write('data.txt', 'not executable\n', 0o644);
    r.commit('c1');
    r.write('tool.sh', '#!/bin/sh\necho tool v2\n', 0o755);
    r.git('add', 'tool.sh');
    r.write('new-exec.sh', '#!/bin/sh\necho new\n', 0o755);
    r.write('out/built-exec', '#!/bin/sh\necho built\n', 0o755);
    r.write('out/plain.txt', 'plain\n', 0o644);
    const { copy } = roundTrip(sb, r.dir);
    for (const f of ['tool.sh', 'bin/nested-tool', 'new-exec.sh', 'out/built-exec']) {
      assert.equal(fs.statSync(path.join(copy, f)).mode & 0o111, 0o111, `${f} must be executable`);
    }
    assert.equal(fs.statSync(path.join(copy, 'data.txt')).mode & 0o111, 0);
  }));

test('linked worktree (git worktree add) as the source', () =>
  withSandbox((sb) => {
    const main = initRepo(sb, 'main-repo');
    main.commit('c1', { '.gitignore': '*.o\n', 'a.txt': 'a\n', 'b.txt': 'b\n' });
    main.git('worktree', 'add', '-q', '-b', 'wt-branch', sb.path('linked'));
    const wt = new Repo(sb, sb.path('linked'));
    wt.commit('on wt branch', { 'wt.txt': 'wt\n' });
    wt.write('a.txt', 'edited in linked worktree\n');
    wt.write('staged.txt', 'staged in linked worktree\n');
    wt.git('add', 'staged.txt');
    wt.write('untracked/x.txt', 'x\n');
    wt.write('obj.o', 'ignored object\n');
    main.write('main-only.txt', 'this belongs to the main worktree\n');
    assert.ok(fs.statSync(wt.p('.git')).isFile(), 'fixture: .git is a file in a linked worktree');
    const { copy } = roundTrip(sb, wt.dir);
    assert.equal(git(sb, copy, ['symbolic-ref', 'HEAD']).trim(), 'refs/heads/wt-branch');
    assert.equal(fs.existsSync(path.join(copy, 'main-only.txt')), false);
    assert.ok(fs.statSync(path.join(copy, '.git')).isDirectory(), 'the copy has its own .git directory');
  }));

test('restore --from <path> from outside the source repository, and from a bare repo holding only the snapshot ref', async (t) =>
  withSandbox(async (sb) => {
    const r = initRepo(sb, 'src');
    buildRichFixture(r);
    const outside = sb.path('elsewhere');
    fs.mkdirSync(outside);
    const res = roundTrip(sb, r.dir, { restoreCwd: outside, restoreArgs: ['--from', r.dir] });
    assert.equal(fs.existsSync(path.join(res.copy, 'ignored/x.bin')), true);
    await t.test('--from a bare repository that received refs/xet/snapshots/<oid> by push', () => {
      const bare = sb.path('transport.git');
      git(sb, sb.root, ['init', '-q', '--bare', bare]);
      const ref = `refs/xet/snapshots/${res.snapshot}`;
      r.git('push', '-q', bare, `${ref}:${ref}`);
      const copy = sb.path('from-bare');
      restore(sb, outside, res.snapshot, copy, ['--from', bare]);
      const problems = compareGitStates(collectGitState(sb, res.copy), collectGitState(sb, copy));
      assert.deepEqual(problems, [], problems.join('\n'));
      assert.equal(treeFingerprint(copy), treeFingerprint(res.copy));
    });
    await t.test('--from <remote name> of the current repository', () => {
      const consumer = initRepo(sb, 'consumer');
      consumer.git('remote', 'add', 'upstream-src', r.dir);
      const copy = sb.path('from-remote-name');
      restore(sb, consumer.dir, res.snapshot, copy, ['--from', 'upstream-src']);
      const problems = compareGitStates(collectGitState(sb, res.copy), collectGitState(sb, copy));
      assert.deepEqual(problems, [], problems.join('\n'));
      assert.equal(treeFingerprint(copy), treeFingerprint(res.copy));
    });
  }));

test('secrets: untracked .env / id_rsa / keys are left out and listed; --include .env captures it', async (t) =>
  withSandbox(async (sb) => {
    const r = initRepo(sb, 'src');
    r.write('.gitignore', '.env.local\n');
    r.commit('c1', {
      'app.js': 'require("dotenv");\n',
      'config/tracked-cert.pem': 'tracked pem is part of the repository\n',
      'keys/README': 'keys live here\n',
      'legacy/.env': 'TRACKED=1\n',
      'deploy/README': 'deploy\n',
    });
    r.write('legacy/.env', 'TRACKED=2 (unstaged edit of a tracked secret-looking file)\n');
    r.write('.env', 'SECRET=1\n');
    r.write('config/.env.production', 'PROD_SECRET=3\n');
    r.write('deploy/id_ed25519', 'ed25519 private\n');
    r.write('.env.local', 'LOCAL_SECRET=2\n'); // ignored secret
    r.write('id_rsa', '-----BEGIN OPENSSH PRIVATE KEY-----\n');
    r.write('id_rsa.pub', 'ssh-rsa AAAA test\n');
    r.write('keys/server.key', 'key\n');
    r.write('.npmrc', '//registry.example/:_authToken=x\n');
    r.write('notes.txt', 'not a secret\n');
    // Names are compared case-insensitively, slash patterns too; a configured pattern may use a class.
    r.write('home/.AWS/Credentials', 'aws_secret_access_key=x\n');
    r.write('tls/Server.CRT', 'cert\n');
    r.git('config', '--add', 'xet.capture.secret', '*.[cC][rR][tT]');
    const secrets = [
      'home/.AWS/Credentials',
      'tls/Server.CRT',
      '.env',
      '.env.local',
      'id_rsa',
      'id_rsa.pub',
      'keys/server.key',
      '.npmrc',
      'config/.env.production',
      'deploy/id_ed25519',
    ];
    const res = roundTrip(sb, r.dir, { expectAbsent: secrets });
    for (const s of secrets) assert.equal(fs.existsSync(path.join(res.copy, s)), false, `${s} must not be captured`);
    assert.ok(fs.existsSync(path.join(res.copy, 'config/tracked-cert.pem')), 'tracked secret-looking files are kept');
    assert.ok(fs.existsSync(path.join(res.copy, 'notes.txt')));
    const m = showManifest(sb, r.dir, res.snapshot);
    assert.equal(m.schema, 'xet.snapshot/v1');
    const excluded = m?.policy?.excludedSecrets;
    assert.ok(Array.isArray(excluded), `policy.excludedSecrets should be an array: ${JSON.stringify(m?.policy)}`);
    for (const s of secrets)
      assert.ok(excluded.includes(s), `excludedSecrets should list ${s}: ${JSON.stringify(excluded)}`);
    assert.ok(!excluded.includes('config/tracked-cert.pem'), 'a tracked file is not an excluded secret');
    assert.equal(
      fs.readFileSync(path.join(res.copy, 'legacy/.env'), 'utf8'),
      'TRACKED=2 (unstaged edit of a tracked secret-looking file)\n',
      'tracked files are captured with their working-tree content even if their name looks secret',
    );
    await t.test('--include .env captures .env (and only what is included)', () => {
      const rest = secrets.filter((s) => s !== '.env');
      const res2 = roundTrip(sb, r.dir, { captureArgs: ['--include', '.env'], expectAbsent: rest });
      assert.equal(fs.readFileSync(path.join(res2.copy, '.env'), 'utf8'), 'SECRET=1\n');
      assert.equal(fs.existsSync(path.join(res2.copy, 'id_rsa')), false);
      const m2 = showManifest(sb, r.dir, res2.snapshot);
      const excluded2: string[] = m2?.policy?.excludedSecrets;
      assert.ok(Array.isArray(excluded2));
      assert.ok(!excluded2.includes('.env'), `.env was included, so it is not excluded: ${JSON.stringify(excluded2)}`);
      assert.ok(excluded2.includes('id_rsa'));
      assert.ok(excluded2.includes('config/.env.production'), '--include .env must not include .env.production');
    });
  }));

test('capture does not change the source (index bytes, refs, working tree)', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    buildRichFixture(r);
    const indexPath = r.gitPath('index');
    const observe = () => ({
      index: sha256(fs.readFileSync(indexPath)),
      refs: r
        .git('for-each-ref', '--format=%(refname) %(objectname)')
        .split('\n')
        .filter((l) => !l.startsWith('refs/xet/'))
        .join('\n'),
      head: fs.readFileSync(r.gitPath('HEAD'), 'utf8'),
      stash: r.git('stash', 'list', '--format=%H %gs'),
      tree: treeFingerprint(r.dir),
    });
    const before = observe();
    const s1 = capture(sb, r.dir);
    const s2 = capture(sb, r.dir, ['--ignored', 'none', '-m', 'second capture']);
    const s3 = capture(sb, r.dir, ['--exclude', 'untracked/', '--include', '*.tmp']);
    const after = observe();
    assert.equal(after.index, before.index, '.git/index bytes changed during capture');
    assert.equal(after.refs, before.refs, 'refs (outside refs/xet/) changed during capture');
    assert.equal(after.head, before.head, 'HEAD changed during capture');
    assert.equal(after.stash, before.stash, 'stash list changed during capture');
    assert.equal(after.tree, before.tree, 'working tree changed during capture');
    const xetRefs = r.git('for-each-ref', '--format=%(refname)', 'refs/xet/snapshots/');
    for (const s of [s1, s2, s3]) assert.match(xetRefs, new RegExp(`^refs/xet/snapshots/${s}$`, 'm'));
    const locks = fs
      .readdirSync(r.commonDir(), { recursive: true })
      .map(String)
      .filter((p) => p.endsWith('.lock'));
    assert.deepEqual(locks, [], 'no lock files left behind in .git');
  }));

test('--exclude PATTERN leaves matching untracked/ignored files out; verify still passes', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('c1', { 'a.txt': 'a\n' });
    r.write('scratch/big.dat', 'scratch\n');
    r.write('notes.tmp', 'tmp\n');
    r.write('keep.txt', 'keep\n');
    const res = roundTrip(sb, r.dir, {
      captureArgs: ['--exclude', 'scratch/', '--exclude', '*.tmp'],
      expectAbsent: ['scratch/', 'notes.tmp'],
    });
    assert.equal(fs.existsSync(path.join(res.copy, 'keep.txt')), true);
  }));

test('empty repository (git init only) and a repository with only untracked files', () =>
  withSandbox((sb) => {
    const empty = initRepo(sb, 'empty');
    const res = roundTrip(sb, empty.dir, { mutate: [] });
    fs.writeFileSync(path.join(res.copy, 'extra.txt'), 'x\n');
    assertVerifyReports(sb, empty.dir, res.snapshot, res.copy, 'extra.txt');

    const onlyUntracked = initRepo(sb, 'only-untracked');
    onlyUntracked.write('a.txt', 'a\n');
    onlyUntracked.write('d/b.txt', 'b\n');
    roundTrip(sb, onlyUntracked.dir);
  }));

test('capture run from a subdirectory captures the whole working tree', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('c1', { 'top.txt': 'top\n', 'pkg/sub/inner.txt': 'inner\n', 'other/o.txt': 'o\n' });
    r.write('top.txt', 'top edited\n');
    r.write('other/new.txt', 'new\n');
    r.write('pkg/sub/local.txt', 'local\n');
    const { copy } = roundTrip(sb, r.dir, { captureCwd: r.p('pkg/sub') });
    assert.equal(fs.readFileSync(path.join(copy, 'top.txt'), 'utf8'), 'top edited\n');
    assert.equal(fs.readFileSync(path.join(copy, 'other/new.txt'), 'utf8'), 'new\n');
  }));

test('show --json: schema, head and refs describe the captured repository', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    buildRichFixture(r);
    const snap = capture(sb, r.dir);
    const m = showManifest(sb, r.dir, snap);
    assert.equal(m.schema, 'xet.snapshot/v1');
    const head = r.git('rev-parse', 'HEAD').trim();
    assert.ok(JSON.stringify(m.head).includes(head), `manifest.head should mention ${head}: ${JSON.stringify(m.head)}`);
    const refs = JSON.stringify(m.refs);
    for (const ref of ['refs/heads/main', 'refs/heads/side', 'refs/tags/v1', 'refs/tags/v2']) {
      assert.ok(refs.includes(ref), `manifest.refs should list ${ref}: ${refs.slice(0, 1500)}`);
    }
    assert.ok(refs.includes(r.git('rev-parse', 'side').trim()), 'manifest.refs should carry ref targets');
    const stashOid = r.git('rev-parse', 'refs/stash').trim();
    assert.ok(JSON.stringify(m).includes(stashOid), `the manifest should record the stash (${stashOid})`);
    assert.equal(typeof m.counts, 'object', `manifest.counts should be an object: ${JSON.stringify(m.counts)}`);
    assert.ok(m.counts !== null);
  }));

test('verify detects other kinds of drift: extra/missing file, exec bit, symlink target, empty dir, index, refs', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.write('tool.sh', '#!/bin/sh\n', 0o644);
    r.symlink('a.txt', 'link');
    r.commit('c1', { 'a.txt': 'a\n', 'b.txt': 'b\n' });
    r.commit('c2', { 'a.txt': 'a2\n' });
    r.git('branch', 'side', 'HEAD~1');
    r.write('u.txt', 'untracked\n');
    const snap = capture(sb, r.dir);
    const cases: Array<[string, (copy: string) => void, string | null]> = [
      ['extra untracked file', (c) => fs.writeFileSync(path.join(c, 'extra.txt'), 'x\n'), 'extra.txt'],
      ['missing untracked file', (c) => fs.rmSync(path.join(c, 'u.txt')), 'u.txt'],
      ['missing tracked file', (c) => fs.rmSync(path.join(c, 'b.txt')), 'b.txt'],
      ['exec bit set', (c) => fs.chmodSync(path.join(c, 'tool.sh'), 0o755), 'tool.sh'],
      [
        'symlink retargeted',
        (c) => {
          fs.rmSync(path.join(c, 'link'));
          fs.symlinkSync('b.txt', path.join(c, 'link'));
        },
        'link',
      ],
      ['new empty directory', (c) => fs.mkdirSync(path.join(c, 'newdir')), 'newdir'],
      ['index-only change (update-index --chmod=+x)', (c) => git(sb, c, ['update-index', '--chmod=+x', 'a.txt']), null],
      ['branch moved', (c) => git(sb, c, ['branch', '-f', 'side', 'HEAD']), null],
      ['tag added', (c) => git(sb, c, ['tag', 'extra-tag']), null],
      ['HEAD detached', (c) => git(sb, c, ['checkout', '-q', '--detach']), null],
    ];
    cases.forEach(([what, change, rel], i) => {
      const copy = sb.path(`drift-${i}`);
      restore(sb, r.dir, snap, copy);
      change(copy);
      const v = verify(sb, r.dir, snap, copy);
      assert.equal(v.status, 1, `verify should exit 1 after: ${what}\n${describeRun(v)}`);
      const out = parseJson(v);
      assert.equal(out.ok, false, `${what}: ok should be false`);
      assert.ok(Array.isArray(out.differences) && out.differences.length > 0, `${what}: differences[] expected`);
      if (rel) {
        assert.ok(
          JSON.stringify(out.differences).includes(rel),
          `${what}: differences should name ${rel}: ${v.stdout.slice(0, 1500)}`,
        );
      }
    });
  }));
