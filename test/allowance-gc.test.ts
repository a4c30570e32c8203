// git xet gc and the repository root (issue 11, review R12): gc's repack folds the packs git xet
// wrote into one pack of git's; what of it is git xet's (the objects only git xet's refs reach) stays
// counted, so the figure after gc is what git xet stored and the allowance bounds it across gc runs.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { repositoryRecount, repositoryUsed } from './support/allowance-repo';
import { killAt } from './support/faults';
import type { Amount } from '../src/allowance/model';
import { initRepo, pseudoRandomBytes, type Repo } from './support/git';
import { withSandbox, type Sandbox } from './support/sandbox';
import { capture, expectError, expectExit, xet } from './support/xet';

const MB = 1_000_000;
/** gc adds its journal rows (SETTLE_JOURNAL_BOUND_BYTES); the folded figure has no .idx/.rev. */
const TOLERANCE = 0.05;
const JOURNAL = 64 * 1024;

/** A repository with one capture of 3 MB only the snapshot reaches (untracked, incompressible). */
async function capturedRepo(sb: Sandbox, seed: number): Promise<{ r: Repo; before: Amount }> {
  const r = initRepo(sb, 'repo');
  r.commit('first', { 'README.md': '# demo\n' });
  fs.writeFileSync(path.join(r.dir, 'a.bin'), pseudoRandomBytes(3 * MB, seed));
  capture(sb, r.dir);
  return { r, before: await repositoryUsed(r.dir) };
}

test('after git xet gc the repository root still counts what git xet stored (not kilobytes)', async () => {
  await withSandbox(async (sb) => {
    const { r, before } = await capturedRepo(sb, 1);
    assert.ok(before.bytes > 3 * MB, `the capture's pack is counted (${before.bytes})`);
    expectExit(xet(sb, r.dir, ['gc', '--json']), 0);
    const packs = fs.readdirSync(path.join(r.commonDir(), 'objects', 'pack')).filter((n) => n.endsWith('.pack'));
    assert.equal(packs.length, 1, `gc folded the capture's pack into one of git's: ${packs.join(' ')}`);
    const after = await repositoryUsed(r.dir);
    const near = (a: number, what: string) =>
      assert.ok(
        Math.abs(a - before.bytes) <= before.bytes * TOLERANCE + JOURNAL,
        `${what}: ${a} bytes, before gc ${before.bytes}`,
      );
    near(after.bytes, 'after gc');
    // A recount keeps the folded figure while its pack exists.
    near((await repositoryRecount(r.dir)).bytes, 'after a recount');
    // A second gc (nothing new) does not count it twice.
    expectExit(xet(sb, r.dir, ['gc', '--json']), 0);
    near((await repositoryUsed(r.dir)).bytes, 'after a second gc');
  });
});

test('capture → gc cycles: a capture is refused once what git xet stored passes limit − headroom', async () => {
  await withSandbox(async (sb) => {
    const r = initRepo(sb, 'repo');
    r.commit('first', { 'README.md': '# demo\n' });
    capture(sb, r.dir);
    const start = await repositoryUsed(r.dir);
    const limit = start.bytes + 6 * MB;
    const headroom = 1 * MB;
    r.git('config', 'xet.allowance.bytes', String(limit));
    r.git('config', 'xet.allowance.headroom', String(headroom));
    let refusedAt = -1;
    for (let i = 0; i < 8 && refusedAt < 0; i++) {
      fs.writeFileSync(path.join(r.dir, `f${i}.bin`), pseudoRandomBytes(MB, 10 + i));
      const c = xet(sb, r.dir, ['capture', '--json']);
      if (c.status !== 0) {
        expectError(c, 'ALLOWANCE_EXCEEDED');
        refusedAt = i;
        break;
      }
      const used = await repositoryUsed(r.dir);
      assert.ok(used.bytes <= limit - headroom, `capture ${i}: ${used.bytes} > limit − headroom`);
      expectExit(xet(sb, r.dir, ['gc', '--json']), 0);
      const afterGc = await repositoryUsed(r.dir);
      assert.ok(
        afterGc.bytes >= used.bytes * (1 - TOLERANCE),
        `gc ${i} made the stored bytes leave the root: ${afterGc.bytes} < ${used.bytes}`,
      );
    }
    // Five 1 MB files fit in 6 MB − 1 MB headroom; the sixth does not.
    assert.ok(refusedAt >= 4 && refusedAt <= 5, `refused at capture ${refusedAt}`);
  });
});

test('a gc killed right after its repack leaves the root counting what git xet stored; the next gc makes it exact', async () => {
  await withSandbox(async (sb) => {
    const { r, before } = await capturedRepo(sb, 2);
    killAt(sb, r.dir, ['gc', '--json'], 'gc:after-repack');
    const killed = await repositoryUsed(r.dir);
    assert.ok(killed.bytes >= before.bytes * (1 - TOLERANCE), `after the kill: ${killed.bytes} < ${before.bytes}`);
    assert.ok((await repositoryRecount(r.dir)).bytes >= before.bytes * (1 - TOLERANCE), 'a recount keeps it');
    expectExit(xet(sb, r.dir, ['gc', '--json']), 0);
    const after = await repositoryUsed(r.dir);
    assert.ok(
      Math.abs(after.bytes - before.bytes) <= before.bytes * TOLERANCE + JOURNAL,
      `after the next gc: ${after.bytes}, before ${before.bytes} (the pending figure is not counted twice)`,
    );
  });
});
