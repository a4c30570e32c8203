// Pack entries' zlib streams through libdeflate (native/libdeflate-addon.c, src/git/zlib-fast.ts):
// what it writes node's zlib and git read back byte for byte, what zlib writes it reads, and a stream
// that is damaged, cut short, too long or not zlib at all is refused. The fallback (GIT_XET_NATIVE=0,
// or no C compiler at build time) is held to the same cases, and a capture made either way stores
// the same objects in packs git verifies. In CI (CI set, as .ci/run runs) the module must have been
// built: .ci/run installs libdeflate-dev so that the fast path is the one the suites exercise.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { nativeZlib, nativeZlibMissing } from '../src/git/zlib-fast';
import { initRepo, pseudoRandomBytes } from './support/git';
import { refusals, roundTrips } from './support/zlib-cases';
import { createSandbox } from './support/sandbox';
import { capture, xet } from './support/xet';

test('the native module is built where CI installs libdeflate-dev', (t) => {
  if (!process.env.CI) {
    t.diagnostic(`not CI: the native module is ${nativeZlib ? 'loaded' : `not loaded (${nativeZlibMissing})`}`);
    return;
  }
  assert.equal(nativeZlib, true, `CI must exercise libdeflate: ${nativeZlibMissing}`);
});

test('zlib-fast: every stream it writes inflates, and it reads every stream zlib writes', () => roundTrips());

test('zlib-fast: damaged, short, long and foreign streams are refused', () => refusals());

test('zlib-fast without the native module (GIT_XET_NATIVE=0) passes the same cases', () => {
  const script = `
    const assert = require('node:assert/strict');
    const z = require(${JSON.stringify(path.join(__dirname, '..', 'src', 'git', 'zlib-fast.js'))});
    assert.equal(z.nativeZlib, false);
    assert.equal(z.nativeZlibMissing, 'GIT_XET_NATIVE=0');
    const cases = require(${JSON.stringify(path.join(__dirname, 'support', 'zlib-cases.js'))});
    cases.roundTrips();
    cases.refusals();
    process.stdout.write('cases passed');
  `;
  const r = spawnSync(process.execPath, ['-e', script], {
    env: { ...process.env, GIT_XET_NATIVE: '0' },
    encoding: 'utf8',
  });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /cases passed/);
});

test('a capture stores the same objects with and without the native module, in packs git verifies', (t) => {
  if (!nativeZlib) {
    t.diagnostic(`skipped: the native module is not loaded (${nativeZlibMissing}); nothing to compare`);
    return;
  }
  const sb = createSandbox();
  try {
    const trees: string[] = [];
    for (const native of ['1', '0']) {
      const r = initRepo(sb, `src-${native}`);
      r.write('text.js', 'export const x = 1;\n'.repeat(4000));
      r.write('random.bin', pseudoRandomBytes(200_000, 5));
      r.write('empty', '');
      r.commit('base');
      r.write('new/untracked.txt', 'untracked\n'.repeat(100));
      r.write('text.js', 'export const y = 2;\n'.repeat(4000));
      const env = { ...process.env, GIT_XET_NATIVE: native };
      const res = xet(sb, r.dir, ['capture', '--json'], { env });
      assert.equal(res.status, 0, res.stderr);
      const snap = JSON.parse(res.stdout).snapshot as string;
      trees.push(r.git('rev-parse', `${snap}:files`).trim());
      const packDir = path.join(r.commonDir(), 'objects', 'pack');
      for (const idx of fs.readdirSync(packDir).filter((n) => n.endsWith('.idx'))) {
        r.git('verify-pack', path.join(packDir, idx));
      }
      r.git('fsck', '--full', '--strict', '--no-dangling');
      // The pack reader (restore by workers) of the other kind reads it: libdeflate what zlib wrote,
      // zlib what libdeflate wrote.
      const target = path.join(sb.root, `copy-${native}`);
      const other = { ...process.env, GIT_XET_NATIVE: native === '1' ? '0' : '1', GIT_XET_LAY: 'packs' };
      const restored = xet(sb, r.dir, ['restore', snap, target], { env: other });
      assert.equal(restored.status, 0, restored.stderr);
      assert.deepEqual(fs.readFileSync(path.join(target, 'random.bin')), pseudoRandomBytes(200_000, 5));
      capture(sb, target);
    }
    assert.equal(trees[0], trees[1], 'the same files tree either way');
  } finally {
    sb.cleanup();
  }
});
