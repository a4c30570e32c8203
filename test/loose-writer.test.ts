// Loose objects written in-process (src/git/loose-writer.ts: a capture's manifest blob and top tree)
// against git's own hash-object and mktree: the same ids, objects git reads back and fsck accepts,
// in SHA-1 and SHA-256 repositories, with names whose order differs between trees and blobs.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { treeContent, writeLooseObject } from '../src/git/loose-writer';
import type { TreeEntryInput } from '../src/git/plumbing';
import { withSandbox } from './support/sandbox';

function git(cwd: string, args: string[], input?: string | Buffer): string {
  return execFileSync('git', args, { cwd, input, encoding: 'utf8' }).trim();
}

test('in-process loose objects are the objects git hash-object and mktree write', async () => {
  await withSandbox(async (sb) => {
    for (const format of ['sha1', 'sha256'] as const) {
      const repo = sb.path(`repo-${format}`);
      fs.mkdirSync(repo);
      git(repo, ['init', '-q', `--object-format=${format}`]);
      const objects = path.join(repo, '.git', 'objects');
      const data = Buffer.from(`{"schema":"x"}\n\0binary\xff`, 'latin1');
      const blob = writeLooseObject(objects, format, 'blob', data);
      assert.equal(blob, git(repo, ['hash-object', '--stdin'], data));
      assert.equal(git(repo, ['cat-file', '-t', blob]), 'blob');
      // Written twice: the same id, the object left as it was.
      const file = path.join(objects, blob.slice(0, 2), blob.slice(2));
      const before = fs.statSync(file).ino;
      assert.equal(writeLooseObject(objects, format, 'blob', data), blob);
      assert.equal(fs.statSync(file).ino, before);
      const empty = git(repo, ['mktree'], '');
      // Names where git's order (a tree as if it ended in '/') differs from plain byte order.
      const entries: TreeEntryInput[] = [
        { mode: '040000', type: 'tree', oid: empty, name: 'a' },
        { mode: '100644', type: 'blob', oid: blob, name: 'a.b' },
        { mode: '100755', type: 'blob', oid: blob, name: 'a-' },
        { mode: '120000', type: 'blob', oid: blob, name: 'a0' },
        { mode: '040000', type: 'tree', oid: empty, name: 'files' },
        { mode: '100644', type: 'blob', oid: blob, name: 'filemeta' },
        { mode: '100644', type: 'blob', oid: blob, name: 'manifest.json' },
        { mode: '100644', type: 'blob', oid: blob, name: 'é' },
      ];
      const tree = writeLooseObject(objects, format, 'tree', treeContent(entries, format));
      const viaGit = git(
        repo,
        ['mktree', '-z'],
        entries.map((e) => `${e.mode} ${e.type} ${e.oid}\t${e.name}\0`).join(''),
      );
      assert.equal(tree, viaGit);
      git(repo, ['fsck', '--strict', '--no-dangling']);
      for (const bad of [
        { mode: '100600', type: 'blob', oid: blob, name: 'x' },
        { mode: '100644', type: 'tree', oid: blob, name: 'x' },
        { mode: '100644', type: 'blob', oid: blob.slice(1), name: 'x' },
        { mode: '100644', type: 'blob', oid: blob, name: 'a/b' },
        { mode: '100644', type: 'blob', oid: blob, name: '..' },
        { mode: '100644', type: 'blob', oid: blob, name: '' },
      ] as TreeEntryInput[]) {
        assert.throws(() => treeContent([bad], format), /tree entry/, JSON.stringify(bad));
      }
      assert.throws(() => treeContent([entries[1], entries[1]], format), /twice/);
    }
  });
});
