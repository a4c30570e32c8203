// The daemon's memo of the index listing (src/daemon/index-memo.ts): answered without git while the
// index file is the same, read again by git after every kind of index write (a staged file, a mode,
// a flag, a split index, a removal), never memoised for GIT_INDEX_FILE or a missing index.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { indexEntriesMemo } from '../src/daemon/index-memo';
import { readIndexEntries } from '../src/git/plumbing';
import { findRepo } from '../src/git/repo';
import { withSandbox } from './support/sandbox';

function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', args, { cwd, encoding: 'utf8' }).trim();
}

/** Runs `fn` where no git can start: what it returns came from a memo. */
async function withoutGit<T>(fn: () => Promise<T>): Promise<T> {
  const saved = process.env.PATH;
  process.env.PATH = '/nonexistent';
  try {
    return await fn();
  } finally {
    process.env.PATH = saved;
  }
}

test('the index memo answers without git while the index is the same, and follows every write of it', () =>
  withSandbox(async (sb) => {
    const r = sb.path('repo');
    fs.mkdirSync(r);
    git(r, 'init', '-q', '-b', 'main');
    const repo = await findRepo(r, true);
    const read = indexEntriesMemo(repo, {});
    // No index yet: nothing to key on, so git answers every time.
    assert.deepEqual(await read(), []);
    await assert.rejects(withoutGit(read));

    for (let i = 0; i < 5; i++) fs.writeFileSync(path.join(r, `f${i}`), `${i}\n`);
    git(r, 'add', '.');
    const steps: [string, () => void][] = [
      ['a staged file', () => (fs.writeFileSync(path.join(r, 'f0'), 'changed\n'), git(r, 'add', 'f0'))],
      ['a mode', () => git(r, 'update-index', '--chmod=+x', 'f1')],
      ['assume-unchanged', () => git(r, 'update-index', '--assume-unchanged', 'f2')],
      ['skip-worktree', () => git(r, 'update-index', '--skip-worktree', 'f3')],
      ['intent to add', () => (fs.writeFileSync(path.join(r, 'new'), 'n\n'), git(r, 'add', '-N', 'new'))],
      ['a removal', () => git(r, 'rm', '-q', '--cached', 'f4')],
      ['a split index', () => git(r, 'update-index', '--split-index')],
      ['a write into the split index', () => git(r, 'update-index', '--no-assume-unchanged', 'f2')],
      [
        'stat data only',
        () => (fs.utimesSync(path.join(r, 'f0'), 1e6, 1e6), git(r, 'update-index', '-q', '--refresh')),
      ],
    ];
    for (const [what, change] of [['the first listing', () => undefined] as [string, () => void], ...steps]) {
      change();
      const fresh = await readIndexEntries({ cwd: r });
      assert.deepEqual(await read(), fresh, `${what}: read by git`);
      assert.deepEqual(await withoutGit(read), fresh, `${what}: then from the memo`);
    }
    // A caller's changes to what it got do not reach the memo.
    (await withoutGit(read)).length = 0;
    assert.notEqual((await withoutGit(read)).length, 0);

    // Another index named in the environment: never memoised.
    const other = indexEntriesMemo(repo, { GIT_INDEX_FILE: path.join(r, '.git', 'index') });
    await other();
    await assert.rejects(withoutGit(other));
  }));
