// The daemon's watch of its worktree's directories (inotify, through the native module), so that a
// capture reads again only the directories something changed in, and replays the last walk's
// decisions for the rest (src/snapshot/walk.ts, WalkMemo).
//
// What it vouches for is narrow on purpose: that a directory's *listing* (names and types) is what
// it was when the last walk read it. A file's content is still checked by the capture's lstat of
// every path against its stat cache, so a write inotify cannot see (through a shared mapping, or a
// hard link from outside the tree) is found exactly as without the watch. A listing changes only
// through the directory's own inode, and the kernel reports every such change to a watch on it, on
// a local file system, before the call that made it returns. The walk's decisions are replayed only
// for root, who may read every file: for anyone else whether a file may be read is a decision a
// chmod through another hard link changes with no event here, so they are made again from the
// kept listings. What stays outside that proof is refused: a file system other than ext2/3/4, xfs,
// btrfs, tmpfs and overlay at or under the worktree (network and FUSE file systems change without
// local events); any change of the mount table before or during a walk (polled on
// /proc/self/mountinfo: a mount made and removed during a walk leaves the table as it was); a full
// event queue; a directory reached at two paths (a bind mount), even in the middle of a walk, which
// then trusts nothing more. Each makes the walk (or the next) read everything, as the CLI does
// (docs/DESIGN-NOTES.md "A daemon that re-reads only the directories that changed").

import * as fs from 'node:fs';
import * as os from 'node:os';
import { native } from '../native';
import { entersIgnoredDirectories, type DirRecord, type WalkMemo, type WalkResult } from '../snapshot/walk';
import type { WalkInputs, WorktreeWatch } from '../snapshot/walk-watch';

// Linux's inotify ABI (<sys/inotify.h>).
const IN_ATTRIB = 0x4;
const IN_MOVED_FROM = 0x40;
const IN_MOVED_TO = 0x80;
const IN_CREATE = 0x100;
const IN_DELETE = 0x200;
const IN_DELETE_SELF = 0x400;
const IN_MOVE_SELF = 0x800;
const IN_UNMOUNT = 0x2000;
const IN_Q_OVERFLOW = 0x4000;
const IN_IGNORED = 0x8000;
const IN_ISDIR = 0x40000000;
/** What changes a listing (or, for a reader other than root, whether an entry is readable). A
 * write into a file is not among them: the lstat of every path sees those. */
const WATCH_MASK = IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF;
const EVENT_HEADER = 16;

/** File systems whose every change of a directory is an event on this machine. */
const LOCAL_TYPES = new Set(['ext2', 'ext3', 'ext4', 'xfs', 'btrfs', 'tmpfs', 'overlay']);

/** Above this many directories to read, the walk reads them all ahead on two threads. */
const READ_AHEAD_ABOVE = 256;

export interface TreeWatchState {
  watching: boolean;
  dirs: number;
  /** Why the last walk read every directory, when it did. */
  reason: string | null;
}

export class TreeWatch implements WorktreeWatch {
  private fd = -1;
  private readonly relOf = new Map<number, string>();
  private readonly wdOf = new Map<string, number>();
  private records = new Map<string, DirRecord>();
  private readonly dirty = new Set<string>();
  /** Watches added during the current walk (their listing read ahead predates them). */
  private readonly addedNow = new Set<string>();
  private mounts: string | null = null;
  /** /proc/self/mountinfo, open: the kernel marks it (POLLPRI) at every change of the mount table. */
  private mountFd = -1;
  private last: WalkInputs | null = null;
  /** The result of the walk that made `records` (a walk that finds nothing changed returns it). */
  private lastResult: WalkResult | null = null;
  private pending: WalkInputs | null = null;
  /** Set when the watch was reset during a walk: nothing is unchanged for the rest of it. */
  private broken = false;
  private reason: string | null = 'no walk yet';
  /** Set for good: out of watches, or no inotify here. */
  private disabled: string | null = null;
  private readonly little = os.endianness() === 'LE';
  /** Counts every event drained, reset and change of the mount table: a token of `quiet`. */
  private epoch = 0;
  /** The records are a finished walk's, nothing reset since (what `quiet` vouches from). */
  private complete = false;
  /** A change of the mount table seen by `quiet`, still to be seen by the next walk. */
  private mountsSeen = false;
  private readonly buf = Buffer.alloc(64 * 1024);

  /** `root`: the worktree as git names it (a capture's root must be the same directory). */
  constructor(readonly root: string) {
    if (!native) this.disabled = 'the native module is not loaded';
    else if (process.platform !== 'linux') this.disabled = 'inotify is Linux only';
  }

  state(): TreeWatchState {
    return { watching: this.fd >= 0 && !this.disabled, dirs: this.wdOf.size, reason: this.disabled ?? this.reason };
  }

  begin(inputs: WalkInputs): WalkMemo | null {
    if (this.disabled || !sameDir(inputs.root, this.root)) return null;
    this.complete = false;
    // A mount made and removed again between two captures is seen here even though the table
    // looks the same: its listing may have been read by nothing, but nothing is assumed.
    const remounted = this.mountsMoved();
    const mounts = mountsAt(this.root);
    if (typeof mounts !== 'string') {
      // Not watchable now (a mount may go away again): every walk reads everything meanwhile.
      this.reason = mounts.refused;
      this.reset();
      this.mounts = null;
      return null;
    }
    const why =
      this.mounts !== null && (this.mounts !== mounts || remounted)
        ? 'the mounts under the worktree changed'
        : this.refresh();
    this.mounts = mounts;
    this.reason = why;
    if (why) this.reset();
    if (this.fd < 0) {
      const fd = (native as NonNullable<typeof native>).watchOpen();
      if (fd < 0) {
        this.disabled = `inotify_init1 failed (errno ${-fd})`;
        return null;
      }
      this.fd = fd;
    }
    this.addedNow.clear();
    this.pending = inputs;
    this.broken = false;
    let stale = 0;
    for (const [rel, rec] of this.records) if (!rec.trusted || this.dirty.has(rel)) stale++;
    // A reader other than root decides whether it may read each file, and a chmod through another
    // hard link changes that with no event in a watched directory: its decisions are made again
    // from the kept listings every time (root reads everything).
    const sameInputs = !why && isRoot && this.last !== null && sameWalkInputs(this.last, inputs);
    const memo: WalkMemo = {
      records: this.records,
      sameInputs,
      lastResult: sameInputs ? this.lastResult : null,
      readAhead: this.records.size === 0 || stale > READ_AHEAD_ABOVE,
      // After a reset mid-walk the events drained for it are gone with `dirty`: nothing is vouched for.
      unchanged: (rel) => !this.broken && !this.dirty.has(rel),
      watch: (rel, abs) => this.watch(rel, abs),
      prewatch: (dirs) => {
        for (const [rel, abs] of dirs) if (this.watch(rel, abs) === 'no' && (this.disabled || this.fd < 0)) break;
        // Watched before the read that follows: as if by an earlier walk.
        this.addedNow.clear();
      },
    };
    return memo;
  }

  end(memo: WalkMemo, records: Map<string, DirRecord> | null): void {
    this.addedNow.clear();
    const inputs = this.pending;
    this.pending = null;
    if (!records || !inputs) return; // a failed walk: the old records and the events stand
    if (this.mountsMoved()) {
      // A mount made (and maybe removed again) while the walk ran: a listing it read may be the
      // mounted file system's, which no event will ever correct.
      this.reason = 'the mounts changed during the walk';
      this.broken = true;
      this.reset();
    }
    if (this.broken) {
      // Reset during the walk: its records were made partly from what the watch no longer vouches for.
      this.broken = false;
      this.last = null;
      this.lastResult = null;
      return;
    }
    this.records = records;
    this.lastResult = memo.nextResult ?? null;
    this.dirty.clear();
    this.last = inputs;
    this.complete = true;
  }

  /**
   * Whether the watch vouches, now, that no directory the last walk read has changed its listing
   * since that walk ended: then a token of this moment (quietSince: does that still hold) and the
   * `.gitignore` entries those directories list; else null. It vouches only from a finished walk
   * that entered every directory git may read (one whose policy enters ignored directories: git
   * reads an untracked directory to learn that all of it is ignored, which a walk under
   * `--ignored none` then leaves unread and unwatched, review 42), whose every listing was read
   * under its watch (trusted), with no event since, no reset and the same mount table: git's
   * listing of untracked and ignored paths then reads no directory the walk did not (nor a nested
   * repository), so it is what it was while this holds, given the same ignore files, index and
   * config (src/daemon/ignored-memo.ts).
   */
  quiet(): { token: number; gitignores: string[] } | null {
    if (!this.settled()) return null;
    if (this.dirty.size || !this.last || !entersIgnoredDirectories(this.last.policy)) return null;
    const gitignores: string[] = [];
    for (const [rel, rec] of this.records) {
      if (!rec.trusted) return null;
      if (rec.names.includes('.gitignore')) gitignores.push(rel === '' ? '.gitignore' : `${rel}/.gitignore`);
    }
    return { token: this.epoch, gitignores };
  }

  /** Whether nothing `quiet` vouches for has changed since it gave `token`. */
  quietSince(token: number): boolean {
    return this.settled() && this.epoch === token && this.dirty.size === 0;
  }

  /** Drains the events (and looks at the mount table) outside a walk: false when the watch does not
   * stand for the last walk's directories now. */
  private settled(): boolean {
    if (this.disabled || this.fd < 0 || !this.complete) return false;
    if (this.mountsMoved()) {
      // The next walk must see it too (its own look would find the table quiet by then).
      this.mountsSeen = true;
      this.epoch++;
      return false;
    }
    const why = this.refresh();
    if (why) {
      this.reason = why;
      this.reset();
      return false;
    }
    return true;
  }

  close(): void {
    this.reset();
    if (this.mountFd >= 0) fs.closeSync(this.mountFd);
    this.mountFd = -1;
    this.disabled = 'closed';
  }

  /** Whether the mount table changed since the last call (true the first time, and when it cannot
   * tell), or `settled` saw it change since the last walk looked. */
  private mountsMoved(): boolean {
    if (this.mountsSeen) {
      this.mountsSeen = false;
      this.pollMounts(); // taken: what it says is already known
      return true;
    }
    return this.pollMounts();
  }

  private pollMounts(): boolean {
    if (this.mountFd < 0) {
      try {
        this.mountFd = fs.openSync('/proc/self/mountinfo', 'r');
      } catch {
        return true;
      }
      return true;
    }
    return (native as NonNullable<typeof native>).pollPri(this.mountFd) !== 0;
  }

  /** Drains the events queued since the last walk into `dirty`; a reason to read everything, or null. */
  private refresh(): string | null {
    if (this.fd < 0) return this.last === null ? 'no walk yet' : 'not watching';
    const forget = new Set<string>();
    for (;;) {
      const n = (native as NonNullable<typeof native>).watchRead(this.fd, this.buf);
      if (n === 0) break;
      this.epoch++;
      if (n < 0) return `reading inotify events failed (errno ${-n})`;
      for (let at = 0; at + EVENT_HEADER <= n;) {
        const wd = this.little ? this.buf.readInt32LE(at) : this.buf.readInt32BE(at);
        const mask = this.little ? this.buf.readUInt32LE(at + 4) : this.buf.readUInt32BE(at + 4);
        const len = this.little ? this.buf.readUInt32LE(at + 12) : this.buf.readUInt32BE(at + 12);
        const nameEnd = this.buf.indexOf(0, at + EVENT_HEADER);
        const name = len
          ? this.buf.toString(
              'utf8',
              at + EVENT_HEADER,
              nameEnd < 0 || nameEnd > at + EVENT_HEADER + len ? at + EVENT_HEADER + len : nameEnd,
            )
          : '';
        at += EVENT_HEADER + len;
        if (mask & IN_Q_OVERFLOW) return 'the event queue overflowed';
        const rel = this.relOf.get(wd);
        if (rel === undefined) continue; // a watch forgotten (its directory moved or went away)
        if (mask & IN_UNMOUNT) return 'a file system under the worktree was unmounted';
        if (rel === '' && mask & (IN_DELETE_SELF | IN_MOVE_SELF)) return 'the worktree itself moved';
        this.dirty.add(rel);
        if (mask & IN_IGNORED) {
          this.relOf.delete(wd);
          if (this.wdOf.get(rel) === wd) this.wdOf.delete(rel);
          forget.add(rel);
        }
        // A directory made, removed or moved below: what its path named before is not what it
        // names now (its old watch, if it moved, now reports for another path). And a directory
        // whose own permissions changed: what a reader other than root may open below it differs,
        // with no event in those directories.
        if (mask & IN_ISDIR && mask & (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB) && name)
          forget.add(rel === '' ? name : `${rel}/${name}`);
        if (mask & IN_ATTRIB && !name) forget.add(rel);
      }
    }
    if (forget.size) this.forget(forget);
    return null;
  }

  /** Drops the records and watches' names at and below each of `dirs`. */
  private forget(dirs: Set<string>): void {
    const under = (rel: string): boolean => {
      for (let p = rel; ;) {
        if (dirs.has(p)) return true;
        const slash = p.lastIndexOf('/');
        if (slash < 0) return false;
        p = p.slice(0, slash);
      }
    };
    // The root's own permissions: every record goes (its watches stay: the root did not move).
    if (dirs.delete('')) this.records.clear();
    for (const rel of [...this.records.keys()]) if (rel !== '' && under(rel)) this.records.delete(rel);
    for (const [rel, wd] of [...this.wdOf]) {
      if (rel === '' || !under(rel)) continue;
      this.wdOf.delete(rel);
      if (this.relOf.get(wd) === rel) this.relOf.delete(wd);
      // The kernel's watch goes too: a directory moved out of the tree would keep it (and count
      // against the user's watches) for as long as it exists. One moved within is watched again.
      if (this.fd >= 0) (native as NonNullable<typeof native>).watchRemove(this.fd, wd);
    }
  }

  private watch(rel: string, abs: string): 'before' | 'now' | 'no' {
    if (this.disabled || this.fd < 0) return 'no';
    if (this.wdOf.has(rel)) return this.addedNow.has(rel) ? 'now' : 'before';
    const wd = (native as NonNullable<typeof native>).watchAdd(this.fd, abs, WATCH_MASK);
    if (wd < 0) {
      // ENOSPC: out of watches (fs.inotify.max_user_watches); the rest is a directory gone or
      // replaced meanwhile, which its parent's event will make the next walk read again.
      if (wd === -28) {
        // Every watch this process holds goes back to the user's other programs.
        this.disabled = 'out of inotify watches (fs.inotify.max_user_watches)';
        this.broken = true;
        this.reset();
      }
      return 'no';
    }
    const other = this.relOf.get(wd);
    if (other !== undefined && other !== rel) {
      // One directory at two paths (a bind mount, or a move not seen yet): neither path's events
      // can be told apart. Everything is read again next time.
      this.reason = `${rel || '.'} and ${other || '.'} are one directory`;
      this.broken = true;
      this.reset();
      return 'no';
    }
    this.relOf.set(wd, rel);
    this.wdOf.set(rel, wd);
    this.addedNow.add(rel);
    return 'now';
  }

  private reset(): void {
    this.epoch++;
    this.complete = false;
    if (this.fd >= 0) fs.closeSync(this.fd);
    this.fd = -1;
    this.relOf.clear();
    this.wdOf.clear();
    this.records = new Map();
    this.lastResult = null;
    this.dirty.clear();
    this.addedNow.clear();
  }
}

const isRoot = process.getuid?.() === 0;

function sameDir(a: string, b: string): boolean {
  if (a === b) return true;
  try {
    return fs.realpathSync(a) === fs.realpathSync(b);
  } catch {
    return false;
  }
}

function sameSet(a: ReadonlySet<string>, b: ReadonlySet<string>): boolean {
  if (a === b) return true;
  if (a.size !== b.size) return false;
  for (const x of a) if (!b.has(x)) return false;
  return true;
}

function policyKey(p: WalkInputs['policy']): string {
  return JSON.stringify([p.ignored, p.include, p.exclude, p.secretPatterns]);
}

export function sameWalkInputs(a: WalkInputs, b: WalkInputs): boolean {
  return (
    a.root === b.root &&
    a.gitDirs.join('\0') === b.gitDirs.join('\0') &&
    policyKey(a.policy) === policyKey(b.policy) &&
    sameSet(a.tracked, b.tracked) &&
    sameSet(a.ignored, b.ignored)
  );
}

/** mountinfo's octal escapes (space, tab, newline, backslash). */
function unescapeMount(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8)));
}

/** The mounts at, under and holding `root` as one string to compare, or why they are refused. */
export function mountsAt(root: string): string | { refused: string } {
  let text: string;
  try {
    text = fs.readFileSync('/proc/self/mountinfo', 'utf8');
  } catch (e) {
    return { refused: `no /proc/self/mountinfo (${(e as Error).message})` };
  }
  let holder: { point: string; line: string; type: string } | null = null;
  const under: string[] = [];
  for (const line of text.split('\n')) {
    if (!line) continue;
    const fields = line.split(' ');
    const dash = fields.indexOf('-');
    if (dash < 0 || fields.length < dash + 2) continue;
    const point = unescapeMount(fields[4]);
    const type = fields[dash + 1];
    const id = `${fields[0]} ${type} ${fields[4]}`;
    if (point === root || point.startsWith(root.endsWith('/') ? root : `${root}/`)) {
      if (!LOCAL_TYPES.has(type)) return { refused: `${point} is a ${type} file system` };
      under.push(id);
    }
    const inside = point === '/' || root === point || root.startsWith(`${point}/`);
    if (inside && (!holder || point.length >= holder.point.length)) holder = { point, line: id, type };
  }
  if (!holder) return { refused: `no mount holds ${root}` };
  if (!LOCAL_TYPES.has(holder.type)) return { refused: `${root} is on a ${holder.type} file system` };
  return [holder.line, ...under].join('\n');
}
