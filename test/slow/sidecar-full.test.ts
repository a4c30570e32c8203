// A full disk under the sidecar: every command that opens or writes it says DISK_FULL, and fsck
// never takes a full disk for a corrupt database (a rebuild would throw a healthy ledger away).
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { initRepo } from '../support/git';
import { mountTmpfs, withMountSandbox } from '../support/mounts';
import { capture, expectError, parseJson, xet } from '../support/xet';

const rootOnly = process.getuid?.() === 0 ? false : 'needs root for mounts (CI runs as root)';

test(
  'a full disk is DISK_FULL for gc, drop and fsck; fsck --rebuild moves no healthy database aside',
  { skip: rootOnly },
  () =>
    withMountSandbox((sb) => {
      const disk = mountTmpfs(sb, 'disk', 8 * 1024);
      const r = initRepo(sb, path.relative(sb.root, path.join(disk, 'src')));
      r.commit('one', { 'a.txt': 'a\n' });
      const s1 = capture(sb, r.dir);
      r.write('a.txt', 'b\n');
      const s2 = capture(sb, r.dir);
      assert.equal(xet(sb, r.dir, ['pin', s1, '--reason', 'keep', '--json']).status, 0);
      const db = path.join(r.commonDir(), 'xet', 'xet.db');
      // Fill the filesystem to the last block (root may use every block of a tmpfs).
      const filler = path.join(disk, 'filler');
      const fd = fs.openSync(filler, 'w');
      const chunk = Buffer.alloc(64 * 1024);
      try {
        for (;;) fs.writeSync(fd, chunk);
      } catch (e) {
        assert.equal((e as NodeJS.ErrnoException).code, 'ENOSPC');
      }
      try {
        for (;;) fs.writeSync(fd, chunk.subarray(0, 512));
      } catch {
        // full to the byte
      }
      fs.closeSync(fd);
      for (const args of [['gc', '--grace', '0'], ['fsck'], ['fsck', '--rebuild']]) {
        const res = xet(sb, r.dir, [...args, '--json']);
        if (res.status === 0) {
          // With nothing to write, fsck may still succeed: then it must call the database healthy.
          assert.deepEqual(args.slice(0, 1), ['fsck']);
          assert.ok(!parseJson(res).problems.some((p: { kind: string }) => p.kind === 'sidecar-unreadable'));
          continue;
        }
        expectError(res, 'DISK_FULL');
      }
      expectError(xet(sb, r.dir, ['drop', s2, '--json']), 'DISK_FULL');
      assert.ok(fs.existsSync(db), 'the database is where it was');
      assert.deepEqual(
        fs.readdirSync(path.dirname(db)).filter((n) => n.includes('corrupt')),
        [],
        'nothing moved aside',
      );
      fs.rmSync(filler);
      // The ledger survived: the pin row is there, fsck is clean.
      const rows = new Database(db, { readonly: true }).prepare('SELECT snapshot FROM pins').all() as {
        snapshot: string;
      }[];
      assert.deepEqual(
        rows.map((x) => x.snapshot),
        [s1],
      );
      const fsck = xet(sb, r.dir, ['fsck', '--json']);
      assert.equal(fsck.status, 0, fsck.stdout + fsck.stderr);
    }),
);
