// The daemon's config memo (src/daemon/config-memo.ts) with the real git: the same object while no
// config file changed and the files were older than the clock's margin when read (file-stamps.ts),
// a new reading after any change (a `git config`, an in-place edit back to its size and mtime), and
// none kept while a file is within the margin.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { configMemo } from '../src/daemon/config-memo';
import { findRepo } from '../src/git/repo';

const settle = () => new Promise((r) => setTimeout(r, 150));

test('the config memo keeps one reading while the files are unchanged and settled, and reads again after any change', async (t) => {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-configmemo-'));
  t.after(() => fs.rmSync(d, { recursive: true, force: true }));
  execFileSync('git', ['init', '-q', d]);
  const memo = configMemo(await findRepo(d));
  await settle();
  const first = await memo();
  assert.equal(await memo(), first, 'the same reading while nothing changed');
  execFileSync('git', ['-C', d, 'config', 'xet.test', 'one']);
  const a = await memo();
  assert.notEqual(a, first);
  assert.equal(a.get('xet.test'), 'one');
  // A file's time within the margin (here, ahead of the clock): read again at every call.
  const file = path.join(d, '.git', 'config');
  const ahead = new Date(Date.now() + 20_000);
  fs.utimesSync(file, ahead, ahead);
  const r1 = await memo();
  assert.notEqual(await memo(), r1, 'a reading within the margin of a change is not kept');
  fs.utimesSync(file, new Date(Date.now() - 5000), new Date(Date.now() - 5000));
  await settle();
  const b = await memo();
  assert.equal(await memo(), b, 'kept once the files are older than the margin');
  // An in-place edit back to the same size, its mtime put back: the ctime still moves.
  const { atime, mtime } = fs.statSync(file);
  fs.writeFileSync(file, fs.readFileSync(file, 'utf8').replace('= one', '= two'));
  fs.utimesSync(file, atime, mtime);
  await settle();
  const c = await memo();
  assert.notEqual(c, b);
  assert.equal(c.get('xet.test'), 'two');
});
