// Which of many objects a repository holds in its packs (its own object directory's and its
// alternates'), answered in this process from the pack indexes (src/chunks/local-packs.ts). `git
// cat-file --batch-check` pays for every object it lacks (it rescans the pack directory before it
// answers "missing"): the 17,244 chunks of a cold capture of the benchmark tree, none stored yet,
// took 443 ms through it. A writer that only skips what is already stored asks here instead.
// Only "held" is certain, so loose objects are not counted: a loose file's name says nothing of
// its content (a crash can leave it empty; review of stop 25). An object found only loose, or in a
// pack that does not open, is written again, which costs space, never correctness.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { LocalPacks } from '../chunks/local-packs';

const OID_RE = /^[0-9a-f]{40}([0-9a-f]{24})?$/;

/** The object directories whose packs count: `objectsDir` and its alternates (one level, as listed
 * in objects/info/alternates; relative entries are relative to objectsDir). */
function withAlternates(objectsDir: string): string[] {
  const dirs = [objectsDir];
  let text: string;
  try {
    text = fs.readFileSync(path.join(objectsDir, 'info', 'alternates'), 'utf8');
  } catch {
    return dirs;
  }
  for (const line of text.split('\n')) {
    const l = line.trim();
    if (!l || l.startsWith('#') || l.startsWith('"')) continue;
    dirs.push(path.resolve(objectsDir, l));
  }
  return dirs;
}

/** The oids of `oids` that the packs of `objectsDir` (or of its alternates) hold. */
export function heldLocally(oids: Iterable<string>, objectsDir: string, format: 'sha1' | 'sha256'): Set<string> {
  const held = new Set<string>();
  let packs: LocalPacks[] | null = null;
  try {
    for (const oid of oids) {
      if (held.has(oid) || !OID_RE.test(oid)) continue;
      // Kept open between calls (LocalPacks.borrow): a capture asks at every run.
      packs ??= withAlternates(objectsDir).map((d) => LocalPacks.borrow(d, format));
      if (packs.some((p) => p.find(oid))) held.add(oid);
    }
  } finally {
    for (const p of packs ?? []) p.giveBack();
  }
  return held;
}
