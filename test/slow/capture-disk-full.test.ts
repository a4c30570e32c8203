// A capture whose pack does not fit on the disk: DISK_FULL (not an internal error), no temporary
// pack left in objects/pack, no snapshot ref; with room again the same capture succeeds.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { initRepo, pseudoRandomBytes } from '../support/git';
import { mountTmpfs, withMountSandbox } from '../support/mounts';
import { capture, expectError, xet } from '../support/xet';

const rootOnly = process.getuid?.() === 0 ? false : 'needs root for mounts (CI runs as root)';

test(
  'a full disk while the pack is written: DISK_FULL, nothing kept, then a capture with room',
  { skip: rootOnly },
  () =>
    withMountSandbox((sb) => {
      const disk = mountTmpfs(sb, 'disk', 12 * 1024);
      const r = initRepo(sb, path.relative(sb.root, path.join(disk, 'src')));
      r.commit('one', { 'a.txt': 'a\n' });
      // Incompressible bytes: the pack needs about as much room again as the files, which is not there.
      r.write('big.bin', pseudoRandomBytes(6_500_000, 3));
      for (let i = 0; i < 200; i++) r.write(`small/${i}.bin`, pseudoRandomBytes(10_000, 100 + i));
      const env = { GIT_XET_NO_DAEMON: '1' };
      expectError(xet(sb, r.dir, ['capture', '--json'], { env }), 'DISK_FULL');
      const packDir = r.gitPath('objects/pack');
      const left = fs.existsSync(packDir) ? fs.readdirSync(packDir) : [];
      assert.deepEqual(
        left.filter((n) => n.startsWith('tmp_')),
        [],
        `temporaries left: ${left.join(' ')}`,
      );
      assert.equal(r.git('for-each-ref', 'refs/xet/').trim(), '');
      fs.rmSync(r.p('big.bin'));
      const snap = capture(sb, r.dir);
      assert.match(snap, /^[0-9a-f]{40}$/);
    }),
);
