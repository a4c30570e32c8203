// The push comparison's in-process object reader (src/remote/local-object-reader.ts) against
// git's cat-file (src/git/object-reader.ts): the same type, size and bytes for loose objects, packed
// ones (deltas too), objects only an alternate has (git answers those), missing ids and ids that are
// not ids; an object over the caller's bound is git's to refuse (TooBig), as through git alone; and
// a damaged loose object is read through git, never taken as it is. And LocalPacks.borrow: packs
// kept between readers, a repack between them seen.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { ObjectReader, TooBig } from '../src/git/object-reader';
import { LocalFirstObjectReader } from '../src/remote/local-object-reader';
import { LocalPacks } from '../src/chunks/local-packs';
import { withSandbox } from './support/sandbox';

function git(cwd: string, args: string[], input?: string | Buffer): string {
  return execFileSync('git', args, {
    cwd,
    input,
    encoding: 'utf8',
    env: { ...process.env, GIT_CONFIG_NOSYSTEM: '1' },
  }).trim();
}

/** A repository at `dir` with an identity to commit with. */
function initAt(dir: string, format: 'sha1' | 'sha256' = 'sha1'): string {
  fs.mkdirSync(dir);
  git(dir, ['init', '-q', `--object-format=${format}`]);
  git(dir, ['config', 'user.name', 't']);
  git(dir, ['config', 'user.email', 't@example.com']);
  return dir;
}

/** `name` written with `text` and committed. */
function commitFile(repo: string, name: string, text: string): void {
  fs.mkdirSync(path.dirname(path.join(repo, name)), { recursive: true });
  fs.writeFileSync(path.join(repo, name), text);
  git(repo, ['add', '.']);
  git(repo, ['commit', '-qm', name]);
}

test('objects read in-process are the objects git cat-file gives, and git answers the rest', async () => {
  await withSandbox(async (sb) => {
    for (const format of ['sha1', 'sha256'] as const) {
      const base = initAt(sb.path(`base-${format}`), format);
      const repo = initAt(sb.path(`repo-${format}`), format);
      // Only the alternate has these.
      commitFile(base, 'only-there.txt', 'alternate\n');
      const elsewhere = git(base, ['rev-parse', 'HEAD']);
      fs.writeFileSync(
        path.join(repo, '.git', 'objects', 'info', 'alternates'),
        `${path.join(base, '.git', 'objects')}\n`,
      );
      // Packed, with deltas: versions of one large text file, then gc.
      const big = Array.from({ length: 4000 }, (_, i) => `line ${i} of a file that changes a little\n`).join('');
      for (let v = 0; v < 4; v++) {
        fs.writeFileSync(path.join(repo, 'big.txt'), `${big}version ${v}\n`);
        commitFile(repo, `dir/sub${v}/f.txt`, `f ${v}\n`);
      }
      git(repo, ['gc', '-q', '--aggressive']);
      assert.ok(fs.readdirSync(path.join(repo, '.git', 'objects', 'pack')).some((n) => n.endsWith('.pack')));
      // Loose after the pack: a new commit.
      commitFile(repo, 'loose.txt', 'loose\n');
      const all = git(repo, ['rev-list', '--objects', '--all', '--no-object-names']).split('\n');
      const missing = format === 'sha1' ? 'f'.repeat(40) : 'e'.repeat(64);
      const oids = [...all, elsewhere, missing];
      const o = { cwd: repo, env: {} };
      const objects = path.join(repo, '.git', 'objects');
      const viaGit = new ObjectReader(o);
      const here = new LocalFirstObjectReader(o, objects, format);
      try {
        const valid = oids;
        const strip = (v: { diskSize: number } | null) => (v ? { ...v, diskSize: 0 } : v);
        assert.deepEqual((await here.info(valid)).map(strip), (await viaGit.info(valid)).map(strip), `${format}: info`);
        const a = await here.contents(valid, 1 << 20);
        const b = await viaGit.contents(valid, 1 << 20);
        assert.deepEqual(a.map(strip), b.map(strip), `${format}: contents`);
        assert.ok(a.some((x) => x?.type === 'commit') && a.some((x) => x?.type === 'tree'));
        assert.equal(a[valid.indexOf(elsewhere)]?.type, 'commit', "the alternate's commit, from git");
        assert.equal(a[valid.indexOf(missing)], null);
        await assert.rejects(here.info(['not-an-id']), /not an object id/);
      } finally {
        here.close();
        viaGit.close();
      }
      // Over the bound: TooBig, as from git.
      const bigBlob = git(repo, ['rev-parse', 'HEAD:big.txt']);
      const bounded = new LocalFirstObjectReader(o, objects, format);
      try {
        await assert.rejects(bounded.contents([bigBlob], 1000), TooBig);
      } finally {
        bounded.close();
      }
      // A damaged loose object (another object's bytes under its name) is not taken here: git is
      // asked, and the answer is git's own.
      const looseBlob = git(repo, ['rev-parse', 'HEAD:loose.txt']);
      const file = path.join(objects, looseBlob.slice(0, 2), looseBlob.slice(2));
      const other = git(repo, ['hash-object', '-w', '--stdin'], 'other\n');
      fs.chmodSync(file, 0o644);
      fs.copyFileSync(path.join(objects, other.slice(0, 2), other.slice(2)), file);
      const damaged = new LocalFirstObjectReader(o, objects, format);
      const plain = new ObjectReader(o);
      try {
        const strip = (v: { diskSize: number } | null) => (v ? { ...v, diskSize: 0 } : v);
        const got = await damaged.contents([looseBlob], 1 << 20).then(
          (r) => r.map(strip),
          (e: Error) => e.message,
        );
        const want = await plain.contents([looseBlob], 1 << 20).then(
          (r) => r.map(strip),
          (e: Error) => e.message,
        );
        assert.deepEqual(got, want);
      } finally {
        damaged.close();
        plain.close();
      }
    }
  });
});

test('packs given back are taken over by the next borrower, and a repack between them is seen', async () => {
  await withSandbox(async (sb) => {
    const repo = initAt(sb.path('repo'));
    const objects = path.join(repo, '.git', 'objects');
    const packNames = () =>
      fs
        .readdirSync(path.join(objects, 'pack'))
        .filter((n) => n.endsWith('.pack'))
        .map((n) => n.replace(/\.pack$/, ''))
        .sort();
    for (let i = 0; i < 3; i++) {
      commitFile(repo, `f${i}.txt`, `file ${i}\n`);
      git(repo, ['repack', '-q']); // a pack per commit
    }
    const first = git(repo, ['rev-list', '--max-parents=0', 'HEAD']);
    assert.equal(packNames().length, 3);
    const a = LocalPacks.borrow(objects, 'sha1');
    const before = a.find(first)?.name;
    assert.ok(before && packNames().includes(before));
    a.giveBack();
    // Repacked into one: the next borrower finds the object in the new pack, not the old one.
    git(repo, ['repack', '-q', '-a', '-d']);
    assert.equal(packNames().length, 1);
    const b = LocalPacks.borrow(objects, 'sha1');
    assert.equal(b.find(first)?.name, packNames()[0]);
    assert.equal(b.find(first)?.read(first)?.type, 'commit');
    // Taken over: while b has them, another borrower opens its own.
    const c = LocalPacks.borrow(objects, 'sha1');
    assert.equal(c.find(first)?.name, packNames()[0]);
    c.giveBack();
    b.giveBack();
  });
});

test('packs nobody borrows again are closed after a while: a pack a gc deleted gives its space back', async () => {
  await withSandbox(async (sb) => {
    const repo = initAt(sb.path('repo'));
    commitFile(repo, 'f.txt', 'f\n');
    git(repo, ['repack', '-q', '-a', '-d']);
    const objects = path.join(repo, '.git', 'objects');
    const openPacks = () =>
      fs.readdirSync('/proc/self/fd').filter((fd) => {
        try {
          return fs.readlinkSync(`/proc/self/fd/${fd}`).startsWith(path.join(objects, 'pack'));
        } catch {
          return false;
        }
      }).length;
    const before = process.env.GIT_XET_TEST_PACKS_KEPT_MS;
    process.env.GIT_XET_TEST_PACKS_KEPT_MS = '300';
    try {
      const packs = LocalPacks.borrow(objects, 'sha1');
      assert.ok(packs.find(git(repo, ['rev-parse', 'HEAD'])));
      packs.giveBack();
      assert.ok(openPacks() > 0, 'kept open for the next borrower');
      // The repository repacked and pruned meanwhile: the old pack's file is deleted, still open.
      commitFile(repo, 'g.txt', 'g\n');
      git(repo, ['repack', '-q', '-a', '-d']);
      await new Promise((done) => setTimeout(done, 800));
      assert.equal(openPacks(), 0, 'closed once nobody borrowed them');
    } finally {
      if (before === undefined) delete process.env.GIT_XET_TEST_PACKS_KEPT_MS;
      else process.env.GIT_XET_TEST_PACKS_KEPT_MS = before;
    }
  });
});

test('infoWithin reads no more than its budget here, git answers the rest, and contents takes what it read', async () => {
  await withSandbox(async (sb) => {
    const repo = initAt(sb.path('repo'));
    const blobs = Array.from({ length: 8 }, (_, i) => Buffer.alloc(100_000, 97 + i));
    const oids = blobs.map((b) => git(repo, ['hash-object', '-w', '--stdin'], b));
    const want = (i: number) => ({ oid: oids[i], type: 'blob', size: 100_000 });
    const reader = new LocalFirstObjectReader({ cwd: repo }, path.join(repo, '.git', 'objects'), 'sha1');
    try {
      // 250,000 bytes: two objects are read here (a third would pass the budget), six asked of git.
      const infos = await reader.infoWithin(oids, 250_000);
      assert.deepEqual(
        infos.map((i) => i && { oid: i.oid, type: i.type, size: i.size }),
        oids.map((_, i) => want(i)),
      );
      const held = (reader as unknown as { held: Map<string, unknown> }).held;
      assert.equal(held.size, 2, 'what was read here is held, and no more than the budget');
      const got = await reader.contents(oids, 200_000);
      assert.deepEqual(
        got.map((g) => g?.data),
        blobs,
      );
      assert.equal(held.size, 0, 'taken by contents');
    } finally {
      reader.close();
    }
  });
});
