// git xet reclaim end to end: an overlay fork is captured from a read-only view once unmounted,
// pinned, removed, and forked back exactly; a fork in use, a clone or copy fork and bad input are
// refused with nothing changed; --idle picks only the idle forks. Runs as root (mounts).
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { killAt } from './support/faults';
import { Repo } from './support/git';
import { mountsUnder, withMountSandbox } from './support/mounts';
import type { Sandbox } from './support/sandbox';
import { collectGitState, compareGitStates, compareTrees, walkTree } from './support/state';
import { capture, expectError, expectExit, parseJson, showManifest, verify, xet } from './support/xet';
import { FORK_STATE, fork, forks, richSource } from './support/forks';

const isRoot = process.getuid?.() === 0;
const rootOnly = isRoot ? false : 'reclaim needs root for mounts (CI runs as root)';

function pinRefs(r: Repo): string {
  return r.git('for-each-ref', '--format=%(refname) %(objectname)', 'refs/xet/pins/').trim();
}

/** Files' mtimes (ms), the top-level .git excluded. */
function mtimes(dir: string): Map<string, number> {
  const out = new Map<string, number>();
  const visit = (rel: string) => {
    for (const name of fs.readdirSync(path.join(dir, rel))) {
      const p = rel ? `${rel}/${name}` : name;
      if (p === '.git') continue;
      const st = fs.lstatSync(path.join(dir, p));
      if (st.isDirectory()) visit(p);
      else out.set(p, st.mtimeMs);
    }
  };
  visit('');
  return out;
}

/** Everything about a fork that must come back: files, modes, times, index, HEAD, status. */
function forkState(sb: Sandbox, dir: string) {
  return { tree: walkTree(dir), times: mtimes(dir), git: collectGitState(sb, dir, FORK_STATE) };
}

function assertSameFork(a: ReturnType<typeof forkState>, b: ReturnType<typeof forkState>): void {
  const diffs = [...compareTrees(a.tree, b.tree), ...compareGitStates(a.git, b.git)];
  assert.deepEqual(diffs, [], `the fork came back different:\n${diffs.join('\n')}`);
  assert.deepEqual([...b.times].sort(), [...a.times].sort(), 'every file has its mtime back');
}

function reclaimRow(r: Repo, id: string): { state: string; kept: string | null; reclaimedAt: string | null } {
  const conn = new Database(path.join(r.commonDir(), 'xet', 'xet.db'), { readonly: true, fileMustExist: true });
  try {
    return conn
      .prepare('SELECT state, kept_snapshot AS kept, reclaimed_at AS reclaimedAt FROM forks WHERE id = ?')
      .get(id) as { state: string; kept: string | null; reclaimedAt: string | null };
  } finally {
    conn.close();
  }
}

/** Changes of every kind an overlay records: whiteouts, a renamed directory (redirect), an opaque
 * directory, copied-up edits, an exec bit, staged work, a commit, an empty directory. */
function workInFork(r: Repo): void {
  r.rm('b.txt');
  fs.renameSync(path.join(r.dir, 'untracked'), path.join(r.dir, 'moved'));
  r.rm('emptydir');
  r.write('emptydir/now-full.txt', 'full\n');
  r.write('link-to-a', 'not a link any more\n');
  r.chmod('a.txt', 0o755);
  r.write('added/new.txt', 'new in the fork\n');
  r.git('add', 'added/new.txt');
  r.write('ignored/more.bin', Buffer.from([9, 9, 9]));
  r.mkdir('fresh-empty');
  r.git('commit', '-q', '-m', 'in the fork', '--', 'added/new.txt');
  r.write('added/new.txt', 'edited after the commit\n');
}

test(
  'reclaim: an overlay fork is captured, verified, pinned and removed; git xet fork brings it back exactly',
  { skip: rootOnly },
  async () => {
    await withMountSandbox((sb) => {
      const src = richSource(sb);
      const snap = capture(sb, src.dir);
      const f = sb.path('f');
      const made = fork(sb, src.dir, snap, f);
      assert.equal(made.mode, 'overlay');
      const inFork = new Repo(sb, f);
      workInFork(inFork);
      const before = forkState(sb, f);
      const r = xet(sb, src.dir, ['reclaim', f, '--json']);
      expectExit(r, 0);
      const out = parseJson(r);
      assert.equal(out.reclaimed.length, 1);
      const got = out.reclaimed[0];
      assert.deepEqual(
        [got.id, got.dir, got.mode, got.pinned, got.exclusion, got.resumed, got.left],
        [made.id, f, 'overlay', true, 'unmounted', false, null],
      );
      assert.match(got.snapshot, /^[0-9a-f]{40}$/);
      assert.notEqual(got.snapshot, snap, 'the fork changed: a new snapshot holds it');
      // Gone: the directory, its mount, the reclaim view, the layers, the worktree admin dir.
      assert.equal(fs.existsSync(f), false);
      assert.deepEqual(mountsUnder(sb.root), []);
      assert.equal(fs.existsSync(path.join(src.commonDir(), 'xet', 'forks', made.id)), false);
      assert.equal(src.git('worktree', 'list', '--porcelain').includes(f), false);
      assert.deepEqual(
        fs.readdirSync(path.join(src.commonDir(), 'xet', 'tmp')).filter((n) => /reclaim/.test(n)),
        [],
      );
      // Pinned (the pin commit's parent is the snapshot), and recorded as reclaimed.
      assert.equal(pinRefs(src), `refs/xet/pins/${got.snapshot} ${src.git('rev-parse', got.pinRef).trim()}`);
      assert.equal(src.git('rev-parse', `${got.pinRef}^`).trim(), got.snapshot);
      const row = reclaimRow(src, made.id);
      assert.equal(row.state, 'discarded');
      assert.equal(row.kept, got.snapshot);
      assert.ok(row.reclaimedAt, 'reclaimed_at is set');
      const listed = forks(sb, src.dir, true)[0] as unknown as { keptSnapshot: string; reclaimedAt: string };
      assert.deepEqual([listed.keptSnapshot, listed.reclaimedAt], [got.snapshot, row.reclaimedAt]);
      // The snapshot names the fork as its source, not the private view it was read from.
      assert.equal(showManifest(sb, src.dir, got.snapshot).source.worktree, f);
      // Back, at the same place: the same files, times, index, HEAD and status, and it verifies.
      const back = fork(sb, src.dir, got.snapshot, f);
      assert.equal(back.mode, 'overlay');
      assertSameFork(before, forkState(sb, f));
      const v = verify(sb, src.dir, got.snapshot, f);
      expectExit(v, 0);
      assert.equal(parseJson(v).scope, 'fork');
      expectExit(xet(sb, src.dir, ['discard', f, '--json']), 0);
    });
  },
);

test(
  'reclaim: a busy overlay fork is FORK_BUSY and stays mounted; a failure after unmounting mounts it again',
  { skip: rootOnly },
  async () => {
    await withMountSandbox(async (sb) => {
      const src = richSource(sb);
      const snap = capture(sb, src.dir);
      const f = sb.path('f');
      fork(sb, src.dir, snap, f);
      fs.writeFileSync(path.join(f, 'work.txt'), 'work\n');
      const snapshotsBefore = src.git('for-each-ref', 'refs/xet/');
      const holder = spawn('sleep', ['60'], { cwd: path.join(f, 'dir'), stdio: 'ignore' });
      try {
        await new Promise((r) => setTimeout(r, 100));
        const err = expectError(xet(sb, src.dir, ['reclaim', f, '--json']), 'FORK_BUSY');
        assert.ok((err.details.pids as number[]).includes(holder.pid as number), 'names the process');
        assert.match(err.message, new RegExp(`process ${holder.pid}`));
      } finally {
        holder.kill('SIGKILL');
        await new Promise((r) => holder.once('exit', r));
      }
      assert.deepEqual(mountsUnder(sb.root), [f], 'still mounted, and no view left');
      assert.equal(fs.readFileSync(path.join(f, 'work.txt'), 'utf8'), 'work\n');
      assert.equal(forks(sb, src.dir)[0].state, 'active');
      assert.equal(src.git('for-each-ref', 'refs/xet/'), snapshotsBefore, 'nothing captured, nothing pinned');
      // A secret is left out of any capture: WORK_NOT_KEPT after the unmount, and the fork is
      // mounted again exactly as it was.
      fs.writeFileSync(path.join(f, '.env'), 'SECRET=1\n');
      const kept = expectError(xet(sb, src.dir, ['reclaim', f, '--json']), 'WORK_NOT_KEPT');
      assert.deepEqual(kept.details.paths, ['.env']);
      assert.deepEqual(mountsUnder(sb.root), [f], 'mounted again');
      assert.equal(fs.readFileSync(path.join(f, '.env'), 'utf8'), 'SECRET=1\n');
      assert.equal(fs.readFileSync(path.join(f, 'work.txt'), 'utf8'), 'work\n');
      assert.equal(forks(sb, src.dir)[0].state, 'active');
      assert.equal(pinRefs(src), '', 'nothing pinned');
      // Once the secret goes, the same fork is reclaimed, even from inside it (the run steps out).
      fs.rmSync(path.join(f, '.env'));
      const inside = parseJson(xet(sb, path.join(f, 'dir'), ['reclaim', '..', '--json']));
      assert.equal(inside.reclaimed[0]?.dir, f, JSON.stringify(inside));
      assert.equal(fs.existsSync(f), false);
    });
  },
);

test(
  'reclaim: a copy fork is FORK_NOT_EXCLUSIVE unless --force; --force still refuses one in use',
  { skip: rootOnly },
  async () => {
    await withMountSandbox(async (sb) => {
      const src = richSource(sb);
      const snap = capture(sb, src.dir);
      const f = sb.path('c');
      const made = fork(sb, src.dir, snap, f, ['--mode', 'copy']);
      fs.writeFileSync(path.join(f, 'work.txt'), 'copy work\n');
      const before = forkState(sb, f);
      const err = expectError(xet(sb, src.dir, ['reclaim', f, '--json']), 'FORK_NOT_EXCLUSIVE');
      assert.match(err.message, /copy fork.*--force/s);
      assert.equal(err.details.mode, 'copy');
      assert.equal(forks(sb, src.dir)[0].state, 'active');
      assert.equal(pinRefs(src), '');
      const holder = spawn('sleep', ['60'], { cwd: path.join(f, 'untracked'), stdio: 'ignore' });
      try {
        await new Promise((r) => setTimeout(r, 100));
        const busy = expectError(xet(sb, src.dir, ['reclaim', f, '--force', '--json']), 'FORK_BUSY');
        assert.ok((busy.details.pids as number[]).includes(holder.pid as number));
      } finally {
        holder.kill('SIGKILL');
        await new Promise((r) => holder.once('exit', r));
      }
      assert.equal(pinRefs(src), '', 'refused before the capture');
      const r = xet(sb, src.dir, ['reclaim', f, '--force', '--json']);
      expectExit(r, 0);
      const got = parseJson(r).reclaimed[0];
      assert.deepEqual([got.id, got.mode, got.exclusion, got.pinned], [made.id, 'copy', 'scan', true]);
      assert.equal(fs.existsSync(f), false);
      fork(sb, src.dir, got.snapshot, f, ['--mode', 'copy']);
      assertSameFork(before, forkState(sb, f));
      expectExit(verify(sb, src.dir, got.snapshot, f), 0);
    });
  },
);

test(
  'reclaim --idle: only forks idle that long; clone and copy forks are listed as refused',
  { skip: rootOnly },
  async () => {
    await withMountSandbox(async (sb) => {
      const src = richSource(sb);
      const snap = capture(sb, src.dir);
      const idle = fork(sb, src.dir, snap, sb.path('idle'));
      const written = fork(sb, src.dir, snap, sb.path('written'));
      const staged = fork(sb, src.dir, snap, sb.path('staged'));
      const copy = fork(sb, src.dir, snap, sb.path('copy'), ['--mode', 'copy']);
      const used = fork(sb, src.dir, snap, sb.path('used'));
      fs.writeFileSync(path.join(idle.dir, 'old-work.txt'), 'old\n');
      await new Promise((r) => setTimeout(r, 6500));
      // Idle, but a process is still inside: refused, and the run goes on.
      const holder = spawn('sleep', ['60'], { cwd: used.dir, stdio: 'ignore' });
      // Activity: a write in the upper layer; a `git add` (the admin dir's index) of an existing file.
      fs.appendFileSync(path.join(written.dir, 'a.txt'), 'more\n');
      const g = spawn('git', ['update-index', '--chmod=+x', 'b.txt'], { cwd: staged.dir, env: sb.env });
      await new Promise((r) => g.once('exit', r));
      const fresh = fork(sb, src.dir, snap, sb.path('fresh'));
      await new Promise((r) => setTimeout(r, 100));
      const r = xet(sb, src.dir, ['reclaim', '--idle', '5s', '--json']);
      holder.kill('SIGKILL');
      await new Promise((res) => holder.once('exit', res));
      expectExit(r, 0);
      const out = parseJson(r);
      assert.equal(out.idleSeconds, 5);
      assert.deepEqual(
        out.reclaimed.map((x: { id: string }) => x.id),
        [idle.id],
      );
      assert.deepEqual(
        out.refused.map((x: { id: string; code: string }) => [x.id, x.code]),
        [
          [copy.id, 'FORK_NOT_EXCLUSIVE'],
          [used.id, 'FORK_BUSY'],
        ],
      );
      assert.ok(mountsUnder(sb.root).includes(used.dir), 'the busy fork stays mounted');
      assert.deepEqual(out.active.map((x: { id: string }) => x.id).sort(), [written.id, staged.id, fresh.id].sort());
      assert.ok(Date.parse(out.reclaimed[0].lastActivity) < Date.now() - 5000);
      assert.equal(fs.existsSync(idle.dir), false);
      for (const d of [written.dir, staged.dir, fresh.dir]) assert.ok(mountsUnder(sb.root).includes(d), d);
      assert.equal(fs.readFileSync(path.join(copy.dir, 'a.txt'), 'utf8').length > 0, true);
      // The idle fork's work is in its pinned snapshot.
      const back = fork(sb, src.dir, out.reclaimed[0].snapshot, sb.path('idle-back'));
      assert.equal(fs.readFileSync(path.join(back.dir, 'old-work.txt'), 'utf8'), 'old\n');
      // With --force the copy fork goes too; `never` reclaims nothing.
      const forced = parseJson(xet(sb, src.dir, ['reclaim', '--idle', '5s', '--force', '--json']));
      assert.ok(
        forced.reclaimed.some((x: { id: string }) => x.id === copy.id),
        JSON.stringify(forced),
      );
      assert.equal(fs.existsSync(copy.dir), false);
      const never = parseJson(xet(sb, src.dir, ['reclaim', '--idle', 'never', '--json']));
      assert.deepEqual([never.reclaimed, never.refused], [[], []]);
    });
  },
);

test('reclaim: bad input is a typed error and changes nothing', { skip: rootOnly }, async () => {
  await withMountSandbox((sb) => {
    const src = richSource(sb);
    const snap = capture(sb, src.dir);
    const f = sb.path('f');
    fork(sb, src.dir, snap, f);
    const refs = src.git('for-each-ref', 'refs/xet/');
    const cases: [string[], string][] = [
      [['reclaim'], 'USAGE'],
      [['reclaim', f, '--idle', '1d'], 'USAGE'],
      [['reclaim', '--idle', 'soon'], 'USAGE'],
      [['reclaim', sb.path('nowhere')], 'FORK_NOT_FOUND'],
      [['reclaim', src.dir], 'FORK_NOT_FOUND'],
    ];
    for (const [args, code] of cases) {
      expectError(xet(sb, src.dir, [...args, '--json']), code, code === 'USAGE' ? 2 : 3);
      assert.equal(src.git('for-each-ref', 'refs/xet/'), refs, `${args.join(' ')}: no ref changed`);
      assert.deepEqual(mountsUnder(sb.root), [f], `${args.join(' ')}: the fork stays mounted`);
      assert.equal(forks(sb, src.dir)[0].state, 'active');
    }
    // A discard killed after keeping the work is the discard's to finish: reclaim says so and waits.
    const g = sb.path('g');
    fork(sb, src.dir, snap, g, ['--mode', 'copy']);
    fs.writeFileSync(path.join(g, 'work.txt'), 'work\n');
    killAt(sb, src.dir, ['discard', g, '--json'], 'discard:after-mark');
    const usage = expectError(xet(sb, src.dir, ['reclaim', g, '--force', '--json']), 'USAGE', 2);
    assert.match(usage.message, /git xet discard/);
    assert.deepEqual(fs.readdirSync(g).includes('work.txt'), true, 'nothing removed');
    const idle = parseJson(xet(sb, src.dir, ['reclaim', '--idle', '0s', '--force', '--json']));
    assert.equal(
      idle.reclaimed.some((x: { dir: string }) => x.dir === g),
      false,
      'not swept by --idle either',
    );
    expectExit(xet(sb, src.dir, ['discard', g, '--json']), 0);
  });
});
