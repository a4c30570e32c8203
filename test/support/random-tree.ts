// Random trees for the walk's tests: names that sort differently by bytes and by UTF-16, files,
// symlinks, empty and nested directories, all from a seed (a failure repeats).
import * as fs from 'node:fs';
import * as path from 'node:path';

/** A deterministic generator (tests must fail the same way twice). */
export function prng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

export const ALPHABET = ['a', 'B', 'z', '-', '.', '_', ' ', '0', 'é', '日', '😀', '\uE000', 'ß', '~', '+'];

export function randomTree(root: string, seed: number): string[] {
  const rnd = prng(seed);
  const files: string[] = [];
  const name = (): string => {
    const len = 1 + Math.floor(rnd() * 6);
    let s = '';
    for (let i = 0; i < len; i++) s += ALPHABET[Math.floor(rnd() * ALPHABET.length)];
    return s === '.' || s === '..' || s.toLowerCase() === '.git' ? `${s}x` : s;
  };
  const grow = (dir: string, depth: number): void => {
    const n = 1 + Math.floor(rnd() * 8);
    for (let i = 0; i < n; i++) {
      const nm = name();
      const abs = path.join(root, dir, nm);
      if (fs.existsSync(abs)) continue;
      const r = rnd();
      if (r < 0.25 && depth < 5) {
        fs.mkdirSync(abs);
        grow(path.join(dir, nm), depth + 1);
      } else if (r < 0.3) {
        fs.symlinkSync(rnd() < 0.5 ? '.' : 'missing', abs);
        files.push(path.join(dir, nm));
      } else if (r < 0.33) {
        fs.mkdirSync(abs); // empty
      } else {
        fs.writeFileSync(abs, `${dir}/${nm}`);
        files.push(path.join(dir, nm));
      }
    }
  };
  grow('', 0);
  return files;
}
