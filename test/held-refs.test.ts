// Which snapshots a holding ref still reaches, read from the ref files (previous-tree.ts
// heldByRefFiles), against git: loose and packed refs, pins and drops, a ref that points elsewhere,
// one deleted, one being packed; it never says held where git's own reading would not.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import { test } from 'node:test';
import { heldByRefFiles } from '../src/snapshot/previous-tree';
import { initRepo } from './support/git';
import { withSandbox } from './support/sandbox';

test('a snapshot is held by its ref files exactly when git resolves a holding ref to it', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'r');
    const commits = ['a', 'b', 'c', 'd', 'e', 'f'].map((n) => r.commit(n, { [n]: `${n}\n` }));
    const [a, b, c, d, e, f] = commits;
    const common = r.commonDir();
    r.git('update-ref', `refs/xet/snapshots/${a}`, a);
    r.git('update-ref', `refs/xet/pins/${b}`, b);
    r.git('update-ref', `refs/xet/dropped/${c}`, c);
    r.git('update-ref', `refs/xet/snapshots/${d}`, e); // named after d, pointing at e
    r.git('update-ref', `refs/xet/snapshots/${f}`, f);
    r.git('update-ref', '-d', `refs/xet/snapshots/${f}`);
    const byGit = (oid: string) =>
      ['snapshots', 'pins', 'dropped'].some(
        (k) => r.gitTry('rev-parse', '--verify', '-q', `refs/xet/${k}/${oid}`).stdout.toString().trim() === oid,
      );
    const check = (what: string) => {
      const held = heldByRefFiles(common, commits);
      for (const oid of commits) assert.equal(held.has(oid), byGit(oid), `${what}: ${oid}`);
      assert.deepEqual([...held].sort(), [a, b, c].sort(), what);
    };
    check('loose');
    r.git('pack-refs', '--all');
    assert.equal(fs.existsSync(`${common}/refs/xet/snapshots/${a}`), false);
    check('packed');
    // Packed, then written loose again elsewhere: the loose file is the ref.
    r.git('update-ref', `refs/xet/snapshots/${a}`, b);
    assert.equal(heldByRefFiles(common, [a]).size, 0);
    r.git('update-ref', `refs/xet/snapshots/${a}`, a);
    assert.deepEqual([...heldByRefFiles(common, [a])], [a]);
    // A dangling symlink where the loose ref would be, over a packed one: a broken ref to git.
    r.git('pack-refs', '--all');
    fs.mkdirSync(`${common}/refs/xet/snapshots`, { recursive: true });
    fs.symlinkSync('nowhere', `${common}/refs/xet/snapshots/${a}`);
    assert.equal(r.gitTry('rev-parse', '--verify', '-q', `refs/xet/snapshots/${a}`).stdout.toString().trim(), '');
    assert.equal(heldByRefFiles(common, [a]).size, 0);
    // Not an object id: never looked up as a path.
    assert.equal(heldByRefFiles(common, ['../../HEAD', `${a}/..`]).size, 0);
  }));
