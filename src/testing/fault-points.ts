// Fault points: named places in capture, restore, fork, discard and the remote helper where the test
// suite can kill or stop the process, so that kill and race tests land exactly where they mean to
// instead of at a delay that a slow machine turns into "before anything happened".
//
//   GIT_XET_TEST_DIE_AT=<point>        SIGKILL this process at <point>
//   GIT_XET_TEST_PAUSE_AT=<p>[,<p>…]    wait at each point (once) until `<dir>/<point>.go` exists (60 s max)
//   GIT_XET_TEST_PAUSE_DIR=<dir>       where a point reached is announced: `<dir>/<point>.reached`
//   GIT_XET_TEST_STALL_AT=<point>      await, at <point>, a promise nothing will ever settle: the
//                                      shape of a lost event (the CLI must not exit 0 on it)
//
// Unset (every real run) a point costs one environment lookup. The names are listed in FAULT_POINTS
// so a test can check that each one it kills at exists.

import * as fs from 'node:fs';
import * as path from 'node:path';

export const DIE_AT_ENV = 'GIT_XET_TEST_DIE_AT';
export const PAUSE_AT_ENV = 'GIT_XET_TEST_PAUSE_AT';
export const PAUSE_DIR_ENV = 'GIT_XET_TEST_PAUSE_DIR';
export const STALL_AT_ENV = 'GIT_XET_TEST_STALL_AT';

export const FAULT_POINTS = [
  // the remote helper (git-remote-xet)
  'before-decide',
  'after-pack',
  'after-state',
  'before-reply',
  // git xet push: everything checked, no publication recorded yet (a relayed push's client may go
  // away here); its publication recorded as pending, git push (and so the helper) not started
  'push:before-record',
  'push:after-record',
  // a push to a directory store: about to write its pack (a relayed push's client may go away here)
  'push:before-pack',
  // capture: a pack half written (tmp_pack_xet_*); objects written, nothing references them; the ref
  // exists, the sidecar does not know it
  'pack:mid-write',
  // capture with few files to read: hashed and looked up, not yet read again to be packed
  'capture:between-passes',
  // capture: every file but the other links of an inode stat-ed or read; those not yet read
  'capture:before-links',
  'capture:after-pack',
  'capture:before-ref',
  'capture:after-ref',
  // export of a snapshot: its changed files checked out in xet/tmp/export-<pid>-*
  'export:after-checkout',
  // restore (in its hidden sibling directory): objects there, files laid, everything but the rename
  'restore:after-objects',
  'restore:after-files',
  'restore:before-rename',
  // fork: base materialised, worktree added and registered, files in place (overlay: before mounting)
  'fork:after-base',
  'fork:after-worktree',
  'fork:before-mount',
  'fork:before-active',
  // discard: work captured but not recorded; recorded as 'discarding'; tree half removed
  'discard:after-capture',
  'discard:after-mark',
  'discard:mid-removal',
  // pin: the pin marker's objects written, no ref yet; the ref (and an undrop) done, no sidecar row.
  // drop: every id checked, nothing written; the one ref transaction done
  'pin:after-objects',
  'pin:after-ref',
  'drop:after-check',
  'drop:after-refs',
  // gc (local): plan journaled, refs swept, bases removed, before and after git's repack
  'gc:after-plan',
  'gc:after-refs',
  'gc:after-bases',
  'gc:before-repack',
  'gc:after-repack',
  // reclaim: overlay fork unmounted (its view not yet mounted); the snapshot captured, not pinned;
  // pinned, the row not yet marked; marked 'discarding' and half removed
  'reclaim:after-unmount',
  'reclaim:after-capture',
  'reclaim:after-pin',
  'reclaim:mid-remove',
  // store gc (gc --store): compacted pack published, nothing names it; the gc's state published,
  // nothing deleted; doomed packs renamed into trash/, not yet re-checked, linked back or deleted
  'gc-store:after-pack',
  'gc-store:after-state',
  'gc-store:after-trash',
  // a detached task runner just started: nothing loaded, no signal trapped, no lease
  'runner-main:start',
  // task runner: the slot's writer lease taken (no guard yet); the guard published (command not
  // started); the command started (its pid recorded); the command ended, its result and capture not
  // yet done, the guard still standing
  'task:after-lease',
  'task:after-guard',
  'task:after-start',
  'task:after-exit',
  // hooks install: some hooks written, the install record not yet
  'hooks:mid-install',
  // storage allowance: admitted, nothing written yet; a fetch's pack copied half; the layer
  // filesystem of a fork with an allowance made but not mounted
  'allowance:after-admit',
  'fetch:mid-import',
  'fork:after-layer',
  // a fork's base with its files laid in its temporary `.build-<pid>-…` dir, no index yet
  'fork:mid-base',
] as const;

export type FaultPoint = (typeof FAULT_POINTS)[number];

const paused = new Set<string>();

function announce(point: string): void {
  const dir = process.env[PAUSE_DIR_ENV];
  if (dir) fs.writeFileSync(path.join(dir, `${point}.reached`), `${process.pid}\n`);
}

/** SIGKILL at `point` if the tests asked for it (synchronous: usable anywhere). */
export function dieAt(point: FaultPoint): void {
  if (process.env[DIE_AT_ENV] !== point) return;
  announce(point);
  process.kill(process.pid, 'SIGKILL');
}

/** Wait at `point` if the tests asked for it, once per process, until told to go on. */
export async function pauseAt(point: FaultPoint): Promise<void> {
  const dir = process.env[PAUSE_DIR_ENV];
  if (!dir || paused.has(point) || !(process.env[PAUSE_AT_ENV] ?? '').split(',').includes(point)) return;
  paused.add(point);
  announce(point);
  const until = Date.now() + 60_000;
  while (!fs.existsSync(path.join(dir, `${point}.go`)) && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A fault point where a test may kill or stop the process: `await faultPoint('capture:before-ref')`. */
export async function faultPoint(point: FaultPoint): Promise<void> {
  if (
    process.env[DIE_AT_ENV] === undefined &&
    process.env[PAUSE_AT_ENV] === undefined &&
    process.env[STALL_AT_ENV] === undefined
  )
    return;
  dieAt(point);
  await pauseAt(point);
  if (process.env[STALL_AT_ENV] === point) {
    announce(point);
    await new Promise<void>(() => undefined);
  }
}
