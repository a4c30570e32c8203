// Task records (xet.task-record/v1): `handoff create --task` publishes the task's record under
// refs/xet/tasks/<id>, push brings it with its handoff, and another repository reads the task's
// result from it in chunks (the local sidecar knows nothing of the task). A forged record is
// refused by push and by every read, never served.
import assert from 'node:assert/strict';
import * as crypto from 'node:crypto';
import { test } from 'node:test';
import { initRepo, type Repo } from './support/git';
import { withSandbox, type Sandbox } from './support/sandbox';
import { expectError, expectExit, parseJson, xet } from './support/xet';

interface Chunk {
  text: string;
  eof: boolean;
  nextOffsetBytes: number;
  sha256: string;
  origin: string;
}
const sha256 = (b: Buffer | string) => crypto.createHash('sha256').update(b).digest('hex');
/** 240 000 bytes of UTF-8 with 2- and 3-byte characters: more than three 64 KiB chunks. */
const RESULT = 'é€x'.repeat(40_000);

/** A task in `a` that printed RESULT, handed over to b, pushed with its handoff to store `s`; and a
 * repository `b` that fetched it. */
function handedOver(sb: Sandbox): { a: Repo; b: Repo; task: string; handoff: string } {
  const a = initRepo(sb, 'a', ['-b', 'main']);
  a.commit('one', { 'README.md': '# one\n' });
  const run = xet(sb, a.dir, [
    'task',
    'run',
    '--json',
    '--',
    'node',
    '-e',
    "process.stdout.write('é€x'.repeat(40000))",
  ]);
  expectExit(run, 0);
  const task = parseJson(run).task as string;
  const h = xet(sb, a.dir, ['handoff', 'create', '--task', task, '--to', 'b', '--from', 'a', '--title', 't', '--json']);
  expectExit(h, 0);
  const handoff = parseJson(h).id as string;
  a.git('remote', 'add', 's', `xet::${sb.path('store')}`);
  expectExit(xet(sb, a.dir, ['push', 's', handoff, '--json']), 0);
  const b = initRepo(sb, 'b', ['-b', 'main']);
  b.commit('local', { 'l.txt': 'l\n' });
  b.git('remote', 'add', 's', `xet::${sb.path('store')}`);
  expectExit(xet(sb, b.dir, ['fetch', 's', '--json']), 0);
  return { a, b, task, handoff };
}

function readAll(sb: Sandbox, cwd: string, task: string, maxBytes: number): { text: string; chunks: Chunk[] } {
  const chunks: Chunk[] = [];
  let offset = 0;
  for (;;) {
    const r = xet(sb, cwd, [
      'task',
      'result',
      task,
      '--offset',
      String(offset),
      '--max-bytes',
      String(maxBytes),
      '--json',
    ]);
    expectExit(r, 0);
    const c = parseJson(r) as Chunk;
    chunks.push(c);
    if (c.eof) break;
    offset = c.nextOffsetBytes;
  }
  return { text: chunks.map((c) => c.text).join(''), chunks };
}

test('a handed-over task travels: the other repository reads its result in chunks from the task record (origin "record")', async () => {
  await withSandbox((sb) => {
    const { a, b, task } = handedOver(sb);
    const record = b.git('rev-parse', `refs/xet/tasks/${task}`).trim();
    assert.equal(
      record,
      a.git('rev-parse', `refs/xet/tasks/${task}`).trim(),
      'the record commit is the same on both sides',
    );
    assert.equal(b.git('ls-tree', '--name-only', record).trim(), 'manifest.json\nresult\ntask.json');
    const { text, chunks } = readAll(sb, b.dir, task, 65536);
    assert.ok(chunks.length > 2, `${chunks.length} chunks`);
    assert.equal(text, RESULT);
    assert.equal(chunks[0].sha256, sha256(RESULT));
    assert.ok(chunks.every((c) => c.origin === 'record'));
    // Odd windows still cut on character boundaries.
    assert.equal(readAll(sb, b.dir, task, 20_001).text, RESULT);
    const whole = xet(sb, b.dir, ['task', 'result', task.slice(0, 6)]);
    expectExit(whole, 0);
    assert.equal(sha256(whole.stdout), sha256(RESULT));
    const shownB = parseJson(xet(sb, b.dir, ['task', 'show', task, '--json']));
    const shownA = parseJson(xet(sb, a.dir, ['task', 'show', task, '--json']));
    assert.equal(shownB.origin, 'record');
    assert.equal(shownA.origin, 'local');
    assert.equal(shownB.manifestSha256, shownA.manifestSha256);
    assert.deepEqual(shownB.manifest, shownA.manifest);
    assert.equal(shownB.result.sha256, shownA.result.sha256);
    assert.equal(shownB.task.status, shownA.task.status);
    // Locally the task is still read from the sidecar.
    assert.equal(parseJson(xet(sb, a.dir, ['task', 'result', task, '--json'])).origin, 'local');
  });
});

/** Replace refs/xet/tasks/<task> in `r` by a commit of the given tree entries (name → blob). */
function forge(r: Repo, task: string, files: Record<string, Buffer | string>, parent: string | null): string {
  const entries = Object.entries(files)
    .map(([name, bytes]) => `100644 blob ${r.gitInput(bytes, 'hash-object', '-w', '--stdin').trim()}\t${name}\n`)
    .join('');
  const tree = r.gitInput(entries, 'mktree').trim();
  const commit = r.git('commit-tree', tree, ...(parent ? ['-p', parent] : []), '-m', 'forged').trim();
  r.git('update-ref', `refs/xet/tasks/${task}`, commit);
  return commit;
}

test('a forged task record (result changed, sha mismatch, oversize result, wrong parent) is refused by reads and by push, never served', async () => {
  await withSandbox((sb) => {
    const { b, task, handoff } = handedOver(sb);
    const real = b.git('rev-parse', `refs/xet/tasks/${task}`).trim();
    const manifest = b.git('cat-file', 'blob', `${real}:manifest.json`);
    const taskJson = b.git('cat-file', 'blob', `${real}:task.json`);
    const parent = b.git('rev-parse', `${real}^`).trim();
    const other = b.git('rev-parse', 'HEAD').trim();
    const changed = RESULT.replace('x', 'y');
    const forged = JSON.parse(taskJson);
    forged.result.sha256 = sha256(changed);
    const cases: [string, Record<string, Buffer | string>, string | null, RegExp][] = [
      ['result bytes changed', { 'manifest.json': manifest, result: changed, 'task.json': taskJson }, parent, /hash/],
      [
        'sha256 changed to match',
        { 'manifest.json': manifest, result: changed, 'task.json': JSON.stringify(forged) },
        parent,
        /not the one its contents build|canonical/,
      ],
      [
        'oversize result blob',
        { 'manifest.json': manifest, result: Buffer.alloc(9 * 1024 * 1024, 0x61), 'task.json': taskJson },
        parent,
        /over its/,
      ],
      ['wrong parent', { 'manifest.json': manifest, result: RESULT, 'task.json': taskJson }, other, /parent/],
    ];
    b.git('remote', 'add', 's2', `xet::${sb.path('store2')}`);
    for (const [what, files, p, why] of cases) {
      forge(b, task, files, p);
      const e = expectError(xet(sb, b.dir, ['task', 'result', task, '--json']), 'INTEGRITY_MISMATCH');
      assert.match(e.message, why, what);
      assert.doesNotMatch(JSON.stringify(e), /é€x/, `${what}: nothing of the result is served`);
      expectError(xet(sb, b.dir, ['task', 'show', task, '--json']), 'INTEGRITY_MISMATCH');
      expectError(xet(sb, b.dir, ['push', 's2', handoff, '--json']), 'INTEGRITY_MISMATCH');
    }
    // The real record again: served.
    b.git('update-ref', `refs/xet/tasks/${task}`, real);
    assert.equal(readAll(sb, b.dir, task, 65536).text, RESULT);
  });
});
