// reclaim killed (SIGKILL) at each of its fault points, overlay and forced copy forks: the next
// `reclaim` or `discard` converges, the fork's work is never lost (the fork is whole, or its pinned
// snapshot restores and verifies with the work in it), no mount or view is left behind, and
// `git fsck` is clean.
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { buildRichFixture } from '../support/fixtures';
import { gitTry, initRepo } from '../support/git';
import { killAt, pausedAt, FAULT_POINTS, type FaultPoint } from '../support/faults';
import { runAsync } from '../support/remote';
import { mountsUnder, withMountSandbox } from '../support/mounts';
import { capture, expectExit, parseJson, restore, verify, xet, XET_BIN } from '../support/xet';

const isRoot = process.getuid?.() === 0;
const POINTS = FAULT_POINTS.filter((p) => p.startsWith('reclaim:')) as FaultPoint[];

test('the reclaim fault points are the ones this test kills at', () => {
  assert.deepEqual(POINTS, [
    'reclaim:after-unmount',
    'reclaim:after-capture',
    'reclaim:after-pin',
    'reclaim:mid-remove',
  ]);
});

test(
  'reclaim killed at each fault point: the next reclaim or discard converges and the work is never lost',
  { skip: isRoot ? false : 'reclaim needs root for mounts (CI runs as root)' },
  async () => {
    await withMountSandbox((sb) => {
      const src = initRepo(sb, 'src');
      buildRichFixture(src);
      const snap = capture(sb, src.dir);
      const db = path.join(src.commonDir(), 'xet', 'xet.db');
      const row = (id: string) => {
        const conn = new Database(db, { readonly: true, fileMustExist: true });
        try {
          return conn
            .prepare('SELECT state, kept_snapshot AS kept, reclaimed_at AS reclaimedAt FROM forks WHERE id = ?')
            .get(id) as { state: string; kept: string | null; reclaimedAt: string | null };
        } finally {
          conn.close();
        }
      };
      const pins = () => src.git('for-each-ref', '--format=%(refname:lstrip=3)', 'refs/xet/pins/').trim();
      let n = 0;
      for (const mode of ['overlay', 'copy'] as const) {
        for (const point of POINTS) {
          if (mode === 'copy' && point === 'reclaim:after-unmount') continue; // nothing is unmounted
          for (const next of ['reclaim', 'discard'] as const) {
            const where = `${mode} ${point} then ${next}`;
            const f = sb.path(`f${++n}`);
            const made = parseJson(xet(sb, src.dir, ['fork', snap, f, '--mode', mode, '--json']));
            const work = `work of ${where}\n`;
            fs.writeFileSync(path.join(f, 'work.txt'), work);
            const args = ['reclaim', f, ...(mode === 'copy' ? ['--force'] : []), '--json'];
            killAt(sb, src.dir, args, point);
            const r = row(made.id);
            const upper = path.join(src.commonDir(), 'xet', 'forks', made.id, 'upper');
            if (point === 'reclaim:mid-remove') {
              // Past the mark: the pinned snapshot is recorded before anything is removed.
              assert.equal(r.state, 'discarding', where);
              assert.ok(r.kept && r.reclaimedAt, `${where}: ${JSON.stringify(r)}`);
              assert.ok(
                pins()
                  .split('\n')
                  .includes(r.kept as string),
                `${where}: pinned before the mark`,
              );
            } else {
              assert.equal(r.state, 'active', where);
              if (mode === 'overlay') {
                // Unmounted, the work in the upper layer; killed after the capture, the view is left.
                assert.equal(fs.readFileSync(path.join(upper, 'work.txt'), 'utf8'), work, where);
                assert.equal(mountsUnder(sb.root).includes(f), false, `${where}: the fork was unmounted`);
                // The view is `xet/tmp/reclaim-<pid>-<id>` (the pid: a recount removes a dead one's).
                const tmp = path.join(src.commonDir(), 'xet', 'tmp');
                const view = mountsUnder(sb.root).some(
                  (m) => path.dirname(m) === tmp && new RegExp(`^reclaim-\\d+-${made.id}$`).test(path.basename(m)),
                );
                assert.equal(view, point !== 'reclaim:after-unmount', where);
              } else {
                assert.equal(fs.readFileSync(path.join(f, 'work.txt'), 'utf8'), work, where);
              }
            }
            const again = xet(sb, src.dir, [
              next,
              f,
              ...(next === 'reclaim' && mode === 'copy' ? ['--force'] : []),
              '--json',
            ]);
            expectExit(again, 0);
            const out = parseJson(again);
            const kept: string = next === 'reclaim' ? out.reclaimed[0].snapshot : out.snapshot;
            if (point === 'reclaim:mid-remove') {
              assert.equal(kept, r.kept, `${where}: the same snapshot is reported`);
              if (next === 'reclaim') assert.equal(out.reclaimed[0].resumed, true, where);
            }
            if (next === 'reclaim') assert.ok(pins().split('\n').includes(kept), `${where}: pinned`);
            assert.equal(fs.existsSync(f), false, `${where}: the fork is gone`);
            assert.deepEqual(mountsUnder(sb.root), [], `${where}: no mount or view is left`);
            const after = row(made.id);
            assert.equal(after.state, 'discarded', where);
            assert.equal(after.kept, kept, where);
            // The work restores and verifies.
            const back = sb.path(`back${n}`);
            restore(sb, src.dir, kept, back);
            assert.equal(fs.readFileSync(path.join(back, 'work.txt'), 'utf8'), work, where);
            expectExit(verify(sb, src.dir, kept, back), 0);
            fs.rmSync(back, { recursive: true, force: true });
          }
        }
      }
      assert.deepEqual(
        fs.readdirSync(path.join(src.commonDir(), 'xet', 'tmp')).filter((x) => x.startsWith('reclaim-')),
        [],
        'no reclaim view directory is left',
      );
      const fsck = gitTry(sb, src.dir, ['fsck', '--no-progress']);
      assert.equal(fsck.status, 0, String(fsck.stderr));
      assert.doesNotMatch(`${fsck.stdout}${fsck.stderr}`, /missing|broken|error/i);
      assert.equal(
        src
          .git('worktree', 'list', '--porcelain')
          .split('\n')
          .filter((l) => l.startsWith('worktree ')).length,
        1,
      );
    });
  },
);

test(
  'reclaim paused after its capture: a concurrent discard waits its turn, a write into the fork cannot reach what was captured',
  { skip: isRoot ? false : 'reclaim needs root for mounts (CI runs as root)' },
  async () => {
    await withMountSandbox(async (sb) => {
      const src = initRepo(sb, 'src');
      buildRichFixture(src);
      const snap = capture(sb, src.dir);
      const f = sb.path('f');
      expectExit(xet(sb, src.dir, ['fork', snap, f, '--json']), 0);
      fs.writeFileSync(path.join(f, 'work.txt'), 'work\n');
      const paused = await pausedAt(sb, src.dir, ['reclaim', f, '--json'], 'reclaim:after-capture');
      // The fork is unmounted: what a process writes there now lands in the empty mountpoint, not in
      // the fork's layers, and the view the capture reads is read-only.
      assert.equal(mountsUnder(sb.root).includes(f), false);
      fs.writeFileSync(path.join(f, 'late.txt'), 'late\n');
      const view = path.join(
        src.commonDir(),
        'xet',
        'tmp',
        fs.readdirSync(path.join(src.commonDir(), 'xet', 'tmp')).find((n) => n.startsWith('reclaim-')) as string,
      );
      assert.throws(() => fs.writeFileSync(path.join(view, 'x'), 'x'), /EROFS/);
      const discard = runAsync(sb, src.dir, process.execPath, [XET_BIN, 'discard', f, '--json']);
      await new Promise((r) => setTimeout(r, 1500));
      paused.go();
      const done = await paused.done;
      assert.equal(done.code, 0, done.stdout);
      const got = JSON.parse(done.stdout).reclaimed[0];
      assert.equal(got.left, f, 'the directory stays, with what was written into it');
      assert.deepEqual(fs.readdirSync(f), ['late.txt']);
      const d = await discard;
      assert.equal(d.status, 3, d.stdout);
      assert.equal(JSON.parse(d.stdout).error.code, 'FORK_NOT_FOUND', 'the discard ran after the reclaim');
      const back = sb.path('back');
      restore(sb, src.dir, got.snapshot, back);
      assert.equal(fs.readFileSync(path.join(back, 'work.txt'), 'utf8'), 'work\n');
      assert.equal(fs.existsSync(path.join(back, 'late.txt')), false);
      assert.deepEqual(mountsUnder(sb.root), []);
    });
  },
);
