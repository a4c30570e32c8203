// Forks killed mid-way under the storage allowance (issue 11): a fork killed with its layer made
// (loop device attached, or a tmpfs mounted) is removed whole by discard, with no loop device left;
// one killed while building its base leaves a `.build-<pid>-…` temporary that the next writer's
// recount removes; one killed after its base leaves the base recorded at its real size.
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { killAt } from '../support/faults';
import { fork, forks } from '../support/forks';
import { initRepo, type Repo } from '../support/git';
import { mountsUnder, withMountSandbox } from '../support/mounts';
import type { Sandbox } from '../support/sandbox';
import { walkTree } from '../support/state';
import { capture, expectExit, xet } from '../support/xet';

const isRoot = process.getuid?.() === 0;
const rootOnly = isRoot ? false : 'fork layers need root for mounts and loop devices (CI runs as root)';

function source(sb: Sandbox): Repo {
  const r = initRepo(sb, 'src');
  const files: Record<string, string> = {};
  for (let i = 0; i < 500; i++) files[`d${i % 10}/f${i}.txt`] = `${i}\n`.repeat(50);
  r.commit('files', files);
  return r;
}

function loopDevices(): string {
  return spawnSync('losetup', ['-a'], { encoding: 'utf8' }).stdout;
}

function ledger(r: Repo, sql: string, ...args: string[]): Record<string, number>[] {
  const db = new Database(path.join(r.commonDir(), 'xet', 'xet.db'), { readonly: true });
  try {
    return db.prepare(sql).all(...args) as Record<string, number>[];
  } finally {
    db.close();
  }
}

function builds(r: Repo): string[] {
  const dir = path.join(r.commonDir(), 'xet', 'bases');
  return fs.existsSync(dir) ? fs.readdirSync(dir).filter((n) => n.startsWith('.build-')) : [];
}

/** st_size of every file under a base, as the ledger counts it. */
function baseBytes(r: Repo, snap: string): number {
  let bytes = 0;
  for (const e of walkTree(path.join(r.commonDir(), 'xet', 'bases', snap)).entries.values()) {
    if (e.type === 'file') bytes += e.size ?? 0;
    if (e.type === 'symlink') bytes += Buffer.byteLength(e.target ?? '');
  }
  return bytes;
}

/** A test in a mount sandbox with a captured source repository and a fork directory name. */
function forkTest(name: string, body: (sb: Sandbox, r: Repo, snap: string, f: string) => void): void {
  test(name, { skip: rootOnly }, () =>
    withMountSandbox((sb) => {
      const r = source(sb);
      body(sb, r, capture(sb, r.dir), sb.path('f'));
    }),
  );
}

forkTest(
  'a fork killed with its layer made (fork:after-layer) is removed whole by discard: no mount, no loop device',
  (sb, r, snap, f) => {
    for (const layer of ['image', 'tmpfs']) {
      r.git('config', 'xet.fork.layer', layer);
      killAt(sb, r.dir, ['fork', snap, f, '--mode', 'overlay', '--allowance', '1M,100', '--json'], 'fork:after-layer');
      const listed = forks(sb, r.dir);
      assert.equal(listed.length, 1, layer);
      assert.equal(listed[0].state, 'incomplete', layer);
      const own = path.join(r.commonDir(), 'xet', 'forks', listed[0].id);
      assert.equal(mountsUnder(own).length, 1, `${layer}: the layer is mounted`);
      if (layer === 'image') assert.match(loopDevices(), new RegExp(`${own}/layer.img`));
      expectExit(xet(sb, r.dir, ['discard', f, '--json']), 0);
      assert.equal(fs.existsSync(own), false, `${layer}: the fork's dir is gone`);
      assert.doesNotMatch(loopDevices(), new RegExp(own), `${layer}: no loop device left attached`);
      assert.deepEqual(mountsUnder(sb.root), [], layer);
      assert.deepEqual(forks(sb, r.dir), [], layer);
    }
  },
);

forkTest(
  "a fork killed while building its base: the next writer's recount removes the half-built base; killed after it, the base is recorded at its size",
  (sb, r, snap, f) => {
    killAt(sb, r.dir, ['fork', snap, f, '--mode', 'overlay', '--json'], 'fork:mid-base');
    const left = builds(r);
    assert.equal(left.length, 1, 'the half-built base is there');
    assert.match(left[0], new RegExp(`^\\.build-\\d+-${snap.slice(0, 12)}-[0-9a-f]+$`));
    expectExit(xet(sb, r.dir, ['discard', f, '--json']), 0);
    // The next writer (a fork: admitted into the repository root) finds the dead writer's marker,
    // recounts, and the recount removes the dead process's temporary files.
    fork(sb, r.dir, snap, f, ['--mode', 'overlay']);
    assert.deepEqual(builds(r), [], 'the half-built base was removed');
    const counted = ledger(r, "SELECT leftovers_removed AS n FROM allowance_counts WHERE root = 'repository'");
    assert.equal(counted[0]?.n, 1, 'the recount says it removed one leftover');
    const part = ledger(r, 'SELECT bytes FROM allowance_parts WHERE part = ?', `base:${snap}`);
    assert.equal(part[0]?.bytes, baseBytes(r, snap), 'the base built afterwards is recorded at its size');
    expectExit(xet(sb, r.dir, ['discard', f, '--json']), 0);

    // Killed right after its base: the base is whole and recorded (before its rename) at its size.
    r.commit('more', { 'added.txt': 'more\n' });
    const snap2 = capture(sb, r.dir);
    killAt(sb, r.dir, ['fork', snap2, f, '--mode', 'overlay', '--json'], 'fork:after-base');
    assert.deepEqual(builds(r), []);
    const part2 = ledger(r, 'SELECT bytes FROM allowance_parts WHERE part = ?', `base:${snap2}`);
    assert.equal(part2[0]?.bytes, baseBytes(r, snap2));
    expectExit(xet(sb, r.dir, ['discard', f, '--json']), 0);
    assert.deepEqual(mountsUnder(sb.root), []);
  },
);

forkTest(
  'a fork killed before its registry row (at its admission) leaves no directory; killed after it, discard removes the row and the directory',
  (sb, r, snap, f) => {
    killAt(sb, r.dir, ['fork', snap, f, '--mode', 'overlay', '--allowance', '1M', '--json'], 'allowance:after-admit');
    assert.equal(fs.existsSync(f), false, 'the target directory is made only after the row');
    assert.deepEqual(forks(sb, r.dir), []);
    killAt(sb, r.dir, ['fork', snap, f, '--mode', 'overlay', '--allowance', '1M', '--json'], 'fork:after-base');
    assert.equal(forks(sb, r.dir)[0]?.state, 'incomplete');
    expectExit(xet(sb, r.dir, ['discard', f, '--json']), 0);
    assert.equal(fs.existsSync(f), false, 'discard removed the directory');
    assert.deepEqual(forks(sb, r.dir), []);
    fork(sb, r.dir, snap, f, ['--mode', 'overlay', '--allowance', '1M']);
    expectExit(xet(sb, r.dir, ['discard', f, '--json']), 0);
    assert.deepEqual(mountsUnder(sb.root), []);
  },
);
