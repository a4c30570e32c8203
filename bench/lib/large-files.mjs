// The large-file workloads of bench/chunks.mjs (issue 13): a SQLite database built with
// better-sqlite3 (realistic rows: integers, text, JSON, an index interleaved with the table as a
// database grown over time has it), the edit that rewrites 1% of its 4 KiB pages at random, and a
// pseudo-random binary with bytes inserted at its start. Everything is seeded, so two runs (and two
// machines) build the same bytes. Built once under bench/work/large-<recipe>/ and reused.

import { createCipheriv, createHash } from 'node:crypto';
import {
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  renameSync,
  statSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { BenchError, MB, ROOT, WORK, log, rmrf } from './harness.mjs';

// Bump when a recipe below changes: it names the cache directory.
const RECIPE = 'v1';
export const PAGE = 4096;

/** mulberry32: a small seeded PRNG (uniform 32-bit words), the same on every machine. */
export function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
  next.int = (n) => Math.floor((next() / 2 ** 32) * n);
  return next;
}

/** `n` pseudo-random bytes from a seed (AES-256-CTR keystream: fast and reproducible). */
export function seededBytes(seed, n) {
  const key = createHash('sha256').update(`git-xet bench ${seed}`).digest();
  const c = createCipheriv('aes-256-ctr', key, Buffer.alloc(16));
  return c.update(Buffer.alloc(n));
}

function ready(dir) {
  const f = join(dir, 'READY.json');
  return existsSync(f) ? JSON.parse(readFileSync(f, 'utf8')) : null;
}

/**
 * The cached workloads: { dir, db: {path, bytes, pages, rows, buildSeconds}, bin: {path, bytes} },
 * built when missing (or with opts.rebuildWorkload). dbMiB/binMiB size them (1024 and 256 by default).
 */
export async function ensureLargeFiles(opts, { dbMiB = 1024, binMiB = 256 } = {}) {
  const dir = join(WORK, `large-${RECIPE}-db${dbMiB}-bin${binMiB}`);
  if (opts.rebuildWorkload) rmrf(dir);
  const have = ready(dir);
  if (have && existsSync(have.db.path) && existsSync(have.bin.path)) return have;
  rmrf(dir);
  mkdirSync(dir, { recursive: true });
  const db = buildSqlite(join(dir, 'events.db'), dbMiB * MB);
  const binPath = join(dir, 'blob.bin');
  const t0 = performance.now();
  writeFileSync(binPath, seededBytes('blob.bin', binMiB * MB));
  const bin = { path: binPath, bytes: binMiB * MB, buildSeconds: (performance.now() - t0) / 1000 };
  const info = { recipe: RECIPE, dir, db, bin, builtAt: new Date().toISOString() };
  writeFileSync(join(dir, 'READY.json'), JSON.stringify(info, null, 2) + '\n');
  return info;
}

const SYLLABLES = [
  'ka',
  'lo',
  'mi',
  'ne',
  'ru',
  'ta',
  'shi',
  'von',
  'del',
  'ar',
  'is',
  'po',
  'que',
  'zen',
  'ul',
  'bra',
];
const KINDS = ['click', 'view', 'purchase', 'signup', 'login', 'logout', 'error', 'share', 'search', 'upload'];
const AGENTS = ['Mozilla/5.0 (X11; Linux x86_64)', 'Mozilla/5.0 (Macintosh)', 'curl/8.5.0', 'python-requests/2.31'];

/** A SQLite database of `target` bytes or a little more: an events table, its index, journal off. */
function buildSqlite(path, target) {
  const Database = createRequire(join(ROOT, 'package.json'))('better-sqlite3');
  const tmp = `${path}.tmp`;
  rmrf(tmp);
  const t0 = performance.now();
  const r = rng(13);
  const words = Array.from({ length: 4096 }, () => {
    let w = '';
    const n = 1 + r.int(4);
    for (let i = 0; i < n; i++) w += SYLLABLES[r.int(SYLLABLES.length)];
    return w;
  });
  const text = (n) => {
    let s = words[r.int(words.length)];
    for (let i = 1; i < n; i++) s += ` ${words[r.int(words.length)]}`;
    return s;
  };
  const db = new Database(tmp);
  db.pragma(`page_size = ${PAGE}`);
  db.pragma('journal_mode = OFF');
  db.pragma('synchronous = OFF');
  db.pragma('cache_size = -262144'); // 256 MiB of page cache: index inserts stay in memory
  db.exec(`CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL, created_at INTEGER NOT NULL);
           CREATE TABLE events (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL REFERENCES users(id),
             kind TEXT NOT NULL, created_at INTEGER NOT NULL, score REAL, title TEXT, body TEXT, payload TEXT);
           CREATE INDEX events_by_user ON events (user_id, created_at);`);
  const USERS = 50000;
  const addUser = db.prepare('INSERT INTO users VALUES (?, ?, ?, ?)');
  db.transaction(() => {
    for (let i = 1; i <= USERS; i++) {
      const name = text(2);
      addUser.run(i, name, `${name.replace(/ /g, '.')}@example.com`, 1.6e9 + r.int(1e8));
    }
  })();
  const add = db.prepare(
    'INSERT INTO events (user_id, kind, created_at, score, title, body, payload) VALUES (?, ?, ?, ?, ?, ?, ?)',
  );
  const pageCount = db.prepare('PRAGMA page_count').pluck();
  let rows = 0;
  let t = 1.7e9;
  const batch = db.transaction((n) => {
    for (let i = 0; i < n; i++) {
      t += r.int(5);
      const payload = {
        ua: AGENTS[r.int(AGENTS.length)],
        ip: `10.${r.int(256)}.${r.int(256)}.${r.int(256)}`,
        tags: Array.from({ length: r.int(4) }, () => words[r.int(words.length)]),
        n: r.int(1000),
        ok: r.int(10) > 0,
      };
      add.run(
        1 + r.int(USERS),
        KINDS[r.int(KINDS.length)],
        t,
        r() / 2 ** 32,
        text(3 + r.int(6)),
        text(20 + r.int(60)),
        JSON.stringify(payload),
      );
    }
    rows += n;
  });
  let last = performance.now();
  while (pageCount.get() * PAGE < target) {
    batch(20000);
    if (performance.now() - last > 15000) {
      last = performance.now();
      log(`  sqlite: ${rows} rows, ${((pageCount.get() * PAGE) / MB).toFixed(0)} MiB`);
    }
  }
  db.close();
  renameSync(tmp, path);
  const size = statSync(path).size;
  if (size % PAGE) throw new BenchError(`${path} is ${size} bytes, not whole ${PAGE}-byte pages`);
  const info = {
    path,
    bytes: size,
    pages: size / PAGE,
    rows,
    users: USERS,
    buildSeconds: (performance.now() - t0) / 1000,
  };
  log(`  sqlite: built ${(size / MB).toFixed(0)} MiB, ${rows} events, in ${info.buildSeconds.toFixed(0)} s`);
  return info;
}

/**
 * Rewrite `fraction` of the 4 KiB pages of `file` in place, pages chosen at random (seeded), each
 * page's bytes replaced by random ones (`span` bytes at a random place inside the page, or the whole
 * page with span 'page'): what a database does to its file between two snapshots, the worst case
 * for compression. Returns { pages, bytes } rewritten.
 */
export function rewritePages(file, { fraction = 0.01, seed = 1, span = 'page' } = {}) {
  const size = statSync(file).size;
  const total = Math.floor(size / PAGE);
  const want = Math.round(total * fraction);
  const r = rng(seed);
  const chosen = new Set();
  while (chosen.size < want) chosen.add(r.int(total));
  const pages = [...chosen].sort((a, b) => a - b);
  const noise = seededBytes(`pages ${seed}`, want * PAGE);
  const fd = openSync(file, 'r+');
  let bytes = 0;
  try {
    pages.forEach((p, i) => {
      const len = span === 'page' ? PAGE : Math.min(span, PAGE);
      const at = span === 'page' ? 0 : r.int(PAGE - len + 1);
      writeSync(fd, noise, i * PAGE, len, p * PAGE + at);
      bytes += len;
    });
  } finally {
    closeSync(fd);
  }
  return { pages: pages.length, ofPages: total, bytes };
}

/** A copy of `src` at `dst` with `n` seeded random bytes inserted at `at` (streamed, bounded memory). */
export function copyWithInsert(src, dst, { n = 100, at = 0, seed = 2 } = {}) {
  const fi = openSync(src, 'r');
  const fo = openSync(dst, 'w');
  try {
    const buf = Buffer.allocUnsafe(8 * MB);
    let pos = 0;
    let inserted = false;
    for (;;) {
      const want = !inserted && at > pos ? Math.min(buf.length, at - pos) : buf.length;
      if (!inserted && pos === at) {
        writeSync(fo, seededBytes(`insert ${seed}`, n));
        inserted = true;
      }
      const got = readSync(fi, buf, 0, want, pos);
      if (got === 0) break;
      writeSync(fo, buf, 0, got);
      pos += got;
    }
    if (!inserted) writeSync(fo, seededBytes(`insert ${seed}`, n));
  } finally {
    closeSync(fi);
    closeSync(fo);
  }
}
