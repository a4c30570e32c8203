// How much the object store holds, before and after a gc: objects as `git count-objects -v` counts
// them (loose + in packs), bytes as the files on disk (every pack's .pack/.idx/.rev/.mtimes and the
// loose objects), so "reclaimed" is what the filesystem got back.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { gitText, type GitOptions } from '../git/exec';

export interface StoreSize {
  objects: number;
  looseObjects: number;
  packs: number;
  bytes: number;
}

export async function measureObjects(objectsDir: string, opts: GitOptions): Promise<StoreSize> {
  const text = await gitText(['count-objects', '-v'], opts);
  const v = (k: string) => Number(new RegExp(`^${k}: (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
  let bytes = v('size') * 1024;
  const packDir = path.join(objectsDir, 'pack');
  let names: string[] = [];
  try {
    names = fs.readdirSync(packDir);
  } catch {
    // no packs yet
  }
  for (const n of names) {
    if (!/^pack-[0-9a-f]+\.(pack|idx|rev|mtimes|bitmap|keep)$/.test(n)) continue;
    try {
      bytes += fs.statSync(path.join(packDir, n)).size;
    } catch {
      // removed meanwhile
    }
  }
  return { objects: v('count') + v('in-pack'), looseObjects: v('count'), packs: v('packs'), bytes };
}
