// Races made exact with the fault points: one process is held at a named point while another
// tries the same thing, so the loser's answer is the one the docs promise, every run.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { killAt, pausedAt } from '../support/faults';
import { initRepo } from '../support/git';
import { runAsync } from '../support/remote';
import { withSandbox } from '../support/sandbox';
import { XET_BIN, capture, expectError, expectExit, parseJson, verify, xet } from '../support/xet';

test('a fork racing one held after its worktree exists is refused with TARGET_NOT_EMPTY; the first completes', () =>
  withSandbox(async (sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n', 'd/b.txt': 'b\n' });
    const snap = capture(sb, r.dir);
    const f = sb.path('f');
    const first = await pausedAt(sb, r.dir, ['fork', snap, f, '--mode', 'copy', '--json'], 'fork:after-worktree');
    expectError(xet(sb, r.dir, ['fork', snap, f, '--mode', 'copy', '--json']), 'TARGET_NOT_EMPTY');
    first.go();
    const won = await first.done;
    assert.equal(won.code, 0, won.stdout);
    const v = verify(sb, r.dir, snap, f);
    expectExit(v, 0);
    assert.equal(parseJson(v).scope, 'fork');
  }));

test('a discard racing one that holds the fork waits for it, then finds it gone: FORK_NOT_FOUND', () =>
  withSandbox(async (sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    const snap = capture(sb, r.dir);
    const f = sb.path('f');
    expectExit(xet(sb, r.dir, ['fork', snap, f, '--mode', 'copy', '--json']), 0);
    fs.writeFileSync(path.join(f, 'work.txt'), 'work\n');
    const first = await pausedAt(sb, r.dir, ['discard', f, '--json'], 'discard:after-mark');
    // The first holds the fork's lock with its work kept and its removal not begun; the second queues.
    const second = runAsync(sb, r.dir, process.execPath, [XET_BIN, 'discard', f, '--json']);
    await new Promise((res) => setTimeout(res, 500));
    assert.ok(fs.existsSync(path.join(f, 'work.txt')), 'nothing is removed while the first is held');
    first.go();
    const won = await first.done;
    assert.equal(won.code, 0, won.stdout);
    const kept = JSON.parse(won.stdout).snapshot;
    assert.match(kept, /^[0-9a-f]{40}$/);
    const lost = await second;
    assert.equal(lost.status, 3, lost.stdout);
    assert.equal(JSON.parse(lost.stdout).error.code, 'FORK_NOT_FOUND', lost.stdout);
    assert.equal(fs.existsSync(f), false);
  }));

test("a user's git repack -a -d while a capture is between its pack and its ref: the snapshot keeps its objects", () =>
  withSandbox(async (sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    r.write('new.txt', 'only in the snapshot\n');
    r.write('b.txt', 'b\n');
    const held = await pausedAt(sb, r.dir, ['capture', '--json'], 'capture:before-ref');
    const packDir = r.gitPath('objects/pack');
    const keeps = fs.readdirSync(packDir).filter((n) => n.endsWith('.keep'));
    assert.equal(keeps.length, 1, 'the new pack is held');
    assert.match(fs.readFileSync(path.join(packDir, keeps[0]), 'utf8'), /^git-xet capture \d+\n$/);
    // The objects are unreferenced until the ref: without the hold, -d deletes them with their pack.
    r.git('repack', '-a', '-d', '-q');
    held.go();
    const out = await held.done;
    assert.equal(out.code, 0, out.stdout);
    const snap = JSON.parse(out.stdout).snapshot as string;
    assert.deepEqual(
      fs.readdirSync(packDir).filter((n) => n.endsWith('.keep')),
      [],
      'released once the ref exists',
    );
    r.git('fsck', '--connectivity-only', '--no-dangling');
    assert.equal(r.git('cat-file', 'blob', `${snap}:files/new.txt`), 'only in the snapshot\n');
    const copy = sb.path('copy');
    expectExit(xet(sb, r.dir, ['restore', snap, copy]), 0);
    expectExit(verify(sb, r.dir, snap, copy), 0);
  }));

test("a capture killed between its pack and its ref: the next capture removes its .keep, not anyone else's", () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    r.write('new.txt', 'new\n');
    killAt(sb, r.dir, ['capture', '--json'], 'capture:before-ref');
    const packDir = r.gitPath('objects/pack');
    const kept = () => fs.readdirSync(packDir).filter((n) => n.endsWith('.keep'));
    assert.equal(kept().length, 1, "the killed capture's hold is left");
    const mine = path.join(packDir, 'pack-0000000000000000000000000000000000000000.keep');
    fs.writeFileSync(mine, 'kept by its user\n');
    r.write('more.txt', 'more\n');
    capture(sb, r.dir);
    assert.deepEqual(kept(), [path.basename(mine)], "the dead capture's hold went; the user's stayed");
  }));

test('a file that changes after capture read it: the snapshot holds what was read, and the next capture what is there now', () =>
  withSandbox(async (sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    r.write('new.txt', 'as read\n');
    // Held after the files are read and packed, before the snapshot is made.
    const held = await pausedAt(sb, r.dir, ['capture', '--json'], 'capture:after-pack');
    r.write('new.txt', 'edited meanwhile\n');
    held.go();
    const out = await held.done;
    assert.equal(out.code, 0, out.stdout);
    const first = JSON.parse(out.stdout).snapshot as string;
    assert.equal(r.git('cat-file', 'blob', `${first}:files/new.txt`), 'as read\n');
    // The stat cache recorded the file as it was read: the edit is seen, never hidden by it.
    const snap = capture(sb, r.dir);
    assert.equal(r.git('cat-file', 'blob', `${snap}:files/new.txt`), 'edited meanwhile\n');
  }));

test('a new file deleted between the hash pass and the pack pass: WORKTREE_CHANGED, no snapshot naming unstored content', () =>
  withSandbox(async (sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    capture(sb, r.dir);
    r.write('new.txt', 'content the repository does not hold\n');
    const held = await pausedAt(sb, r.dir, ['capture', '--json'], 'capture:between-passes');
    fs.rmSync(r.p('new.txt'));
    held.go();
    const out = await held.done;
    assert.notEqual(out.code, 0, out.stdout);
    assert.equal(JSON.parse(out.stdout).error.code, 'WORKTREE_CHANGED', out.stdout);
    r.git('fsck', '--no-progress', '--strict');
    // The next capture records the tree as it is.
    const snap = capture(sb, r.dir);
    assert.equal(r.gitTry('cat-file', '-e', `${snap}:files/new.txt`).status === 0, false);
  }));

test('the first path of a hard-linked file renamed over during capture: its other links keep their own content', () =>
  withSandbox(async (sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    capture(sb, r.dir);
    r.write('l/0a', 'OLD shared content\n');
    fs.linkSync(r.p('l/0a'), r.p('l/0b'));
    // Held after both links were stat-ed (as one inode), before its first path (0a) is read.
    const held = await pausedAt(sb, r.dir, ['capture', '--json'], 'capture:before-links');
    r.write('l/new', 'NEW content of 0a\n');
    fs.renameSync(r.p('l/new'), r.p('l/0a'));
    held.go();
    const out = await held.done;
    assert.equal(out.code, 0, out.stdout);
    // 0a is read as it is now; 0b, no longer its link, is read for itself: it never held the new bytes.
    const first = JSON.parse(out.stdout).snapshot as string;
    assert.equal(r.git('cat-file', 'blob', `${first}:files/l/0a`), 'NEW content of 0a\n');
    assert.equal(r.git('cat-file', 'blob', `${first}:files/l/0b`), 'OLD shared content\n');
    const snap = capture(sb, r.dir);
    assert.equal(r.git('cat-file', 'blob', `${snap}:files/l/0a`), 'NEW content of 0a\n');
    assert.equal(r.git('cat-file', 'blob', `${snap}:files/l/0b`), 'OLD shared content\n');
  }));
