// The daemon's memo of the index listing (src/daemon/index-memo.ts): answered without git while the
// index file is the same, read again by git after every kind of index write (a staged file, a mode,
// a flag, a split index, a removal), never memoised for GIT_INDEX_FILE or a missing index.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { indexEntriesMemo } from '../src/daemon/index-memo';
import { readIndexEntries, readIndexListing, type IndexFileRef } from '../src/git/plumbing';
import { findRepo } from '../src/git/repo';
import { withSandbox } from './support/sandbox';

function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', args, { cwd, encoding: 'utf8' }).trim();
}

/** The real reader, counting how often the memo asks it. */
function countingReader(r: string) {
  const counter = {
    calls: 0,
    read: (index?: IndexFileRef) => (counter.calls++, readIndexListing({ cwd: r }, index)),
  };
  return counter;
}

/** Runs `fn` and says whether the memo answered it (its reader was not asked). */
async function fromMemo<T>(counter: { calls: number }, fn: () => Promise<T>): Promise<{ value: T; memo: boolean }> {
  const before = counter.calls;
  const value = await fn();
  return { value, memo: counter.calls === before };
}

test('the index memo answers without git while the index is the same, and follows every write of it', () =>
  withSandbox(async (sb) => {
    const r = sb.path('repo');
    fs.mkdirSync(r);
    git(r, 'init', '-q', '-b', 'main');
    const repo = await findRepo(r, true);
    const counter = countingReader(r);
    const read = indexEntriesMemo(repo, {}, counter.read);
    // No index yet: nothing to key on, so the reader answers every time.
    assert.deepEqual(await read(), []);
    assert.equal((await fromMemo(counter, read)).memo, false);

    for (let i = 0; i < 5; i++) fs.writeFileSync(path.join(r, `f${i}`), `${i}\n`);
    git(r, 'add', '.');
    // Each step, and whether its listing is kept: a split index and skip-worktree entries are
    // listed by git, whose listing may depend on more than the index file.
    const steps: [string, () => void, boolean][] = [
      ['a staged file', () => (fs.writeFileSync(path.join(r, 'f0'), 'changed\n'), git(r, 'add', 'f0')), true],
      ['a mode', () => git(r, 'update-index', '--chmod=+x', 'f1'), true],
      ['assume-unchanged', () => git(r, 'update-index', '--assume-unchanged', 'f2'), true],
      ['skip-worktree', () => git(r, 'update-index', '--skip-worktree', 'f3'), false],
      ['skip-worktree cleared', () => git(r, 'update-index', '--no-skip-worktree', 'f3'), true],
      ['intent to add', () => (fs.writeFileSync(path.join(r, 'new'), 'n\n'), git(r, 'add', '-N', 'new')), true],
      ['a removal', () => git(r, 'rm', '-q', '--cached', 'f4'), true],
      ['a split index', () => git(r, 'update-index', '--split-index'), false],
      ['a write into the split index', () => git(r, 'update-index', '--no-assume-unchanged', 'f2'), false],
      ['the split index undone', () => git(r, 'update-index', '--no-split-index'), true],
      [
        'stat data only',
        () => (fs.utimesSync(path.join(r, 'f0'), 1e6, 1e6), git(r, 'update-index', '-q', '--refresh')),
        true,
      ],
    ];
    for (const [what, change, kept] of [['the first listing', () => undefined, true] as const, ...steps]) {
      change();
      const fresh = await readIndexEntries({ cwd: r });
      const first = await fromMemo(counter, read);
      assert.deepEqual(first, { value: fresh, memo: false }, `${what}: read again`);
      assert.deepEqual(await fromMemo(counter, read), { value: fresh, memo: kept }, `${what}: then from the memo`);
    }
    // A caller's changes to what it got do not reach the memo.
    (await read()).length = 0;
    const kept = await fromMemo(counter, read);
    assert.ok(kept.memo && kept.value.length > 0);

    // Another index named in the environment: never memoised.
    const otherCounter = countingReader(r);
    const other = indexEntriesMemo(repo, { GIT_INDEX_FILE: path.join(r, '.git', 'index') }, otherCounter.read);
    await other();
    assert.equal((await fromMemo(otherCounter, other)).memo, false);
  }));
