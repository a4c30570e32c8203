// The storage allowance of captures and fetches (issue 11): a capture knows what it adds after
// hashing and before writing, a fetch knows its packs' sizes before copying; a refusal is
// ALLOWANCE_EXCEEDED and leaves the repository byte for byte as it was, an exact fit is accepted and
// one file or byte more is refused, and work that adds nothing is admitted even over the limit.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { partsOf, REPOSITORY_ROOT } from '../src/allowance/ledger';
import { writePack } from '../src/git/pack-writer';
import { capture as captureIn } from '../src/snapshot/capture';
import { withExistingSidecar } from '../src/sidecar/db';
import { assertUnchanged, gitDirListing, repositoryRecount, repositoryUsed } from './support/allowance-repo';
import { gitTry, initRepo, pseudoRandomBytes, type Repo } from './support/git';
import { killAt } from './support/faults';
import { withSandbox, type Sandbox } from './support/sandbox';
import { capture, expectError, expectExit, parseJson, xet } from './support/xet';

function limit(r: Repo, settings: Record<string, string | null>): void {
  for (const [k, v] of Object.entries(settings)) {
    if (v === null) r.gitTry('config', '--unset', `xet.allowance.${k}`);
    else r.git('config', `xet.allowance.${k}`, v);
  }
}

/** A repository captured once, then given new work: `files` new files of `size` bytes each, a
 * staged edit (a new index tree) and an untracked directory. */
function repoWithNewWork(sb: Sandbox, files: number, size: number): Repo {
  const r = initRepo(sb, 'repo');
  r.commit('first', { 'README.md': '# demo\n', 'src/a.js': 'exports.a = 1;\n' });
  capture(sb, r.dir);
  for (let i = 0; i < files; i++) r.write(`new/f${i}.bin`, pseudoRandomBytes(size, i + 11));
  r.write('src/a.js', 'exports.a = 2;\n');
  r.git('add', 'src/a.js');
  return r;
}

function refusal(sb: Sandbox, r: Repo) {
  const err = expectError(xet(sb, r.dir, ['capture', '--json']), 'ALLOWANCE_EXCEEDED');
  return err.details as {
    root: string;
    operation: string;
    dimension: 'bytes' | 'files';
    limit: number;
    headroom: number;
    used: number;
    adding: number;
    admissionClass: string;
  };
}

test('a refused capture is ALLOWANCE_EXCEEDED with its figures, and leaves refs, objects and every git xet file byte for byte', async () => {
  await withSandbox(async (sb) => {
    const r = repoWithNewWork(sb, 4, 50_000);
    const used = await repositoryUsed(r.dir);
    limit(r, { bytes: String(used.bytes + 1000), headroom: '0%' });
    const gitDir = path.join(r.dir, '.git');
    const before = gitDirListing(gitDir);
    const d = refusal(sb, r);
    assert.equal(d.root, 'repository');
    assert.equal(d.operation, 'capture');
    assert.equal(d.dimension, 'bytes');
    assert.equal(d.admissionClass, 'grow');
    assert.equal(d.limit, used.bytes + 1000);
    assert.equal(d.headroom, 0);
    // What is used includes the capture's own scratch (its stat cache copy, the new trees): at least
    // what was there before it started.
    assert.ok(d.used >= used.bytes, `used ${d.used} >= ${used.bytes}`);
    assert.ok(d.adding > 200_000, `the bound covers the 200 kB of new files: ${d.adding}`);
    assertUnchanged(gitDir, before, 'a refused capture');
    // The default headroom is held back from new work: the message says so.
    limit(r, { bytes: String(used.bytes + 1000), headroom: null });
    const before2 = gitDirListing(gitDir);
    const err = expectError(xet(sb, r.dir, ['capture', '--json']), 'ALLOWANCE_EXCEEDED');
    assert.match(err.message, /held back as headroom/);
    assert.ok(err.details.headroom > 0);
    assertUnchanged(gitDir, before2, 'a refused capture under the default headroom');
    // Raised: the same capture goes through, stores the files and records its pack in the ledger.
    limit(r, { bytes: '1G' });
    const snap = capture(sb, r.dir);
    assert.equal(r.git('cat-file', '-t', snap).trim(), 'commit');
    const parts = withExistingSidecar(gitDir, (db) => partsOf(db, REPOSITORY_ROOT)) ?? [];
    assert.ok(parts.filter((p) => p.part.startsWith('pack:')).length >= 2, JSON.stringify(parts));
  });
});

for (const dimension of ['files', 'bytes'] as const) {
  test(`a capture that fits xet.allowance.${dimension} exactly is accepted; one ${dimension === 'files' ? 'file' : 'byte'} less is refused`, async () => {
    await withSandbox(async (sb) => {
      const r = repoWithNewWork(sb, 3, 20_000);
      // The exact figure, from the allowance's own measure: what is used and what the capture adds.
      limit(r, { [dimension]: '1', headroom: '0%' });
      const first = refusal(sb, r);
      assert.equal(first.dimension, dimension);
      const exact = first.used + first.adding;
      limit(r, { [dimension]: String(exact - 1) });
      const gitDir = path.join(r.dir, '.git');
      const before = gitDirListing(gitDir);
      const over = refusal(sb, r);
      assert.equal(over.dimension, dimension);
      assert.deepEqual([over.used, over.adding], [first.used, first.adding], 'a refusal changed nothing it counts');
      assert.equal(over.used + over.adding, over.limit + 1, `one ${dimension === 'files' ? 'file' : 'byte'} over`);
      assertUnchanged(gitDir, before, 'a capture refused by one');
      limit(r, { [dimension]: String(exact) });
      const out = parseJson(xet(sb, r.dir, ['capture', '--json']));
      assert.equal(out.unchanged, false, JSON.stringify(out));
      assert.match(out.snapshot, /^[0-9a-f]{40}$/);
      const after = await repositoryUsed(r.dir);
      assert.ok(after[dimension] <= exact, `used ${after[dimension]} <= ${exact} after the exact fit`);
    });
  });
}

test('an unchanged re-capture adds nothing and is admitted even over the limit', async () => {
  await withSandbox(async (sb) => {
    const r = initRepo(sb, 'repo');
    r.commit('first', { 'a.txt': 'a\n' });
    r.write('untracked.bin', pseudoRandomBytes(30_000, 3));
    const snap = capture(sb, r.dir);
    limit(r, { bytes: '1', files: '1', headroom: '0%' });
    const used = await repositoryUsed(r.dir);
    assert.ok(used.bytes > 1 && used.files > 1, 'the root is over both limits');
    const r2 = xet(sb, r.dir, ['capture', '--json']);
    expectExit(r2, 0);
    const out = parseJson(r2);
    assert.equal(out.unchanged, true);
    assert.equal(out.snapshot, snap);
    // Anything new is refused, though.
    r.write('more.txt', 'more\n');
    expectError(xet(sb, r.dir, ['capture', '--json']), 'ALLOWANCE_EXCEEDED');
  });
});

test('a fetch from a xet store over the allowance is refused before any file lands; within it the packs are recorded', async () => {
  await withSandbox(async (sb) => {
    const src = initRepo(sb, 'src');
    src.commit('big', { 'big.bin': pseudoRandomBytes(150_000, 5), 'small.txt': 'x\n' });
    const store = sb.path('store');
    const push = gitTry(sb, src.dir, ['push', '-q', `xet::${store}`, 'HEAD:refs/heads/main']);
    assert.equal(push.status, 0, push.stderr.toString());
    const dst = initRepo(sb, 'dst');
    limit(dst, { bytes: '100000', headroom: '0%' });
    const gitDir = path.join(dst.dir, '.git');
    const before = gitDirListing(gitDir);
    const f = gitTry(sb, dst.dir, ['fetch', '-q', `xet::${store}`, 'main']);
    assert.notEqual(f.status, 0);
    const stderr = f.stderr.toString();
    assert.match(stderr, /\[ALLOWANCE_EXCEEDED\]/, stderr);
    assert.match(stderr, /fetch from .* would add \d+ bytes to repository/);
    // FETCH_HEAD is git's own: git fetch truncates it before it asks the helper for anything.
    assertUnchanged(gitDir, before, 'a refused fetch', ['FETCH_HEAD']);
    assert.deepEqual(
      fs.readdirSync(path.join(gitDir, 'objects', 'pack')).filter((n) => n.startsWith('tmp_')),
      [],
    );
    limit(dst, { bytes: '10M' });
    const ok = gitTry(sb, dst.dir, ['fetch', '-q', `xet::${store}`, 'main']);
    assert.equal(ok.status, 0, ok.stderr.toString());
    const packs = fs.readdirSync(path.join(gitDir, 'objects', 'pack')).filter((n) => n.endsWith('.pack'));
    const parts = (withExistingSidecar(gitDir, (db) => partsOf(db, REPOSITORY_ROOT)) ?? []).map((p) => p.part);
    assert.deepEqual(parts.sort(), packs.map((n) => `pack:${n.slice(0, -'.pack'.length)}`).sort());
    // The ledger is right: what a check sees is what a full recount finds.
    const cheap = await repositoryUsed(dst.dir);
    const full = await repositoryRecount(dst.dir);
    assert.deepEqual([cheap.bytes, cheap.files], [full.bytes, full.files]);
  });
});

test('the pack writer removes its finished temporaries when beforePublish refuses', async () => {
  await withSandbox(async (sb) => {
    const r = initRepo(sb, 'repo');
    const objects = path.join(r.dir, '.git', 'objects');
    const data = Buffer.from('hello\n');
    const oid = r.gitInput(data, 'hash-object', '--stdin').trim();
    const seen: number[] = [];
    await assert.rejects(
      writePack(objects, 'sha1', [{ oid, type: 'blob', data }], 1, (p) => {
        seen.push(p.packBytes, p.idxBytes, p.objects);
        const names = fs.readdirSync(path.join(objects, 'pack'));
        assert.equal(names.filter((n) => /^tmp_(pack|idx)_xet_\d+_/.test(n)).length, 2, names.join(' '));
        throw Object.assign(new Error('refused'), { code: 'X' });
      }),
      /refused/,
    );
    assert.equal(seen[2], 1);
    assert.ok(seen[0] > 12 && seen[1] > 1000);
    assert.deepEqual(fs.readdirSync(path.join(objects, 'pack')), []);
  });
});

test("a settling capture (discard and reclaim keep a fork's work) may use the headroom; a growing one may not", async () => {
  await withSandbox(async (sb) => {
    const r = repoWithNewWork(sb, 2, 40_000);
    const used = await repositoryUsed(r.dir);
    // Room for the capture under the limit, none under limit - headroom.
    limit(r, { bytes: String(used.bytes + 400_000), headroom: '300k' });
    const d = refusal(sb, r);
    assert.equal(d.admissionClass, 'grow');
    assert.ok(d.used + d.adding <= d.limit, `it fits under the limit itself: ${JSON.stringify(d)}`);
    const saved = { ...process.env };
    try {
      Object.assign(process.env, sb.env);
      const out = await captureIn({ cwd: r.dir, admissionClass: 'settle' });
      assert.equal(out.unchanged, false);
      assert.equal(r.git('cat-file', '-t', out.snapshot).trim(), 'commit');
    } finally {
      for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
      Object.assign(process.env, saved);
    }
  });
});

test('after git xet consolidates packs (xet.capture.maxPacks), the ledger names the packs git made of ours', async () => {
  await withSandbox(async (sb) => {
    const r = initRepo(sb, 'repo');
    r.commit('first', { 'a.txt': 'a\n' });
    r.git('config', 'xet.capture.maxPacks', '2');
    let repacked = false;
    for (let i = 0; i < 4; i++) {
      r.write(`u${i}.bin`, pseudoRandomBytes(20_000, i + 40));
      const out = parseJson(xet(sb, r.dir, ['capture', '--json']));
      repacked ||= out.repacked;
    }
    assert.ok(repacked, 'a capture rolled the small packs up');
    const gitDir = path.join(r.dir, '.git');
    const packs = fs.readdirSync(path.join(gitDir, 'objects', 'pack')).filter((n) => n.endsWith('.pack'));
    const parts = (withExistingSidecar(gitDir, (db) => partsOf(db, REPOSITORY_ROOT)) ?? []).map((p) => p.part);
    const live = new Set(packs.map((n) => `pack:${n.slice(0, -'.pack'.length)}`));
    assert.deepEqual(
      parts.filter((p) => !live.has(p)),
      [],
      'no part names a pack that is gone',
    );
    // Every capture's objects are in a pack the ledger counts (the user's commit may be in git's own).
    const counted = await repositoryUsed(r.dir);
    const full = await repositoryRecount(r.dir);
    assert.deepEqual([counted.bytes, counted.files], [full.bytes, full.files]);
    assert.ok(counted.bytes > 4 * 20_000, `our packs are counted: ${counted.bytes}`);
  });
});

test('a refused first capture leaves no object, ref or sidecar: only its lock files and empty directories', async () => {
  await withSandbox(async (sb) => {
    const r = initRepo(sb, 'repo');
    r.commit('first', { 'a.txt': 'a\n' });
    r.write('big.bin', pseudoRandomBytes(100_000, 8));
    limit(r, { bytes: '50000', headroom: '0%' });
    const gitDir = path.join(r.dir, '.git');
    const before = gitDirListing(gitDir);
    expectError(xet(sb, r.dir, ['capture', '--json']), 'ALLOWANCE_EXCEEDED');
    // The locks are taken before anything is read (they are what makes the reads consistent).
    assertUnchanged(gitDir, before, 'a refused first capture', ['xet/locks/', 'xet/cache/', 'xet/tmp/']);
    assert.deepEqual(fs.readdirSync(path.join(gitDir, 'xet')).sort(), ['cache', 'locks', 'tmp']);
    assert.deepEqual(fs.readdirSync(path.join(gitDir, 'xet', 'tmp')), []);
  });
});

test('a large object is deflated straight into the pack: nothing beside the pack holds it while it is written', async () => {
  await withSandbox(async (sb) => {
    const r = initRepo(sb, 'repo');
    const objects = path.join(r.dir, '.git', 'objects');
    const file = path.join(r.dir, 'big.bin');
    fs.writeFileSync(file, pseudoRandomBytes(24 * 1024 * 1024, 21));
    const oid = r.git('hash-object', 'big.bin').trim();
    const packDir = path.join(objects, 'pack');
    const seen = new Set<string>();
    let peak = 0;
    const poll = setInterval(() => {
      let sum = 0;
      for (const n of fs.readdirSync(packDir)) {
        if (!n.startsWith('tmp_')) continue;
        seen.add(n.replace(/_xet_\d+_[0-9a-f]+/, '_xet_<id>'));
        sum += fs.statSync(path.join(packDir, n), { throwIfNoEntry: false })?.size ?? 0;
      }
      peak = Math.max(peak, sum);
    }, 2);
    let published = 0;
    try {
      await writePack(objects, 'sha1', [{ oid, type: 'blob', file }], 1, (p) => {
        published = p.packBytes + p.idxBytes;
      });
    } finally {
      clearInterval(poll);
    }
    assert.ok(published > 24 * 1024 * 1024, `random bytes do not shrink: ${published}`);
    assert.deepEqual(
      [...seen].filter((n) => !/^tmp_(pack|idx)_xet_<id>$/.test(n)),
      [],
      'only the pack and its index',
    );
    assert.ok(peak <= published, `temporaries peaked at ${peak} B, the pack and index are ${published} B`);
    assert.equal(r.git('cat-file', '-s', oid).trim(), String(24 * 1024 * 1024));
  });
});

/** What `du -b --apparent-size` would say of the repository root at rest: every non-directory under
 * xet/ but forks (hard links once), and the files of the packs the ledger names. */
function atRest(gitDir: string): { bytes: number; files: number } {
  const total = { bytes: 0, files: 0 };
  const seen = new Set<string>();
  const walk = (dir: string) => {
    for (const d of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, d.name);
      if (d.isDirectory()) {
        if (p !== path.join(gitDir, 'xet', 'forks')) walk(p);
        continue;
      }
      const st = fs.lstatSync(p);
      if (seen.has(`${st.dev}:${st.ino}`)) continue;
      seen.add(`${st.dev}:${st.ino}`);
      total.bytes += st.size;
      total.files++;
    }
  };
  walk(path.join(gitDir, 'xet'));
  const packDir = path.join(gitDir, 'objects', 'pack');
  for (const p of withExistingSidecar(gitDir, (db) => partsOf(db, REPOSITORY_ROOT)) ?? []) {
    if (!p.part.startsWith('pack:')) continue;
    for (const s of ['.pack', '.idx', '.rev']) {
      const st = fs.statSync(path.join(packDir, `${p.part.slice(5)}${s}`), { throwIfNoEntry: false });
      if (st) {
        total.bytes += st.size;
        total.files++;
      }
    }
  }
  return total;
}

test("allowance's figure at rest is what is on disk: the measuring connection's own shm and WAL are not counted", async () => {
  await withSandbox(async (sb) => {
    const r = repoWithNewWork(sb, 2, 10_000);
    capture(sb, r.dir);
    const gitDir = path.join(r.dir, '.git');
    assert.ok(!fs.existsSync(path.join(gitDir, 'xet', 'xet.db-shm')), 'no connection is open at rest');
    const disk = atRest(gitDir);
    const repoRoot = (out: { roots: { root: string; used: unknown }[] }) =>
      out.roots.find((x) => x.root === 'repository')?.used;
    assert.deepEqual(repoRoot(parseJson(xet(sb, r.dir, ['allowance', '--json']))), disk);
    assert.deepEqual(repoRoot(parseJson(xet(sb, r.dir, ['allowance', '--recount', '--json']))), atRest(gitDir));
    const used = await repositoryUsed(r.dir);
    assert.deepEqual(used, atRest(gitDir), 'what admission sees');
  });
});

test("a capture of many new directories fits a files allowance of what is used + its pack's 3 files (+ its marker and lock journal): its scratch trees and stat cache link are not charged", async () => {
  await withSandbox(async (sb) => {
    const r = repoWithNewWork(sb, 0, 0);
    capture(sb, r.dir);
    // One new tree per directory: 60 directories make 60 loose trees in the capture's scratch.
    for (let i = 0; i < 60; i++) r.write(`d${i}/e${i % 7}/f.txt`, `file ${i}\n`);
    const used = await repositoryUsed(r.dir);
    assert.deepEqual(used, await repositoryRecount(r.dir).then((x) => ({ bytes: x.bytes, files: x.files })));
    // While it runs the capture also has its crash marker and its lock's journal: 2 files.
    limit(r, { files: String(used.files + 2 + 2), headroom: '0%' });
    const over = refusal(sb, r);
    assert.deepEqual([over.used, over.adding], [used.files + 2, 3], 'used is what was there before the capture');
    limit(r, { files: String(used.files + 2 + 3) });
    const out = parseJson(xet(sb, r.dir, ['capture', '--json']));
    assert.equal(out.unchanged, false);
    const after = await repositoryUsed(r.dir);
    assert.ok(after.files <= used.files + 3, `${after.files} <= ${used.files + 3}`);
    assert.deepEqual(fs.readdirSync(path.join(r.dir, '.git', 'xet', 'tmp')), []);
  });
});

test("a killed export's scratch (xet/tmp/export-<pid>-*) is counted and removed by allowance --recount; an export over the allowance is refused and leaves .git as it was", async () => {
  await withSandbox(async (sb) => {
    const r = initRepo(sb, 'repo');
    r.commit('first', { 'a.txt': 'a\n' });
    r.write('big.bin', pseudoRandomBytes(400_000, 31));
    const snap = capture(sb, r.dir);
    const gitDir = path.join(r.dir, '.git');
    const before = await repositoryUsed(r.dir);
    killAt(sb, r.dir, ['export', snap, '--patch', sb.path('x.patch')], 'export:after-checkout');
    const tmp = path.join(gitDir, 'xet', 'tmp');
    const left = fs.readdirSync(tmp);
    assert.equal(left.length, 1, left.join(' '));
    assert.match(left[0], /^export-\d+-[A-Za-z0-9]{6}$/);
    const dead = await repositoryUsed(r.dir);
    assert.ok(dead.bytes >= before.bytes + 400_000, `the dead export's files are counted: ${dead.bytes}`);
    const rc = parseJson(xet(sb, r.dir, ['allowance', '--recount', '--json']));
    assert.ok(rc.leftoversRemoved >= 1, JSON.stringify(rc));
    assert.deepEqual(fs.readdirSync(tmp), []);
    assert.deepEqual(await repositoryUsed(r.dir), before);
    // Over the allowance: refused before anything is written.
    limit(r, { bytes: String(before.bytes + 100_000), headroom: '0%' });
    const listing = gitDirListing(gitDir);
    const err = expectError(
      xet(sb, r.dir, ['export', snap, '--patch', sb.path('y.patch'), '--json']),
      'ALLOWANCE_EXCEEDED',
    );
    assert.equal(err.details.operation, 'export');
    assert.ok(err.details.adding > 400_000, JSON.stringify(err.details));
    assertUnchanged(gitDir, listing, 'a refused export');
    assert.ok(!fs.existsSync(sb.path('y.patch')));
    limit(r, { bytes: '100M' });
    expectExit(xet(sb, r.dir, ['export', snap, '--patch', sb.path('z.patch')]), 0);
    assert.deepEqual(fs.readdirSync(tmp), []);
  });
});
