// What the daemon's memos (config, refs, the ignored listing) know a file by: its device, inode,
// mode, size, mtime and ctime, or its absence. And the rule that makes a stamp worth keeping: file
// times come from the kernel's coarse clock, so two changes within one tick can leave the same
// times; an answer read while every file it depends on was already older than STAMP_MARGIN_NS is
// kept (a change after the read then has a later time), anything newer is read again next time.

import * as fs from 'node:fs';

export const STAMP_MARGIN_NS = 100_000_000n;

/** The realtime clock in nanoseconds (what file times are stamped from). */
export function nowNs(): bigint {
  return BigInt(Date.now()) * 1_000_000n;
}

export class Stamps {
  private readonly parts: string[] = [];
  private newestNs = 0n;

  /** Adds `file`'s stamp (through a symlink with `follow`, as a reader that follows it sees it), or
   * its absence; returns its stat. Any error but absence is thrown (the caller keeps nothing). */
  add(file: string, follow = false): fs.BigIntStats | undefined {
    const st = (follow ? fs.statSync : fs.lstatSync)(file, { bigint: true, throwIfNoEntry: false });
    if (!st) {
      this.parts.push(`${file}\0-`);
      return undefined;
    }
    this.parts.push(`${file}\0${st.dev}:${st.ino}:${st.mode}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`);
    if (st.mtimeNs > this.newestNs) this.newestNs = st.mtimeNs;
    if (st.ctimeNs > this.newestNs) this.newestNs = st.ctimeNs;
    return st;
  }

  get count(): number {
    return this.parts.length;
  }

  get key(): string {
    return this.parts.join('\n');
  }

  /** Whether every file stamped was older than the margin at `startNs` (taken before the stamps). */
  settledAt(startNs: bigint): boolean {
    return this.newestNs < startNs - STAMP_MARGIN_NS;
  }
}

/** The stamps of `inTree` (not followed: as git opens an in-tree file) and `followed` files (through
 * a symlink, as git reads a config or an excludes file), or null when one cannot be taken (ENOTDIR,
 * EACCES, a symlink loop): the caller asks git and keeps nothing (review 42). */
export function stampFiles(inTree: readonly string[], followed: readonly string[]): Stamps | null {
  const stamps = new Stamps();
  try {
    for (const f of inTree) stamps.add(f);
    for (const f of followed) stamps.add(f, true);
    return stamps;
  } catch {
    return null;
  }
}
