// The sidecar's WAL is bounded (src/sidecar/db.ts "Bounding the WAL"): in steady state it stays
// near the autocheckpoint size; under a long reader (another process holding a read transaction) it
// grows by everything committed meanwhile — SQLite cannot reset it — and the first git xet write
// after the reader ends brings it back under journal_size_limit, even while another connection
// (a task runner's) keeps the database open, so no last close deletes it.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import {
  WAL_AUTOCHECKPOINT_PAGES,
  WAL_SIZE_LIMIT_BYTES,
  WAL_TRUNCATE_ABOVE_BYTES,
  sidecarDir,
  withSidecar,
} from '../src/sidecar/db';
import { initRepo } from './support/git';
import { withSandbox } from './support/sandbox';
import { capture, expectExit, xet } from './support/xet';

/** A process holding a read transaction on `file` until its stdin closes. */
async function longReader(file: string): Promise<{ end(): Promise<void> }> {
  const script = `
    const Database = require(${JSON.stringify(require.resolve('better-sqlite3'))});
    const db = new Database(process.argv[1], { readonly: true });
    db.exec('BEGIN');
    db.prepare('SELECT count(*) FROM snapshots').get();
    process.stdout.write('reading\\n');
    process.stdin.resume();
    process.stdin.on('end', () => { db.exec('COMMIT'); db.close(); process.exit(0); });`;
  const child = spawn(process.execPath, ['-e', script, file], { stdio: ['pipe', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (c) => reject(new Error(`the reader exited (${c}) before reading`)));
    child.stdout.once('data', () => resolve());
  });
  child.removeAllListeners('exit');
  return {
    end: () =>
      new Promise<void>((resolve) => {
        child.once('exit', () => resolve());
        child.stdin.end();
      }),
  };
}

test('the WAL: bounded in steady state, grows only under a long reader, and the next git xet write after it truncates it', () =>
  withSandbox(async (sb) => {
    const r = initRepo(sb, 'repo');
    r.commit('c', { 'a.txt': 'a\n' });
    const snap = capture(sb, r.dir);
    const commonDir = r.commonDir();
    const file = path.join(sidecarDir(commonDir), 'xet.db');
    const wal = `${file}-wal`;
    const walSize = () => (fs.existsSync(wal) ? fs.statSync(wal).size : 0);
    // A connection that stays open (as a task runner's does): no git xet process is the last to
    // close, so SQLite's delete-on-last-close never hides what the WAL would keep.
    const idle = new Database(file);
    idle.prepare('SELECT count(*) FROM snapshots').get();
    const payload = 'x'.repeat(2000);
    const run = crypto.randomBytes(4).toString('hex');
    let n = 0;
    const write = (rows: number): { maxWal: number; maxMs: number } => {
      let maxWal = 0;
      let maxMs = 0;
      for (let i = 0; i < rows; i++, n++) {
        const t = Date.now();
        withSidecar(commonDir, (db) =>
          db
            .prepare('INSERT INTO gc_deleted_refs(run_id, ref, oid, deleted_at) VALUES (?, ?, ?, ?)')
            .run(run, `refs/xet/test/${n}`, payload, new Date().toISOString()),
        );
        maxMs = Math.max(maxMs, Date.now() - t);
        maxWal = Math.max(maxWal, walSize());
      }
      return { maxWal, maxMs };
    };
    try {
      // Steady state: autocheckpoints keep it near 1000 pages; journal_size_limit cuts it back.
      const steady = write(1500);
      assert.ok(
        steady.maxWal <= 2 * WAL_SIZE_LIMIT_BYTES,
        `the WAL reached ${steady.maxWal} bytes without a reader (autocheckpoint ${WAL_AUTOCHECKPOINT_PAGES} pages)`,
      );

      const reader = await longReader(file);
      let under: { maxWal: number; maxMs: number };
      try {
        under = write(1000);
      } finally {
        await reader.end();
      }
      // Honest: under a reader nothing can reset the WAL; it grows by what was committed.
      assert.ok(under.maxWal > WAL_TRUNCATE_ABOVE_BYTES, `the WAL only reached ${under.maxWal} bytes under the reader`);
      // The truncation a writer tries over the threshold does not wait for the reader.
      assert.ok(under.maxMs < 5000, `a write under the reader took ${under.maxMs} ms`);
      const afterReader = walSize();
      assert.ok(afterReader > WAL_TRUNCATE_ABOVE_BYTES, 'the WAL shrank before any write');

      // A read-only command leaves it alone (readers write nothing) …
      expectExit(xet(sb, r.dir, ['snapshots', '--json']), 0);
      assert.equal(walSize(), afterReader, 'a read-only command changed the WAL');
      // … and the next git xet write truncates it.
      expectExit(xet(sb, r.dir, ['pin', snap, '--reason', 'wal', '--json']), 0);
      const afterWrite = walSize();
      assert.ok(afterWrite <= WAL_SIZE_LIMIT_BYTES, `the WAL is ${afterWrite} bytes after the next write`);
      process.stdout.write(
        `# WAL bytes: steady max ${steady.maxWal}; under a reader (1000 commits of ~2 KiB) max ${under.maxWal}, ` +
          `slowest write ${under.maxMs} ms; after the reader ${afterReader}; after the next git xet write ${afterWrite}\n`,
      );
    } finally {
      idle.close();
    }
  }));
