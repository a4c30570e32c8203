// Which of many objects a repository's own object directory holds, answered in this process from
// its packs' indexes (src/chunks/local-packs.ts) and its loose fan-out directories. `git cat-file
// --batch-check` pays for every object it lacks (it rescans the pack directory before it answers
// "missing"): the 17,244 chunks of a cold capture of the benchmark tree, none stored yet, took
// 443 ms through it. A writer that only skips what is already stored asks here instead. Only
// "held" is certain: an object this does not find (in an alternate, or in a pack that does not
// open) is written again, which costs space, never correctness.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { LocalPacks } from '../chunks/local-packs';

const OID_RE = /^[0-9a-f]{40}([0-9a-f]{24})?$/;

/** The oids of `oids` that `objectsDir` holds, loose or packed. */
export function heldLocally(oids: Iterable<string>, objectsDir: string, format: 'sha1' | 'sha256'): Set<string> {
  const held = new Set<string>();
  const loose = new Map<string, Set<string>>();
  const looseIn = (fan: string): Set<string> => {
    let names = loose.get(fan);
    if (!names) {
      try {
        names = new Set(fs.readdirSync(path.join(objectsDir, fan)));
      } catch {
        names = new Set();
      }
      loose.set(fan, names);
    }
    return names;
  };
  let packs: LocalPacks | null = null;
  try {
    for (const oid of oids) {
      if (held.has(oid) || !OID_RE.test(oid)) continue;
      if (looseIn(oid.slice(0, 2)).has(oid.slice(2))) {
        held.add(oid);
        continue;
      }
      packs ??= LocalPacks.openDir(objectsDir, format);
      if (packs.find(oid)) held.add(oid);
    }
  } finally {
    packs?.close();
  }
  return held;
}
