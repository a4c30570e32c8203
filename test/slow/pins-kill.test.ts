// SIGKILL at every fault point of pin and drop (src/testing/fault-points.ts): after each kill the
// same command run again converges, the snapshot restores and verifies, and `git fsck` is clean.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FAULT_POINTS, killAt, type FaultPoint } from '../support/faults';
import { gitTry, initRepo, type Repo } from '../support/git';
import { assertVerifies } from '../support/roundtrip';
import { withSandbox, type Sandbox } from '../support/sandbox';
import { capture, expectExit, parseJson, restore, xet } from '../support/xet';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
function json(sb: Sandbox, cwd: string, args: string[]): any {
  const res = xet(sb, cwd, [...args, '--json']);
  expectExit(res, 0);
  return parseJson(res);
}

const xetRefs = (r: Repo) => r.git('for-each-ref', '--format=%(refname) %(objectname)', 'refs/xet/');

function restoresAndVerifies(sb: Sandbox, r: Repo, snap: string, name: string): void {
  const copy = sb.path(name);
  restore(sb, r.dir, snap, copy);
  assertVerifies(sb, r.dir, snap, copy);
  const fsck = gitTry(sb, r.dir, ['fsck', '--no-dangling', '--no-progress']);
  assert.equal(fsck.status, 0, `git fsck after ${name}: ${fsck.stdout}${fsck.stderr}`);
}

const POINTS = FAULT_POINTS.filter((p) => p.startsWith('pin:') || p.startsWith('drop:'));

test('the pin and drop fault points are the ones this file kills at', () => {
  assert.deepEqual([...POINTS].sort(), ['drop:after-check', 'drop:after-refs', 'pin:after-objects', 'pin:after-ref']);
});

for (const point of POINTS.filter((p) => p.startsWith('pin:')) as FaultPoint[]) {
  test(`SIGKILL at ${point} of a pin that undrops: the next pin converges`, () =>
    withSandbox((sb) => {
      const r = initRepo(sb, 'src');
      r.commit('c', { 'a.txt': 'a\n' });
      r.write('u.txt', 'untracked\n');
      const snap = capture(sb, r.dir);
      json(sb, r.dir, ['drop', snap]);
      const before = xetRefs(r);
      killAt(sb, r.dir, ['pin', snap, '--reason', 'kept', '--json'], point);
      const after = xetRefs(r);
      if (point === 'pin:after-objects') assert.equal(after, before, 'no ref moved before the transaction');
      else {
        // The transaction is whole: pinned and back, never one without the other.
        assert.match(after, new RegExp(`refs/xet/snapshots/${snap} `));
        assert.match(after, new RegExp(`refs/xet/pins/${snap} `));
        assert.doesNotMatch(after, /refs\/xet\/dropped\//);
        // The sidecar row was not written yet: the ref is the pin anyway.
        assert.equal(json(sb, r.dir, ['pins']).pins[0].sidecar, 'missing');
      }
      const again = json(sb, r.dir, ['pin', snap, '--reason', 'kept']);
      assert.equal(again.created, point === 'pin:after-objects', JSON.stringify(again));
      const pins = json(sb, r.dir, ['pins']).pins;
      assert.deepEqual(
        pins.map((p: Record<string, unknown>) => [p.snapshot, p.reason, p.problem, p.sidecar]),
        [[snap, 'kept', null, 'same']],
      );
      restoresAndVerifies(sb, r, snap, 'copy');
    }));
}

for (const point of POINTS.filter((p) => p.startsWith('drop:')) as FaultPoint[]) {
  test(`SIGKILL at ${point}: the next drop converges, undrop brings the snapshot back`, () =>
    withSandbox((sb) => {
      const r = initRepo(sb, 'src');
      r.commit('c', { 'a.txt': 'a\n' });
      r.write('u.txt', 'untracked\n');
      const first = capture(sb, r.dir);
      r.write('v.txt', 'second\n');
      const second = capture(sb, r.dir);
      const before = xetRefs(r);
      killAt(sb, r.dir, ['drop', first, second, '--json'], point);
      const after = xetRefs(r);
      if (point === 'drop:after-check') assert.equal(after, before, 'nothing changed before the transaction');
      else {
        assert.doesNotMatch(after, /refs\/xet\/snapshots\//, 'both dropped in the one transaction');
        for (const s of [first, second]) assert.match(after, new RegExp(`refs/xet/dropped/${s} `));
      }
      const again = json(sb, r.dir, ['drop', first, second]);
      assert.deepEqual(
        again.dropped.map((d: { created: boolean }) => d.created),
        point === 'drop:after-check' ? [true, true] : [false, false],
      );
      const u = json(sb, r.dir, ['undrop', first, second]);
      assert.deepEqual(
        u.undropped.map((x: { from: string }) => x.from),
        ['dropped', 'dropped'],
      );
      restoresAndVerifies(sb, r, first, 'copy-1');
      restoresAndVerifies(sb, r, second, 'copy-2');
    }));
}
