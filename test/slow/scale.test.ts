// Scale: the largest trees of the fidelity suite (a 100 MiB file; 25,000 files whose names alone
// exceed ARG_MAX), in the slow suite because each takes a minute or two on 2 cores.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { writeLargeFile } from '../support/fixtures';
import { initRepo } from '../support/git';
import { roundTrip } from '../support/roundtrip';
import { withSandbox } from '../support/sandbox';

const BIG_TIMEOUT = 300_000;

test('a file of >= 100 MiB', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('c1', { 'small.txt': 'small\n' });
    const size = 100 * 1024 * 1024 + 12345;
    writeLargeFile(r.p('big/large.bin'), size);
    r.write('small.txt', 'small edited\n');
    const { copy } = roundTrip(sb, r.dir, { mutate: ['small.txt'], timeoutMs: BIG_TIMEOUT });
    assert.equal(fs.statSync(path.join(copy, 'big/large.bin')).size, size);
  }));

test('a tree with >= 25,000 files (half tracked, half untracked, long paths: > 2 MB of names)', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    // Long names so that the untracked paths alone (12,500 x ~160 bytes) exceed ARG_MAX.
    const dirName = (d: number) => `d${String(d).padStart(3, '0')}-${'directory-name-'.repeat(6)}`;
    const fileName = (f: number) => `f${String(f).padStart(2, '0')}-${'file-name-'.repeat(8)}.txt`;
    const write = (from: number, to: number) => {
      for (let d = from; d < to; d++) {
        const dir = r.p(dirName(d));
        fs.mkdirSync(dir);
        for (let f = 0; f < 100; f++) fs.writeFileSync(path.join(dir, fileName(f)), `dir ${d} file ${f}\n`);
      }
    };
    write(0, 125);
    r.commit('12,500 tracked files');
    write(125, 250);
    r.write(`${dirName(0)}/${fileName(0)}`, 'edited\n');
    r.write(`${dirName(123)}/${fileName(45)}`, 'edited too\n');
    r.rm(`${dirName(124)}/${fileName(99)}`);
    r.git('rm', '-q', '--cached', `${dirName(100)}/${fileName(1)}`);
    const res = roundTrip(sb, r.dir, { timeoutMs: BIG_TIMEOUT });
    assert.ok(res.copyTree.entries.size >= 25_000, `copy has ${res.copyTree.entries.size} entries`);
    const untrackedBytes = [...res.copyTree.entries.keys()].filter((p) => p >= dirName(125)).join('\0').length;
    assert.ok(untrackedBytes > 2 * 1024 * 1024, `fixture: untracked names total ${untrackedBytes} bytes`);
  }));
