// The daemon's watch of its worktree (src/daemon/tree-watch.ts) and the walk it lends the last
// records to (WalkMemo, src/snapshot/walk.ts): after every random batch of changes to a tree
// (files and directories made, removed, renamed, moved out and back, replaced by another kind, a
// nested repository appearing and going) and to the walk's inputs (tracked and ignored paths, the
// policy), the watched walk gives exactly what a fresh walk gives; a walk after no change reads no
// directory; and what the watch cannot vouch for (a mount added below, one directory at two paths,
// a full event queue, a file system without local events) makes it read everything.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { TreeWatch } from '../src/daemon/tree-watch';
import { GitConfig } from '../src/git/config';
import { native, nativeMissing } from '../src/native';
import { resolvePolicy } from '../src/snapshot/policy';
import { walkWorktree, type WalkResult } from '../src/snapshot/walk';
import type { WalkInputs } from '../src/snapshot/walk-watch';
import { withMountSandbox } from './support/mounts';
import { prng, randomTree } from './support/random-tree';

function unavailable(): string | null {
  if (!native) return `the native module is not loaded (${nativeMissing}): the daemon does not watch`;
  if (process.platform !== 'linux') return 'inotify is Linux only';
  return null;
}

const isRoot = process.getuid?.() === 0;

function sorted(r: WalkResult): WalkResult {
  return { ...r, paths: [...r.paths].sort(), attributeFiles: [...r.attributeFiles].sort() };
}

/** One watched walk (begin, walk, end) and a fresh one, held to one result. */
function walkBoth(
  w: TreeWatch,
  inputs: WalkInputs,
): { memoUsed: boolean; reused: number; reusedDirs: Set<string>; records: number; whole: boolean } {
  const memo = w.begin(inputs);
  const before = memo ? new Map(memo.records) : new Map();
  const input = {
    ...inputs,
    tracked: new Set(inputs.tracked),
    ignored: new Set(inputs.ignored),
    gitDirs: [...inputs.gitDirs],
  };
  let watched: WalkResult;
  try {
    watched = walkWorktree({ ...input, memo: memo ?? undefined });
  } catch (e) {
    if (memo) w.end(memo, null);
    throw e;
  }
  if (memo) w.end(memo, memo.next ?? null);
  const fresh = walkWorktree({ ...input, listing: 'js' });
  assert.deepEqual(sorted(watched), sorted(fresh));
  const reusedDirs = new Set<string>();
  for (const [rel, rec] of memo?.next ?? []) if (before.get(rel) === rec) reusedDirs.add(rel);
  return {
    memoUsed: memo !== null,
    reused: reusedDirs.size,
    reusedDirs,
    records: memo?.next?.size ?? 0,
    whole: memo?.replayedWhole === true,
  };
}

/** Every directory and file (symlinks count as files) under root, relative, without .git dirs. */
function listTree(root: string): { dirs: string[]; files: string[] } {
  const dirs: string[] = [''];
  const files: string[] = [];
  const go = (rel: string): void => {
    for (const d of fs.readdirSync(path.join(root, rel), { withFileTypes: true })) {
      if (d.name === '.git') continue;
      const r = rel ? `${rel}/${d.name}` : d.name;
      if (d.isDirectory()) {
        dirs.push(r);
        go(r);
      } else files.push(r);
    }
  };
  go('');
  return { dirs, files };
}

function policyOf(ignored: 'all' | 'none', include: string[] = []) {
  const cfg = new GitConfig([]);
  return resolvePolicy(cfg, { ignored, include });
}

/** A walk of `root` with nothing tracked or ignored, in the shape both the walk and the watch take. */
function plainInputs(root: string) {
  return {
    root,
    tracked: new Set<string>(),
    ignored: new Set<string>(),
    policy: policyOf('all'),
    gitDirs: [] as string[],
  };
}

/** Walks until the watch vouches for every directory, and checks it does: a first walk reads ahead
 * before its watches exist, the second reads what they vouch for, the third replays everything. */
function settleWatch(w: TreeWatch, inputs: WalkInputs): void {
  walkBoth(w, inputs);
  walkBoth(w, inputs);
  const r = walkBoth(w, inputs);
  assert.equal(r.reused, r.records, 'settled: nothing read again');
}

test('a watched walk gives what a fresh walk gives, after every batch of random changes', async (t) => {
  const why = unavailable();
  if (why) return t.diagnostic(`skipped: ${why}`);
  await withMountSandbox(async (sb) => {
    for (const seed of [1, 2, 3]) {
      const root = sb.path(`tree-${seed}`);
      const parking = sb.path(`parking-${seed}`);
      fs.mkdirSync(root);
      fs.mkdirSync(parking);
      randomTree(root, seed);
      const rnd = prng(seed * 977);
      const pick = <T>(xs: T[]): T | undefined => (xs.length ? xs[Math.floor(rnd() * xs.length)] : undefined);
      const w = new TreeWatch(root);
      let tracked = new Set<string>();
      let ignored = new Set<string>();
      let policy = policyOf('all');
      let n = 0;
      const fresh = () => `n${seed}-${n++}`;
      let replays = 0;
      for (let step = 0; step < 70; step++) {
        const { dirs, files } = listTree(root);
        const changes = step % 7 === 6 ? 0 : 1 + Math.floor(rnd() * 4);
        for (let c = 0; c < changes; c++) {
          const dir = pick(dirs) as string;
          const at = (name: string) => path.join(root, dir, name);
          const file = pick(files);
          const sub = pick(dirs.filter((d) => d !== ''));
          try {
            switch (Math.floor(rnd() * 13)) {
              case 0:
                fs.writeFileSync(at(fresh()), 'new');
                break;
              case 1:
                if (file) fs.rmSync(path.join(root, file), { force: true });
                break;
              case 2: {
                const d = at(fresh());
                fs.mkdirSync(d);
                if (rnd() < 0.7) fs.writeFileSync(path.join(d, 'inside'), 'x');
                break;
              }
              case 3:
                if (sub) fs.rmSync(path.join(root, sub), { recursive: true, force: true });
                break;
              case 4:
                if (file) fs.renameSync(path.join(root, file), at(fresh()));
                break;
              case 5:
                // A directory moved elsewhere in the tree (never into itself).
                if (sub && !`${dir}/`.startsWith(`${sub}/`)) fs.renameSync(path.join(root, sub), at(fresh()));
                break;
              case 6: {
                // Out of the tree, and a parked one back in.
                const parked = fs.readdirSync(parking);
                if (parked.length && rnd() < 0.5) fs.renameSync(path.join(parking, parked[0]), at(fresh()));
                else if (sub) fs.renameSync(path.join(root, sub), path.join(parking, fresh()));
                break;
              }
              case 7:
                if (file) {
                  const abs = path.join(root, file);
                  fs.rmSync(abs, { force: true });
                  fs.mkdirSync(abs);
                  fs.writeFileSync(path.join(abs, 'was-a-file'), 'x');
                }
                break;
              case 8:
                fs.symlinkSync(rnd() < 0.5 ? '.' : 'missing', at(fresh()));
                break;
              case 9:
                // A nested repository appears, or goes.
                if (sub) {
                  const g = path.join(root, sub, '.git');
                  if (fs.existsSync(g)) fs.rmSync(g, { recursive: true, force: true });
                  else {
                    fs.mkdirSync(g);
                    fs.writeFileSync(path.join(g, 'HEAD'), 'ref: refs/heads/main\n');
                  }
                }
                break;
              case 10:
                if (file && fs.lstatSync(path.join(root, file)).isFile())
                  fs.appendFileSync(path.join(root, file), 'more');
                break;
              case 11:
                if (file && fs.lstatSync(path.join(root, file)).isFile())
                  fs.chmodSync(path.join(root, file), rnd() < 0.5 ? 0o600 : 0o755);
                break;
              case 12:
                fs.mkdirSync(at(fresh())); // empty
                break;
            }
          } catch (e) {
            // A target that a change before it in this batch removed.
            if (
              !['ENOENT', 'ENOTDIR', 'EEXIST', 'ENOTEMPTY', 'EINVAL', 'EISDIR', 'ERR_FS_EISDIR'].includes(
                (e as NodeJS.ErrnoException).code ?? '',
              )
            )
              throw e;
          }
        }
        // The walk's inputs change now and then (not on the steps that check replaying).
        if (changes && rnd() < 0.2) {
          const now = listTree(root);
          tracked = new Set(now.files.filter(() => rnd() < 0.3));
          ignored = new Set([
            ...now.files.filter(() => rnd() < 0.1),
            ...now.dirs.filter((d) => d !== '' && rnd() < 0.1).map((d) => `${d}/`),
          ]);
          policy = rnd() < 0.3 ? policyOf('none') : rnd() < 0.2 ? policyOf('all', ['*x*']) : policyOf('all');
        }
        const r = walkBoth(w, { root, tracked, ignored, policy, gitDirs: [] });
        assert.ok(r.memoUsed, `seed ${seed} step ${step}: the watch lent no memo (${w.state().reason})`);
        if (changes === 0 && step > 7) {
          // Nothing changed since the last walk: every directory's record replayed, none read.
          assert.equal(
            r.reused,
            r.records,
            `seed ${seed} step ${step}: ${r.records - r.reused} directories read again`,
          );
          // ... and as one: the last result, not a replay of each record (walkBoth compared it).
          assert.ok(r.whole, `seed ${seed} step ${step}: not replayed whole`);
          replays++;
        }
      }
      assert.ok(replays >= 8, `seed ${seed}: only ${replays} steps replayed`);
      assert.equal(w.state().watching, true, String(w.state().reason));
      w.close();
    }
  });
});

test('a directory replaced at its path by another is read, not replayed', async (t) => {
  const why = unavailable();
  if (why) return t.diagnostic(`skipped: ${why}`);
  await withMountSandbox(async (sb) => {
    const root = sb.path('tree');
    const mk = (rel: string, files: string[]): void => {
      fs.mkdirSync(path.join(root, rel), { recursive: true });
      for (const f of files) fs.writeFileSync(path.join(root, rel, f), f);
    };
    mk('a/x/deep', ['one', 'two']);
    mk('a/y', ['three']);
    mk('c', ['four']);
    const inputs = plainInputs(root);
    const w = new TreeWatch(root);
    const settle = () => settleWatch(w, inputs);
    settle();
    const changes: [string, () => void][] = [
      [
        'renamed away, a new one under its old name',
        () => {
          fs.renameSync(path.join(root, 'a/x'), path.join(root, 'a/moved'));
          mk('a/x/deep', ['other']);
        },
      ],
      [
        'removed and made again',
        () => {
          fs.rmSync(path.join(root, 'a/x'), { recursive: true });
          mk('a/x/deep', ['again']);
        },
      ],
      [
        'two swapped',
        () => {
          fs.renameSync(path.join(root, 'a/y'), path.join(root, 'a/tmp'));
          fs.renameSync(path.join(root, 'c'), path.join(root, 'a/y'));
          fs.renameSync(path.join(root, 'a/tmp'), path.join(root, 'c'));
        },
      ],
      [
        'moved out of the tree and another moved in',
        () => {
          fs.renameSync(path.join(root, 'a/moved'), sb.path('outside'));
          fs.mkdirSync(sb.path('incoming/sub'), { recursive: true });
          fs.writeFileSync(sb.path('incoming/sub/five'), 'x');
          fs.renameSync(sb.path('incoming'), path.join(root, 'a/moved'));
        },
      ],
      [
        'moved in again, changed while out',
        () => {
          fs.writeFileSync(sb.path('outside/deep/changed'), 'x');
          fs.rmSync(path.join(root, 'a/moved'), { recursive: true });
          fs.renameSync(sb.path('outside'), path.join(root, 'a/moved'));
        },
      ],
      [
        'a file where a directory was',
        () => {
          fs.rmSync(path.join(root, 'a/x'), { recursive: true });
          fs.writeFileSync(path.join(root, 'a/x'), 'file');
        },
      ],
      [
        'a directory where a file was',
        () => {
          fs.rmSync(path.join(root, 'a/x'));
          mk('a/x', ['dir-again']);
        },
      ],
    ];
    for (const [what, change] of changes) {
      change();
      walkBoth(w, inputs); // asserts the watched walk equals a fresh one
      settle();
      assert.equal(w.state().watching, true, `${what}: ${w.state().reason}`);
    }
    // A directory's own permissions decide what a reader other than root may open below it, with
    // no event down there: its whole subtree is read again, and nothing else.
    fs.chmodSync(path.join(root, 'a'), 0o700);
    const after = walkBoth(w, inputs);
    for (const d of after.reusedDirs) assert.ok(d !== 'a' && !d.startsWith('a/'), `${d} replayed`);
    assert.ok(after.reusedDirs.has('c'), 'what is beside it replayed');
    w.close();
  });
});

test('a directory changed between its read-ahead and its watch is read again', async (t) => {
  const why = unavailable();
  if (why) return t.diagnostic(`skipped: ${why}`);
  await withMountSandbox(async (sb) => {
    const root = sb.path('tree');
    for (const d of ['a', 'b/c']) {
      fs.mkdirSync(path.join(root, d), { recursive: true });
      fs.writeFileSync(path.join(root, d, 'f'), 'x');
    }
    const inputs = plainInputs(root);
    const w = new TreeWatch(root);
    // The first walk reads every directory ahead, watches them all and reads them again; a
    // directory made in between is in the second read but not watched until the walk gets to it:
    // a file made in it before that is in neither its listing nor an event.
    const memo = w.begin(inputs);
    assert.ok(memo?.readAhead && memo.prewatch);
    const { watch, prewatch } = memo;
    memo.prewatch = (dirs) => {
      prewatch(dirs);
      fs.mkdirSync(path.join(root, 'b/new'));
      fs.writeFileSync(path.join(root, 'b/new/f'), 'x');
    };
    let late = false;
    memo.watch = (rel, abs) => {
      if (rel === 'b/new' && !late) {
        fs.writeFileSync(path.join(root, 'b/new/late'), 'x');
        late = true;
      }
      return watch(rel, abs);
    };
    const first = walkWorktree({ ...inputs, memo });
    w.end(memo, memo.next ?? null);
    assert.ok(late);
    assert.ok(first.paths.includes('b/new/f') && !first.paths.includes('b/new/late'), 'the read-ahead predates it');
    const second = walkBoth(w, inputs);
    assert.ok(second.records > 0);
    w.close();
  });
});

test('the watch reads everything again after what it cannot vouch for', async (t) => {
  const why = unavailable() ?? (isRoot ? null : 'mounting needs root');
  if (why) return t.diagnostic(`skipped: ${why}`);
  await withMountSandbox(async (sb) => {
    const root = sb.path('tree');
    fs.mkdirSync(root);
    randomTree(root, 11);
    fs.mkdirSync(path.join(root, 'a'));
    fs.writeFileSync(path.join(root, 'a', 'f'), 'x');
    fs.mkdirSync(path.join(root, 'b'));
    const inputs = plainInputs(root);
    const w = new TreeWatch(root);
    const settle = () => settleWatch(w, inputs);
    settle();

    // A file system mounted below: its directories' listings changed without an event here.
    const mnt = path.join(root, 'b');
    assert.equal(spawnSync('mount', ['-t', 'tmpfs', 'xet-watch-test', mnt]).status, 0);
    fs.writeFileSync(path.join(mnt, 'on-tmpfs'), 'x');
    let r = walkBoth(w, inputs);
    assert.equal(r.reused, 0);
    assert.equal(w.state().reason, 'the mounts under the worktree changed');
    settle();
    assert.equal(spawnSync('umount', [mnt]).status, 0);
    r = walkBoth(w, inputs);
    assert.equal(r.reused, 0, 'unmounted: everything read again');
    settle();

    // One directory at two paths: events for either cannot be told apart.
    assert.equal(spawnSync('mount', ['--bind', path.join(root, 'a'), mnt]).status, 0);
    walkBoth(w, inputs);
    assert.match(String(w.state().reason), /are one directory|mounts under the worktree changed/);
    walkBoth(w, inputs);
    assert.match(String(w.state().reason), /are one directory/);
    fs.writeFileSync(path.join(root, 'a', 'through-a'), 'x');
    walkBoth(w, inputs); // (and the same through b, compared with a fresh walk)
    assert.equal(spawnSync('umount', [mnt]).status, 0);
    settle();

    // One directory at two paths found in the middle of a walk (what a bind mount made while the
    // walk runs gives): the watch resets, and nothing is vouched for in the rest of the walk, not
    // even the directories the events drained before it named (their marks went with it).
    for (let i = 0; i < 12; i++) {
      fs.mkdirSync(path.join(root, `d${i}`), { recursive: true });
      fs.writeFileSync(path.join(root, `d${i}`, 'f'), 'x');
    }
    settle();
    for (let i = 0; i < 12; i++) fs.writeFileSync(path.join(root, `d${i}`, 'new'), 'x');
    const memo = w.begin(inputs);
    assert.ok(memo && !memo.readAhead);
    assert.equal(memo.unchanged('d0'), false);
    assert.equal(memo.unchanged('a'), true);
    assert.equal(memo.watch('alias', path.join(root, 'a')), 'no');
    assert.match(String(w.state().reason), /alias and a are one directory/);
    for (const rel of ['', 'a', 'd0', 'd11']) assert.equal(memo.unchanged(rel), false, rel);
    const midWalk = walkWorktree({ ...inputs, memo });
    w.end(memo, memo.next ?? null);
    assert.deepEqual(sorted(midWalk), sorted(walkWorktree({ ...inputs, listing: 'js' })));
    settle();

    // A file system that changes without local events is not watched at all.
    assert.equal(spawnSync('mount', ['-t', 'proc', 'proc', mnt]).status, 0);
    assert.equal(w.begin(inputs), null);
    assert.match(String(w.state().reason), /is a proc file system/);
    assert.equal(spawnSync('umount', [mnt]).status, 0);
    settle();
    w.close();

    // A full event queue: what was lost is unknown. (More events than the queue holds, made here:
    // lowering fs.inotify.max_queued_events would change it for every program on the machine.)
    const limit = Number(fs.readFileSync('/proc/sys/fs/inotify/max_queued_events', 'utf8').trim());
    const w2 = new TreeWatch(root);
    walkBoth(w2, inputs);
    walkBoth(w2, inputs);
    if (!(limit > 0 && limit <= 100_000)) {
      t.diagnostic(`overflow not checked: fs.inotify.max_queued_events is ${limit}`);
    } else {
      const burst = path.join(root, 'a');
      for (let i = 0; i < limit / 2 + 64; i++) {
        fs.writeFileSync(path.join(burst, `burst-${i}`), 'x');
        fs.rmSync(path.join(burst, `burst-${i}`));
      }
      r = walkBoth(w2, inputs);
      assert.equal(w2.state().reason, 'the event queue overflowed');
      assert.equal(r.reused, 0);
    }
    w2.close();
  });
});
