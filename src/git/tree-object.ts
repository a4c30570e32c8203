// Raw git tree objects (`<mode> <name>\0<raw id>`…, as `cat-file --batch` gives them), read
// without git: the one parser for every tree we read ourselves (handoff and task-record commits,
// chunk lists, the lazy copy's walk of a store).

export interface TreeEntry {
  mode: string;
  name: string;
  oid: string;
}

/** Each entry of a raw tree object by where it lies, without a string made: `visit(at, sp, nul)`
 * for the mode at [at, sp), the name at (sp, nul) and the id from nul + 1. False when an entry is
 * malformed (no space, no NUL, an id cut short): the walk ends there. */
export function walkTreeObject(
  data: Buffer,
  oidBytes: number,
  visit: (at: number, sp: number, nul: number) => void,
): boolean {
  let at = 0;
  while (at < data.length) {
    const sp = data.indexOf(0x20, at);
    const nul = sp < 0 ? -1 : data.indexOf(0, sp);
    if (sp < 0 || nul < 0 || nul + 1 + oidBytes > data.length) return false;
    visit(at, sp, nul);
    at = nul + 1 + oidBytes;
  }
  return true;
}

/** The entries of a raw tree object, and whether it parsed to its end: a malformed entry (no
 * space, no NUL, an id cut short) ends the list there. Names are decoded as UTF-8, or with
 * `names: 'latin1'` one character per byte: a caller that tells names apart must (two names that
 * differ only in bytes that are not UTF-8 decode to the same text). */
export function parseTreeObject(
  data: Buffer,
  oidBytes: number,
  names: 'utf8' | 'latin1' = 'utf8',
): { entries: TreeEntry[]; complete: boolean } {
  const entries: TreeEntry[] = [];
  const complete = walkTreeObject(data, oidBytes, (at, sp, nul) => {
    entries.push({
      mode: data.toString('latin1', at, sp),
      name: data.toString(names, sp + 1, nul),
      oid: data.toString('hex', nul + 1, nul + 1 + oidBytes),
    });
  });
  return { entries, complete };
}
