// A capture's view of HEAD and the refs (src/snapshot/refview.ts) with HEAD read from its file
// against the view git's own processes give, in every shape HEAD takes: a branch (loose, packed,
// non-ASCII, in a linked worktree), unborn, detached, a branch that is a symbolic ref or holds a tag,
// a symlink, another namespace, spellings git accepts but the file reader leaves to git.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { headBranchFromFile, readRefView } from '../src/snapshot/refview';
import { CAPTURED_REF_PATTERNS } from '../src/snapshot/recorded';
import { withSandbox } from './support/sandbox';

const PATTERNS = [...CAPTURED_REF_PATTERNS, 'refs/stash'];

function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', args, { cwd, encoding: 'utf8' }).trim();
}

/** The view through the file and through git agree; the branch the file names, when it answered
 * (then no git process read HEAD: GIT_TRACE lists what ran). */
async function sameView(worktree: string, gitDir: string, what: string): Promise<string | null> {
  const commonDir = path.resolve(worktree, git(worktree, 'rev-parse', '--git-common-dir'));
  const trace = path.join(os.tmpdir(), `xet-refview-trace-${process.pid}`);
  const outcome = (p: Promise<unknown>) => p.catch((e: { code?: string }) => ({ refused: e.code }));
  const viaGit = await outcome(readRefView(PATTERNS, { cwd: worktree }));
  fs.rmSync(trace, { force: true });
  const viaFile = await outcome(
    readRefView(PATTERNS, { cwd: worktree, env: { GIT_TRACE: trace } }, { gitDir, commonDir }),
  );
  assert.deepEqual(viaFile, viaGit, what);
  const ran = fs.readFileSync(trace, 'utf8');
  fs.rmSync(trace, { force: true });
  const branch = headBranchFromFile(gitDir)?.ref ?? null;
  const headByGit = /git (symbolic-ref|rev-parse)/.test(ran);
  if (branch !== null && !('refused' in (viaGit as object))) {
    const entry = (viaGit as { refs: { name: string; type: string; symref?: string }[] }).refs.find(
      (r) => r.name === branch,
    );
    // The file answers unless the branch is a symbolic ref or holds something other than a commit.
    assert.equal(headByGit, !!entry && (entry.type !== 'commit' || !!entry.symref), `${what}: ${ran}`);
  }
  return branch;
}

test('HEAD read from its file gives the view git gives, and leaves every other shape of HEAD to git', () =>
  withSandbox(async (sb) => {
    const r = sb.path('repo');
    fs.mkdirSync(r);
    git(r, 'init', '-q', '-b', 'main');
    git(r, 'config', 'user.name', 'T');
    git(r, 'config', 'user.email', 't@example.com');
    const gd = path.join(r, '.git');
    const head = path.join(gd, 'HEAD');

    assert.equal(await sameView(r, gd, 'unborn'), 'refs/heads/main');
    assert.deepEqual((await readRefView(PATTERNS, { cwd: r }, { gitDir: gd, commonDir: gd })).head, {
      kind: 'branch',
      ref: 'refs/heads/main',
      oid: null,
    });

    fs.writeFileSync(path.join(r, 'a'), 'a\n');
    git(r, 'add', 'a');
    git(r, 'commit', '-q', '-m', 'one');
    const one = git(r, 'rev-parse', 'HEAD');
    assert.equal(await sameView(r, gd, 'a loose branch'), 'refs/heads/main');
    assert.equal((await readRefView(PATTERNS, { cwd: r }, { gitDir: gd, commonDir: gd })).head.oid, one);
    git(r, 'pack-refs', '--all');
    assert.equal(await sameView(r, gd, 'a packed branch'), 'refs/heads/main');

    git(r, 'checkout', '-q', '-b', 'fix-ü/ñ');
    assert.equal(await sameView(r, gd, 'a non-ASCII branch'), 'refs/heads/fix-ü/ñ');

    git(r, 'checkout', '-q', '--detach');
    assert.equal(await sameView(r, gd, 'detached'), null);

    // A branch holding an annotated tag: git peels HEAD^{commit}; the file reader defers.
    git(r, 'tag', '-a', '-m', 'tag', 'v1', one);
    // (update-ref refuses a tag on a branch; a hand-written ref file, or an older git, does not.)
    fs.writeFileSync(path.join(gd, 'refs', 'heads', 'tagged'), `${git(r, 'rev-parse', 'v1')}\n`);
    git(r, 'symbolic-ref', 'HEAD', 'refs/heads/tagged');
    // (Both refuse it: the branch's listed value is the tag, never HEAD's commit.)
    assert.equal(await sameView(r, gd, 'a branch holding a tag'), 'refs/heads/tagged');

    // A branch that is itself a symbolic ref: git names the branch at the end of the chain.
    git(r, 'symbolic-ref', 'refs/heads/alias', 'refs/heads/main');
    git(r, 'symbolic-ref', 'HEAD', 'refs/heads/alias');
    await sameView(r, gd, 'a branch that is a symbolic ref');
    assert.equal((await readRefView(PATTERNS, { cwd: r }, { gitDir: gd, commonDir: gd })).head.kind, 'branch');

    git(r, 'update-ref', 'refs/remotes/origin/main', one);
    git(r, 'symbolic-ref', 'HEAD', 'refs/remotes/origin/main');
    assert.equal(await sameView(r, gd, 'another namespace'), null);

    // Unborn on a branch whose name is new; then names and spellings left to git.
    git(r, 'symbolic-ref', 'HEAD', 'refs/heads/next');
    assert.equal(await sameView(r, gd, 'an unborn second branch'), 'refs/heads/next');
    for (const text of [
      'ref: refs/heads/main',
      'ref:  refs/heads/main\n',
      'ref: refs/heads/main \n',
      'ref: refs/heads/main\r\n',
      'ref: refs/heads/.invalid\n',
      'ref: refs/heads/a..b\n',
      'ref: refs/heads/x.lock\n',
      'ref: refs/heads/main/\n',
    ]) {
      fs.writeFileSync(head, text);
      assert.equal(headBranchFromFile(gd), null, JSON.stringify(text));
      await sameView(r, gd, JSON.stringify(text));
    }

    // A symlinked HEAD (core.preferSymlinkRefs, long ago): git follows it; the reader defers.
    fs.rmSync(head);
    fs.symlinkSync('refs/heads/main', head);
    assert.equal(await sameView(r, gd, 'a symlinked HEAD'), null);
    fs.rmSync(head);
    fs.writeFileSync(head, 'ref: refs/heads/main\n');

    // A linked worktree: its HEAD is in its own git directory, the branches in the common one.
    const wt = sb.path('wt');
    git(r, 'worktree', 'add', '-q', '-b', 'side', wt, one);
    const wtGitDir = git(wt, 'rev-parse', '--absolute-git-dir');
    assert.notEqual(wtGitDir, gd);
    assert.equal(await sameView(wt, wtGitDir, 'a linked worktree'), 'refs/heads/side');
    assert.equal((await readRefView(PATTERNS, { cwd: wt }, { gitDir: wtGitDir, commonDir: gd })).head.oid, one);
    assert.equal(await sameView(r, gd, 'the main worktree beside it'), 'refs/heads/main');
  }));

test('a checkout between the read of HEAD and the listing is read again; a broken branch file is left to git', () =>
  withSandbox(async (sb) => {
    const r = sb.path('repo');
    fs.mkdirSync(r);
    git(r, 'init', '-q', '-b', 'main');
    fs.writeFileSync(path.join(r, 'a'), 'a\n');
    git(r, 'add', 'a');
    git(r, '-c', 'user.email=a@b', '-c', 'user.name=a', 'commit', '-qm', 'one');
    const main = git(r, 'rev-parse', 'HEAD');
    git(r, 'checkout', '-q', '-b', 'feature');
    const gd = path.join(r, '.git');
    const dirs = { gitDir: gd, commonDir: gd };
    // A git on PATH that, the first time the refs are listed, first checks out main and deletes
    // feature: the listing then lacks the branch the HEAD file named a moment before.
    const real = execFileSync('sh', ['-c', 'command -v git'], { encoding: 'utf8' }).trim();
    const bin = sb.path('bin');
    fs.mkdirSync(bin);
    const once = sb.path('moved');
    fs.writeFileSync(
      path.join(bin, 'git'),
      `#!/bin/sh
if [ "$1" = for-each-ref ] && [ ! -e '${once}' ]; then
  : > '${once}'
  '${real}' checkout -q main && '${real}' branch -q -D feature
fi
exec '${real}' "$@"
`,
      { mode: 0o755 },
    );
    const env = { PATH: `${bin}:${process.env.PATH}` };
    const view = await readRefView(PATTERNS, { cwd: r, env }, dirs);
    assert.ok(fs.existsSync(once), 'the checkout happened during the read');
    assert.deepEqual(view.head, { kind: 'branch', ref: 'refs/heads/main', oid: main });
    assert.ok(!view.refs.some((x) => x.name === 'refs/heads/feature'));

    // A branch whose loose file holds garbage: the listing leaves it out (with a warning), and git,
    // not the file reader, says what HEAD is.
    git(r, 'checkout', '-q', '-b', 'broken');
    fs.writeFileSync(path.join(gd, 'refs', 'heads', 'broken'), 'not an object id\n');
    const outcome = (p: Promise<unknown>) => p.catch((e: { code?: string }) => ({ refused: e.code }));
    assert.deepEqual(
      await outcome(readRefView(PATTERNS, { cwd: r }, dirs)),
      await outcome(readRefView(PATTERNS, { cwd: r })),
    );
  }));
