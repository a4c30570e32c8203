// Restore into another filesystem than the repository's: the objects cannot be hard-linked there,
// so they are copied (a clone with --local died with "Invalid cross-device link").
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { initRepo } from './support/git';
import { createSandbox } from './support/sandbox';
import { capture, expectExit, restore, verify } from './support/xet';

const shm = fs.existsSync('/dev/shm') ? '/dev/shm' : null;
const sameDevice = shm ? fs.statSync(shm).dev === fs.statSync(os.tmpdir()).dev : true;

test(
  'restore into a directory on another filesystem copies the objects',
  { skip: sameDevice ? 'needs /dev/shm and the temp dir on different filesystems' : false },
  () => {
    const sb = createSandbox('xet-xdev-', shm as string);
    const far = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'xet-xdev-target-')));
    try {
      const r = initRepo(sb, 'src');
      r.commit('one', { 'a.txt': 'a\n' });
      r.write('u.txt', 'untracked\n');
      const s = capture(sb, r.dir);
      const target = path.join(far, 'copy');
      restore(sb, r.dir, s, target);
      expectExit(verify(sb, r.dir, s, target), 0);
      assert.equal(fs.readFileSync(path.join(target, 'u.txt'), 'utf8'), 'untracked\n');
    } finally {
      sb.cleanup();
      fs.rmSync(far, { recursive: true, force: true });
    }
  },
);
