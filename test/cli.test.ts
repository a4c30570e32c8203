// The command line as agents see it: JSON on every command, typed usage errors, exit codes, and
// `diff` against the working tree.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import { test } from 'node:test';
import { initRepo } from './support/git';
import { createSandbox } from './support/sandbox';
import { capture, expectError, expectExit, parseJson, xet } from './support/xet';

test('usage errors are typed JSON with exit 2; help and version exit 0', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    expectError(xet(sb, r.dir, ['frobnicate', '--json']), 'USAGE', 2);
    expectError(xet(sb, r.dir, ['capture', '--no-such-flag', '--json']), 'USAGE', 2);
    expectError(xet(sb, r.dir, ['capture', '--ignored', 'some', '--json']), 'USAGE', 2);
    expectError(xet(sb, r.dir, ['restore', '--json']), 'USAGE', 2);
    r.git('config', 'xet.capture.ignored', 'maybe');
    expectError(xet(sb, r.dir, ['capture', '--json']), 'CONFIG_INVALID');
    expectExit(xet(sb, r.dir, ['--help']), 0);
    const v = xet(sb, r.dir, ['--version']);
    expectExit(v, 0);
    assert.match(v.stdout, /^\d+\.\d+\.\d+/);
    // Without --json, errors go to stderr with the code, and stdout stays empty.
    const plain = xet(sb, r.dir, ['show', 'deadbeef']);
    assert.equal(plain.status, 3);
    assert.equal(plain.stdout, '');
    assert.match(plain.stderr, /\[SNAPSHOT_NOT_FOUND\]/);
  } finally {
    sb.cleanup();
  }
});

test('diff against the working tree and between snapshots, with --exit-code', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n', 'b.txt': 'b\n' });
    r.write('build/out.js', 'x\n');
    r.write('.gitignore', 'build/\n');
    const snap = capture(sb, r.dir);
    const same = parseJson(xet(sb, r.dir, ['diff', snap, '--json']));
    assert.equal(same.identical, true);
    expectExit(xet(sb, r.dir, ['diff', snap, '--exit-code']), 0);

    r.write('a.txt', 'changed\n');
    fs.rmSync(r.p('b.txt'));
    r.write('new.txt', 'n\n');
    r.write('build/out.js', 'rebuilt\n');
    r.git('add', 'new.txt');
    r.git('checkout', '-qb', 'topic');
    const objectsBefore = r.git('count-objects', '-v');
    const d = parseJson(xet(sb, r.dir, ['diff', snap, '--json']));
    assert.equal(d.identical, false);
    const kinds = d.changes.map((c: { kind: string; path?: string }) => `${c.kind} ${c.path ?? ''}`.trim()).sort();
    assert.deepEqual(kinds, [
      'file-added new.txt',
      'file-deleted b.txt',
      'file-modified a.txt',
      'file-modified build/out.js',
      'head',
      'index-added new.txt',
      'ref-created refs/heads/topic',
    ]);
    expectExit(xet(sb, r.dir, ['diff', snap, '--exit-code']), 1);
    // Nothing was stored by looking: the diff wrote no objects and no refs.
    assert.equal(r.git('count-objects', '-v'), objectsBefore);
    assert.equal(r.git('for-each-ref', 'refs/xet/').trim().split('\n').length, 1);

    const snap2 = capture(sb, r.dir);
    const between = parseJson(xet(sb, r.dir, ['diff', snap, snap2, '--json']));
    assert.deepEqual(
      between.changes.map((c: { kind: string; path?: string }) => `${c.kind} ${c.path ?? ''}`.trim()).sort(),
      kinds,
    );
  } finally {
    sb.cleanup();
  }
});
