// The streaming pack writer against git itself: git must read back every object, verify the pack
// and its index, and nothing may be published when a file changes under the writer.
import assert from 'node:assert/strict';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { isXetError } from '../src/errors';
import { batchItems } from '../src/git/pack-stream';
import { writePack, type PackItem } from '../src/git/pack-writer';
import { initRepo } from './support/git';
import { createSandbox } from './support/sandbox';

function blobOid(data: Buffer): string {
  return crypto.createHash('sha1').update(`blob ${data.length}\0`).update(data).digest('hex');
}

test('packs written here are valid to git: verify-pack, fsck and cat-file agree byte for byte', async () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'repo');
    const dir = sb.path('files');
    fs.mkdirSync(dir);
    const items: PackItem[] = [];
    const contents = new Map<string, Buffer>();
    const sizes = [0, 1, 15, 16, 127, 128, 4095, 4096, 70000, 1 << 20, 33 * 1024 * 1024 + 7];
    sizes.forEach((size, i) => {
      const data = crypto.randomBytes(size);
      const file = path.join(dir, `f${i}`);
      fs.writeFileSync(file, data);
      const oid = blobOid(data);
      contents.set(oid, data);
      items.push({ oid, type: 'blob', file });
    });
    fs.symlinkSync('../some/target', path.join(dir, 'link'));
    const linkOid = blobOid(Buffer.from('../some/target'));
    contents.set(linkOid, Buffer.from('../some/target'));
    items.push({ oid: linkOid, type: 'blob', file: path.join(dir, 'link'), symlink: true });
    items.push(items[3]); // a duplicate is written once
    const objects = path.join(r.dir, '.git', 'objects');
    const res = await writePack(objects, 'sha1', items);
    assert.equal(res.objects, contents.size);
    assert.ok(res.pack);
    const idx = path.join(objects, 'pack', `${res.pack}.idx`);
    const verified = r.git('verify-pack', '-v', idx);
    assert.match(verified, /: ok\n?$/);
    for (const [oid, data] of contents) {
      const got = r.gitTry('cat-file', 'blob', oid);
      assert.equal(got.status, 0, `object ${oid} readable`);
      assert.ok(Buffer.compare(got.stdout, data) === 0, `object ${oid} content`);
    }
    assert.deepEqual(
      fs.readdirSync(path.join(objects, 'pack')).filter((n) => n.startsWith('tmp_')),
      [],
    );
    // Writing the same set again publishes nothing new and keeps the pack valid.
    const again = await writePack(objects, 'sha1', items);
    assert.equal(again.pack, res.pack);
    r.git('fsck', '--no-progress', '--strict');
  } finally {
    sb.cleanup();
  }
});

test('a file whose content no longer matches its oid aborts the pack with WORKTREE_CHANGED', async () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'repo');
    const file = sb.path('f');
    fs.writeFileSync(file, 'before');
    const oid = blobOid(Buffer.from('before'));
    fs.writeFileSync(file, 'after!'); // changed after git hashed it
    const objects = path.join(r.dir, '.git', 'objects');
    const packDir = path.join(objects, 'pack');
    const before = fs.existsSync(packDir) ? fs.readdirSync(packDir) : [];
    await assert.rejects(writePack(objects, 'sha1', [{ oid, type: 'blob', file }]), (e: unknown) =>
      isXetError(e, 'WORKTREE_CHANGED'),
    );
    assert.deepEqual(fs.existsSync(packDir) ? fs.readdirSync(packDir) : [], before);
  } finally {
    sb.cleanup();
  }
});

test('a batch for the pack workers owns its data: views into a larger buffer are copied out', () => {
  // The tree builder's trees are views into one arena; posted as they are, every batch would
  // carry a clone of the whole arena.
  const arena = Buffer.alloc(1 << 20, 7);
  arena.write('tree one', 100);
  const items: PackItem[] = [
    { oid: 'a'.repeat(40), type: 'tree', data: arena.subarray(100, 108) },
    { oid: 'b'.repeat(40), type: 'blob', data: arena.subarray(5000, 5010) },
    { oid: 'c'.repeat(40), type: 'blob', file: '/x', range: { offset: 0, size: 10 } },
  ];
  const out = batchItems(items);
  assert.equal(out.length, 3);
  assert.equal(out[0].data?.toString(), 'tree one');
  assert.deepEqual(out[1].data, arena.subarray(5000, 5010));
  assert.equal(out[2].data, undefined);
  assert.equal(out[2].size, 10);
  for (const i of out.slice(0, 2)) assert.equal(i.data?.buffer.byteLength, 18, "one buffer, the batch's own");
});
