// Task results (src/tasks/result.ts) and `git xet task result`: tasks are made through the store
// API and their stdout / $XET_TASK_RESULT files written by the test (the runner is not needed to
// decide what is kept), then read back through the real CLI. The limits at 256 KiB and 8 MiB, by
// one byte either side; strict UTF-8 (never a lossy decode); chunks that end on character
// boundaries whatever --max-bytes is, concatenating to the stored bytes and their sha256; offsets
// checked; spools that a hostile process shrank, removed or replaced with a FIFO.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { codeOf } from './support/errors';
import { initRepo, run, type Repo } from './support/git';
import { withSandbox, type Sandbox } from './support/sandbox';
import { describeRun, expectError, expectExit, parseJson, xet, XET_BIN } from './support/xet';
import { openSidecar, type Db } from '../src/sidecar/db';
import { RESULT_CHUNK_MAX, RESULT_INLINE_MAX, RESULT_MAX, RESULT_PREVIEW_BYTES } from '../src/tasks/model';
import { ensureTaskDir, taskDir, taskFile } from '../src/tasks/paths';
import { readResultChunk, resultSummary, storeResult } from '../src/tasks/result';
import { getTask, insertTask, listEvents, updateTask, type TaskRow } from '../src/tasks/store';
import { taskRow } from './support/tasks';

const sha256 = (b: Buffer): string => crypto.createHash('sha256').update(b).digest('hex');

function repo(sb: Sandbox): Repo {
  const r = initRepo(sb, 'src');
  r.commit('c1', { 'a.txt': 'a\n' });
  return r;
}

/** A task row as the runner would have made it, ended (succeeded) unless `status` says otherwise. */
function newTask(db: Db, r: Repo, status: TaskRow['status'] = 'succeeded'): TaskRow {
  const id = crypto.randomBytes(8).toString('hex');
  const now = new Date().toISOString();
  const manifestJson = JSON.stringify({ schema: 'xet.task/v1', taskId: id });
  insertTask(
    db,
    taskRow({
      id,
      createdAt: now,
      slot: 'test-slot',
      worktree: r.dir,
      gitDir: r.gitPath('.'),
      capture: false,
      manifestJson,
    }),
  );
  if (status !== 'created') {
    updateTask(db, id, { status, startedAt: now, endedAt: status === 'running' ? null : now, exitCode: 0 });
  }
  ensureTaskDir(r.commonDir(), id);
  return getTask(db, id) as TaskRow;
}

/** Valid UTF-8 of exactly `size` bytes mixing 1- to 4-byte characters (deterministic). */
function utf8Of(size: number, seed = 1): Buffer {
  const chars = ['a', 'é', '€', '😀', 'z', 'ж', '中', '𝄞', '\n'].map((c) => Buffer.from(c, 'utf8'));
  const parts: Buffer[] = [];
  let n = 0;
  let x = seed;
  while (n < size - 4) {
    x = (x * 1103515245 + 12345) >>> 0;
    const c = chars[(x >>> 16) % chars.length];
    parts.push(c);
    n += c.length;
  }
  parts.push(Buffer.alloc(size - n, 'b'));
  const out = Buffer.concat(parts);
  assert.equal(out.length, size);
  return out;
}

/** `git xet task result` with stdout kept as bytes. */
function rawResult(
  sb: Sandbox,
  cwd: string,
  args: string[],
): { status: number | null; stdout: Buffer; stderr: string } {
  const res = run(sb, cwd, process.execPath, [XET_BIN, 'task', 'result', ...args]);
  return { status: res.status, stdout: res.stdout, stderr: res.stderr.toString('utf8') };
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
function chunk(sb: Sandbox, cwd: string, id: string, offset: number, maxBytes: number): any {
  const res = xet(sb, cwd, [
    'task',
    'result',
    id,
    '--offset',
    String(offset),
    '--max-bytes',
    String(maxBytes),
    '--json',
  ]);
  expectExit(res, 0);
  return parseJson(res);
}

/** Reads the whole result chunk by chunk through the CLI; checks every chunk's shape on the way. */
function readAllByCli(sb: Sandbox, cwd: string, id: string, maxBytes: number, expected: Buffer): void {
  const got: Buffer[] = [];
  let offset = 0;
  for (let calls = 0; ; calls++) {
    assert.ok(calls <= expected.length + 1, 'the reads do not move forward');
    const c = chunk(sb, cwd, id, offset, maxBytes);
    const bytes = Buffer.from(c.text, 'utf8');
    assert.equal(c.offsetBytes, offset);
    assert.equal(
      c.nextOffsetBytes,
      offset + bytes.length,
      `chunk at ${offset}: nextOffsetBytes is not offset + its bytes`,
    );
    assert.equal(c.sizeBytes, expected.length);
    assert.equal(c.sha256, sha256(expected));
    assert.ok(bytes.length > 0 || c.eof, `an empty chunk at ${offset} that is not the end`);
    // At most maxBytes, unless one character is longer than maxBytes (then exactly that character).
    assert.ok(bytes.length <= Math.max(maxBytes, 4), `chunk of ${bytes.length} bytes for --max-bytes ${maxBytes}`);
    if (bytes.length > maxBytes) assert.equal(Buffer.from([...c.text][0], 'utf8').length, bytes.length);
    assert.deepEqual(bytes, expected.subarray(offset, offset + bytes.length), `chunk at ${offset} differs`);
    got.push(bytes);
    offset = c.nextOffsetBytes;
    if (c.eof) break;
  }
  const all = Buffer.concat(got);
  assert.equal(all.length, expected.length);
  assert.equal(sha256(all), sha256(expected));
}

function spoolLeftovers(commonDir: string, id: string): string[] {
  return fs.readdirSync(taskDir(commonDir, id)).filter((n) => n.startsWith('.result.spool') || n === 'result.spool');
}

test('results at 256 KiB - 1 (inline), 256 KiB + 1 and 8 MiB (spooled 0600 in 0700), 8 MiB + 1 (RESULT_TOO_LARGE, nothing kept)', async () => {
  await withSandbox((sb) => {
    const r = repo(sb);
    const common = r.commonDir();
    const db = openSidecar(common);
    const cases: { size: number; storage: 'inline' | 'spool' | null }[] = [
      { size: RESULT_INLINE_MAX - 1, storage: 'inline' },
      { size: RESULT_INLINE_MAX, storage: 'inline' },
      { size: RESULT_INLINE_MAX + 1, storage: 'spool' },
      { size: RESULT_MAX, storage: 'spool' },
      { size: RESULT_MAX + 1, storage: null },
    ];
    const made: { id: string; bytes: Buffer; storage: 'inline' | 'spool' | null }[] = [];
    const umask = process.umask(0); // the modes must not depend on the umask
    try {
      for (const c of cases) {
        const t = newTask(db, r);
        const bytes = utf8Of(c.size, c.size);
        fs.writeFileSync(taskFile(common, t.id, 'stdout'), bytes);
        fs.chmodSync(taskDir(common, t.id), 0o755); // storeResult makes it private again
        if (c.storage === null) {
          assert.equal(
            codeOf(() => storeResult(db, common, t)),
            'RESULT_TOO_LARGE',
          );
          const row = getTask(db, t.id) as TaskRow;
          assert.equal(row.errorCode, 'RESULT_TOO_LARGE');
          assert.equal(row.resultStorage, null);
          assert.equal(row.resultSizeBytes, null);
          assert.deepEqual(spoolLeftovers(common, t.id), [], 'nothing spooled, no temporary left');
          const refused = listEvents(db, t.id).filter((e) => e.eventType === 'task.result_refused');
          assert.equal(refused.length, 1);
          assert.equal(refused[0].payload.code, 'RESULT_TOO_LARGE');
          assert.equal(refused[0].payload.sizeBytes, c.size);
          assert.equal(resultSummary(db, common, row), null);
        } else {
          const info = storeResult(db, common, t);
          assert.deepEqual(info, { storage: c.storage, source: 'stdout', sizeBytes: c.size, sha256: sha256(bytes) });
          const row = getTask(db, t.id) as TaskRow;
          assert.equal(row.resultStorage, c.storage);
          assert.equal(row.resultSizeBytes, c.size);
          assert.equal(row.resultSha256, sha256(bytes));
          const spooled = listEvents(db, t.id).filter((e) => e.eventType === 'task.result_spooled');
          if (c.storage === 'spool') {
            const spool = taskFile(common, t.id, 'result.spool');
            assert.equal(fs.statSync(spool).mode & 0o777, 0o600);
            assert.equal(fs.statSync(taskDir(common, t.id)).mode & 0o777, 0o700);
            assert.deepEqual(fs.readFileSync(spool), bytes);
            assert.deepEqual(spoolLeftovers(common, t.id), ['result.spool']);
            assert.equal(spooled.length, 1);
            assert.deepEqual(spooled[0].payload, { sizeBytes: c.size, sha256: sha256(bytes) });
          } else {
            assert.deepEqual(spoolLeftovers(common, t.id), [], 'an inline result has no spool');
            assert.equal(spooled.length, 0);
          }
          const sum = resultSummary(db, common, row);
          assert.ok(sum);
          assert.equal(sum.retrievable, true);
          assert.equal(sum.truncated, true);
          const preview = Buffer.from(sum.preview, 'utf8');
          assert.ok(preview.length <= RESULT_PREVIEW_BYTES && preview.length > RESULT_PREVIEW_BYTES - 4);
          assert.deepEqual(preview, bytes.subarray(0, preview.length));
        }
        made.push({ id: t.id, bytes, storage: c.storage });
      }
    } finally {
      process.umask(umask);
      db.close();
    }
    for (const m of made) {
      const whole = rawResult(sb, r.dir, [m.id]);
      if (m.storage === null) {
        const res = xet(sb, r.dir, ['task', 'result', m.id, '--json']);
        const err = expectError(res, 'RESULT_NOT_AVAILABLE');
        assert.match(err.message, /refused \(RESULT_TOO_LARGE\)/);
        assert.equal(whole.status, 3);
        assert.equal(whole.stdout.length, 0);
        continue;
      }
      assert.equal(whole.status, 0, whole.stderr);
      assert.equal(whole.stdout.length, m.bytes.length);
      assert.equal(sha256(whole.stdout), sha256(m.bytes), `the whole result of ${m.bytes.length} bytes differs`);
      const first = chunk(sb, r.dir, m.id, 0, RESULT_CHUNK_MAX);
      assert.equal(first.sizeBytes, m.bytes.length);
      assert.equal(first.sha256, sha256(m.bytes));
      assert.equal(first.eof, false);
      assert.ok(first.nextOffsetBytes <= RESULT_CHUNK_MAX && first.nextOffsetBytes > RESULT_CHUNK_MAX - 4);
      // One raw chunk from the middle: the same bytes as the JSON text.
      const mid = chunk(sb, r.dir, m.id, first.nextOffsetBytes, 1000);
      const raw = rawResult(sb, r.dir, [m.id, '--offset', String(first.nextOffsetBytes), '--max-bytes', '1000']);
      assert.equal(raw.status, 0, raw.stderr);
      assert.deepEqual(raw.stdout, Buffer.from(mid.text, 'utf8'));
    }
  });
});

test('a result that is not valid UTF-8 is RESULT_NOT_UTF8, recorded, and nothing of it is kept', async () => {
  await withSandbox((sb) => {
    const r = repo(sb);
    const common = r.commonDir();
    const db = openSidecar(common);
    const big = utf8Of(RESULT_INLINE_MAX + 5000, 3);
    const bad: [string, Buffer][] = [
      ['a 0xff byte', Buffer.from('abc\xffdef', 'latin1')],
      ['a character cut off at the end', Buffer.concat([Buffer.from('price: '), Buffer.from('€').subarray(0, 2)])],
      ['an encoded surrogate', Buffer.from([0x61, 0xed, 0xa0, 0x80, 0x62])],
      ['an overlong slash', Buffer.from([0x2f, 0xc0, 0xaf])],
      ['a stray continuation byte', Buffer.from([0x61, 0x80, 0x62])],
      // past the inline limit, so the spool's temporary file existed when the bad byte came
      ['a bad byte after 256 KiB', Buffer.concat([big, Buffer.from([0xc3, 0x28])])],
      ['a character cut across the end of a spooled result', Buffer.concat([big, Buffer.from('😀').subarray(0, 3)])],
    ];
    try {
      for (const [what, bytes] of bad) {
        const t = newTask(db, r);
        fs.writeFileSync(taskFile(common, t.id, 'stdout'), bytes);
        assert.equal(
          codeOf(() => storeResult(db, common, t)),
          'RESULT_NOT_UTF8',
          what,
        );
        const row = getTask(db, t.id) as TaskRow;
        assert.equal(row.errorCode, 'RESULT_NOT_UTF8', what);
        assert.equal(row.resultStorage, null, what);
        assert.equal(row.resultSha256, null, what);
        assert.deepEqual(spoolLeftovers(common, t.id), [], `${what}: no spool, no temporary`);
        const refused = listEvents(db, t.id).filter((e) => e.eventType === 'task.result_refused');
        assert.deepEqual(
          refused.map((e) => e.payload),
          [{ code: 'RESULT_NOT_UTF8', source: 'stdout', sizeBytes: bytes.length }],
          what,
        );
        expectError(xet(sb, r.dir, ['task', 'result', t.id, '--json']), 'RESULT_NOT_AVAILABLE');
      }
      // The same bytes made valid are kept: the refusal was about the bytes, not the size.
      const t = newTask(db, r);
      fs.writeFileSync(taskFile(common, t.id, 'stdout'), Buffer.concat([big, Buffer.from('😀')]));
      assert.equal(storeResult(db, common, t).storage, 'spool');
    } finally {
      db.close();
    }
  });
});

test('chunks end on UTF-8 boundaries for every --max-bytes: 2-, 3- and 4-byte characters straddle each boundary', async () => {
  await withSandbox((sb) => {
    const r = repo(sb);
    const common = r.commonDir();
    const db = openSidecar(common);
    // Short (every CLI read is a process): lengths 4,3,2,1 and runs of the same length put a
    // character across every cut of 1..7 bytes.
    const small = Buffer.from('😀€éa😀😀€€éé𝄞中жz😀é€a', 'utf8');
    const big = utf8Of(RESULT_INLINE_MAX + 70_000, 9);
    let smallId: string;
    let bigId: string;
    try {
      const t1 = newTask(db, r);
      fs.writeFileSync(taskFile(common, t1.id, 'stdout'), small);
      assert.equal(storeResult(db, common, t1).storage, 'inline');
      smallId = t1.id;
      const t2 = newTask(db, r);
      fs.writeFileSync(taskFile(common, t2.id, 'stdout'), big);
      assert.equal(storeResult(db, common, t2).storage, 'spool');
      bigId = t2.id;
      // In process, exhaustively: every maxBytes 1..7 from every boundary of both results.
      for (const [row, bytes] of [
        [getTask(db, smallId) as TaskRow, small],
        [getTask(db, bigId) as TaskRow, big],
      ] as const) {
        const upTo = Math.min(bytes.length, 3000);
        for (let k = 1; k <= 7; k++) {
          let offset = 0;
          const parts: Buffer[] = [];
          while (offset < upTo) {
            const c = readResultChunk(db, common, row, offset, k);
            const b = Buffer.from(c.text, 'utf8');
            assert.ok(b.length > 0);
            assert.ok(b.length <= k || [...c.text].length === 1, `k=${k} at ${offset}: ${b.length} bytes`);
            assert.ok(offset + b.length === row.resultSizeBytes || (bytes[offset + b.length] & 0xc0) !== 0x80);
            parts.push(b);
            offset = c.nextOffsetBytes;
          }
          assert.deepEqual(Buffer.concat(parts), bytes.subarray(0, offset));
        }
      }
    } finally {
      db.close();
    }
    // Through the CLI: the short result with --max-bytes 1..7 and 65536, the spooled one by 65536.
    for (const k of [1, 2, 3, 4, 5, 6, 7, RESULT_CHUNK_MAX]) readAllByCli(sb, r.dir, smallId, k, small);
    readAllByCli(sb, r.dir, bigId, RESULT_CHUNK_MAX, big);
    // --max-bytes 1 at a 4-byte character returns that character whole (never 0 bytes)
    const one = chunk(sb, r.dir, smallId, 0, 1);
    assert.deepEqual({ text: one.text, next: one.nextOffsetBytes, eof: one.eof }, { text: '😀', next: 4, eof: false });
  });
});

test('offsets: inside a character, past the end, malformed; --max-bytes out of range; the end itself', async () => {
  await withSandbox((sb) => {
    const r = repo(sb);
    const common = r.commonDir();
    const db = openSidecar(common);
    const bytes = Buffer.from('a€b', 'utf8'); // 5 bytes: a at 0, € at 1..3, b at 4
    let id: string;
    let running: string;
    try {
      const t = newTask(db, r);
      fs.writeFileSync(taskFile(common, t.id, 'stdout'), bytes);
      storeResult(db, common, t);
      id = t.id;
      running = newTask(db, r, 'running').id;
    } finally {
      db.close();
    }
    for (const off of [2, 3]) {
      const err = expectError(xet(sb, r.dir, ['task', 'result', id, '--offset', String(off), '--json']), 'USAGE', 2);
      assert.match(err.message, /inside a UTF-8 character/);
    }
    assert.match(
      expectError(xet(sb, r.dir, ['task', 'result', id, '--offset', '6', '--json']), 'USAGE', 2).message,
      /past the end of the result \(5 bytes\)/,
    );
    for (const off of ['-1', '1.5', '0x1', '1e2', '', ' 1']) {
      expectError(xet(sb, r.dir, ['task', 'result', id, `--offset=${off}`, '--json']), 'USAGE', 2);
    }
    for (const m of ['0', '65537', '-3', 'abc', '2.5']) {
      expectError(xet(sb, r.dir, ['task', 'result', id, `--max-bytes=${m}`, '--json']), 'USAGE', 2);
    }
    const end = chunk(sb, r.dir, id, 5, 10);
    assert.deepEqual(
      { text: end.text, offsetBytes: end.offsetBytes, nextOffsetBytes: end.nextOffsetBytes, eof: end.eof },
      { text: '', offsetBytes: 5, nextOffsetBytes: 5, eof: true },
    );
    const mid = chunk(sb, r.dir, id, 1, 3);
    assert.deepEqual([mid.text, mid.nextOffsetBytes, mid.eof], ['€', 4, false]);
    const cut = chunk(sb, r.dir, id, 0, 3); // 'a' and 2 of €'s 3 bytes: cut back to 'a'
    assert.deepEqual([cut.text, cut.nextOffsetBytes], ['a', 1]);
    // An abbreviated id works; an unknown one is TASK_NOT_FOUND; a running task has no result yet.
    assert.equal(chunk(sb, r.dir, id.slice(0, 6), 0, 10).text, 'a€b');
    expectError(xet(sb, r.dir, ['task', 'result', 'ffffffffffffffff', '--json']), 'TASK_NOT_FOUND');
    assert.match(
      expectError(xet(sb, r.dir, ['task', 'result', running, '--json']), 'RESULT_NOT_AVAILABLE').message,
      /has not ended/,
    );
  });
});

test('$XET_TASK_RESULT is preferred over stdout; a result file that is not a regular file is never read', async () => {
  await withSandbox((sb) => {
    const r = repo(sb);
    const common = r.commonDir();
    const db = openSidecar(common);
    let fileId: string;
    let bomId: string;
    try {
      const t = newTask(db, r);
      fs.writeFileSync(taskFile(common, t.id, 'stdout'), 'progress lines on stdout\n');
      fs.writeFileSync(taskFile(common, t.id, 'result'), '{"answer":42}');
      const info = storeResult(db, common, t);
      assert.equal(info.source, 'file');
      assert.equal(info.sizeBytes, 13);
      assert.equal((getTask(db, t.id) as TaskRow).resultSource, 'file');
      const sum = resultSummary(db, common, getTask(db, t.id) as TaskRow);
      assert.deepEqual(
        { preview: sum?.preview, truncated: sum?.truncated, retrievable: sum?.retrievable, storage: sum?.storage },
        { preview: '{"answer":42}', truncated: false, retrievable: true, storage: 'inline' },
      );
      fileId = t.id;
      // An empty result file is still the result (the command chose it), not a fallback to stdout.
      const e = newTask(db, r);
      fs.writeFileSync(taskFile(common, e.id, 'stdout'), 'noise');
      fs.writeFileSync(taskFile(common, e.id, 'result'), '');
      assert.deepEqual(storeResult(db, common, e), {
        storage: 'inline',
        source: 'file',
        sizeBytes: 0,
        sha256: sha256(Buffer.alloc(0)),
      });
      // A leading byte order mark is part of the bytes (no decoder may drop it).
      const b = newTask(db, r);
      fs.writeFileSync(taskFile(common, b.id, 'stdout'), Buffer.from('\ufeffhello', 'utf8'));
      storeResult(db, common, b);
      bomId = b.id;
      // A FIFO or a symlink in the result's place: refused at once (a read would block or follow it).
      const f = newTask(db, r);
      fs.writeFileSync(taskFile(common, f.id, 'stdout'), 'x');
      execFileSync('mkfifo', [taskFile(common, f.id, 'result')]);
      assert.equal(
        codeOf(() => storeResult(db, common, f)),
        'RESULT_NOT_AVAILABLE',
      );
      const s = newTask(db, r);
      fs.writeFileSync(taskFile(common, s.id, 'stdout'), 'x');
      fs.symlinkSync('/dev/zero', taskFile(common, s.id, 'result'));
      assert.equal(
        codeOf(() => storeResult(db, common, s)),
        'RESULT_NOT_AVAILABLE',
      );
    } finally {
      db.close();
    }
    const whole = rawResult(sb, r.dir, [fileId]);
    assert.equal(whole.stdout.toString('utf8'), '{"answer":42}');
    const bom = rawResult(sb, r.dir, [bomId]);
    assert.deepEqual(bom.stdout, Buffer.from('\ufeffhello', 'utf8'));
    assert.equal(chunk(sb, r.dir, bomId, 0, 100).text, '\ufeffhello');
  });
});

test('a spool that is gone, shrunk, grown or replaced by a FIFO is never read as the result', async () => {
  await withSandbox((sb) => {
    const r = repo(sb);
    const common = r.commonDir();
    const db = openSidecar(common);
    const bytes = utf8Of(RESULT_INLINE_MAX + 100, 5);
    const ids: string[] = [];
    try {
      for (let i = 0; i < 4; i++) {
        const t = newTask(db, r);
        fs.writeFileSync(taskFile(common, t.id, 'stdout'), bytes);
        assert.equal(storeResult(db, common, t).storage, 'spool');
        ids.push(t.id);
      }
    } finally {
      db.close();
    }
    const [gone, shrunk, grown, fifo] = ids;
    fs.rmSync(taskFile(common, gone, 'result.spool'));
    fs.truncateSync(taskFile(common, shrunk, 'result.spool'), 1000);
    fs.appendFileSync(taskFile(common, grown, 'result.spool'), 'more');
    fs.rmSync(taskFile(common, fifo, 'result.spool'));
    execFileSync('mkfifo', ['-m', '600', taskFile(common, fifo, 'result.spool')]);
    assert.match(
      expectError(xet(sb, r.dir, ['task', 'result', gone, '--json']), 'RESULT_NOT_AVAILABLE').message,
      /gone/,
    );
    for (const id of [shrunk, grown, fifo]) {
      const res = xet(sb, r.dir, ['task', 'result', id, '--json'], { timeoutMs: 30_000 });
      assert.equal(res.signal, null, `the read hung:\n${describeRun(res)}`);
      expectError(res, 'INTEGRITY_MISMATCH');
      const raw = rawResult(sb, r.dir, [id]);
      assert.equal(raw.status, 3);
      assert.equal(raw.stdout.length, 0, 'nothing printed of a result that does not check out');
    }
    const db2 = openSidecar(common);
    try {
      for (const id of ids) {
        const sum = resultSummary(db2, common, getTask(db2, id) as TaskRow);
        assert.equal(sum?.retrievable, false, id);
        assert.equal(sum?.sizeBytes, bytes.length);
      }
    } finally {
      db2.close();
    }
  });
});

test("a spool is published by rename: a dead writer's temporary is removed, a symlink at result.spool is replaced, never written through", async () => {
  await withSandbox((sb) => {
    const r = repo(sb);
    const common = r.commonDir();
    const db = openSidecar(common);
    try {
      const t = newTask(db, r);
      const bytes = utf8Of(RESULT_INLINE_MAX + 10, 11);
      fs.writeFileSync(taskFile(common, t.id, 'stdout'), bytes);
      const leftover = path.join(taskDir(common, t.id), '.result.spool.tmp-deadbeef0000');
      fs.writeFileSync(leftover, 'half a spool');
      const victim = sb.path('victim.txt');
      fs.writeFileSync(victim, 'not yours');
      fs.symlinkSync(victim, taskFile(common, t.id, 'result.spool'));
      assert.equal(storeResult(db, common, t).storage, 'spool');
      assert.equal(fs.readFileSync(victim, 'utf8'), 'not yours', 'the symlink was written through');
      const spool = taskFile(common, t.id, 'result.spool');
      assert.ok(fs.lstatSync(spool).isFile());
      assert.deepEqual(fs.readFileSync(spool), bytes);
      assert.deepEqual(spoolLeftovers(common, t.id), ['result.spool'], 'the temporary of a dead writer is gone');
    } finally {
      db.close();
    }
  });
});

test("storing a task's result again (an adopted supervisor ending it) leaves only what the row names", async () => {
  await withSandbox((sb) => {
    const r = repo(sb);
    const common = r.commonDir();
    const db = openSidecar(common);
    try {
      const t = newTask(db, r);
      const out = taskFile(common, t.id, 'stdout');
      const spool = taskFile(common, t.id, 'result.spool');
      fs.writeFileSync(out, utf8Of(RESULT_INLINE_MAX + 1, 2));
      assert.equal(storeResult(db, common, t).storage, 'spool');
      fs.writeFileSync(out, 'small now');
      assert.equal(storeResult(db, common, getTask(db, t.id) as TaskRow).storage, 'inline');
      assert.equal(fs.existsSync(spool), false, 'the earlier spool outlived the row that named it');
      fs.writeFileSync(out, utf8Of(RESULT_INLINE_MAX + 1, 2));
      storeResult(db, common, getTask(db, t.id) as TaskRow);
      fs.writeFileSync(out, Buffer.from([0xff]));
      assert.equal(
        codeOf(() => storeResult(db, common, getTask(db, t.id) as TaskRow)),
        'RESULT_NOT_UTF8',
      );
      assert.equal(fs.existsSync(spool), false, 'a refused result left the earlier spool');
      fs.writeFileSync(out, 'fine again');
      const info = storeResult(db, common, getTask(db, t.id) as TaskRow);
      assert.equal(info.sizeBytes, 10);
      assert.equal((getTask(db, t.id) as TaskRow).errorCode, null, 'the earlier refusal still stands on the row');
    } finally {
      db.close();
    }
  });
});

test('through task run (needs the runner): stdout spooled and read back exactly, $XET_TASK_RESULT preferred, over 8 MiB refused with exit 3', async () => {
  await withSandbox((sb) => {
    const r = repo(sb);
    const lines = 40_000; // 'é€😀\n' is 10 bytes: 400,000 bytes, spooled
    const big = xet(sb, r.dir, [
      'task',
      'run',
      '--no-capture',
      '--json',
      '--',
      'sh',
      '-c',
      `yes 'é€😀' | head -n ${lines}`,
    ]);
    expectExit(big, 0);
    const ran = parseJson(big);
    const expected = Buffer.from('é€😀\n'.repeat(lines), 'utf8');
    assert.equal(ran.result?.storage, 'spool', describeRun(big));
    assert.equal(ran.result?.sizeBytes, expected.length);
    assert.equal(ran.result?.sha256, sha256(expected));
    assert.equal(ran.result?.truncated, true);
    assert.equal(ran.result?.retrievable, true);
    const whole = rawResult(sb, r.dir, [ran.task]);
    assert.equal(whole.status, 0, whole.stderr);
    assert.equal(sha256(whole.stdout), sha256(expected));

    const file = xet(sb, r.dir, [
      'task',
      'run',
      '--no-capture',
      '--json',
      '--',
      'sh',
      '-c',
      'echo noise; printf "%s" "{\\"ok\\":true}" >"$XET_TASK_RESULT"',
    ]);
    expectExit(file, 0);
    const f = parseJson(file);
    assert.equal(f.result?.source, 'file', describeRun(file));
    assert.equal(rawResult(sb, r.dir, [f.task]).stdout.toString('utf8'), '{"ok":true}');

    const huge = xet(sb, r.dir, [
      'task',
      'run',
      '--no-capture',
      '--json',
      '--',
      'sh',
      '-c',
      `head -c ${RESULT_MAX + 1} /dev/zero | tr '\\0' a`,
    ]);
    const err = expectError(huge, 'RESULT_TOO_LARGE');
    assert.equal(err.details.status, 'failed');
    expectError(xet(sb, r.dir, ['task', 'result', String(err.details.task), '--json']), 'RESULT_NOT_AVAILABLE');
  });
});

test('a stored result changed in place (same size, still UTF-8) is INTEGRITY_MISMATCH at the latest on the chunk that reaches the end, and on a whole read (naming the full id)', async () => {
  await withSandbox((sb) => {
    const r = repo(sb);
    const common = r.commonDir();
    const db = openSidecar(common);
    const big = Buffer.alloc(RESULT_INLINE_MAX + 3 * RESULT_CHUNK_MAX, 'a');
    let spooled: TaskRow;
    let inline: TaskRow;
    try {
      spooled = newTask(db, r);
      fs.writeFileSync(taskFile(common, spooled.id, 'stdout'), big);
      assert.equal(storeResult(db, common, spooled).storage, 'spool');
      inline = newTask(db, r);
      fs.writeFileSync(taskFile(common, inline.id, 'stdout'), 'hello world\n');
      assert.equal(storeResult(db, common, inline).storage, 'inline');
      // The inline bytes changed in the row (same length), as a hostile writer of the sidecar could.
      updateTask(db, inline.id, { resultInline: Buffer.from('HELLO world\n') });
    } finally {
      db.close();
    }
    const fd = fs.openSync(taskFile(common, spooled.id, 'result.spool'), 'r+');
    fs.writeSync(fd, Buffer.from('Z'), 0, 1, 0);
    fs.closeSync(fd);
    // A chunk short of the end is served (hashing the whole spool per chunk would cost every read)...
    const first = chunk(sb, r.dir, spooled.id, 0, RESULT_CHUNK_MAX);
    assert.equal(first.text[0], 'Z');
    assert.equal(first.eof, false);
    // ...the one that reaches the end checks the whole spool, and so does the empty read at the end.
    const last = big.length - 100;
    const e = expectError(
      xet(sb, r.dir, ['task', 'result', spooled.id, '--offset', String(last), '--max-bytes', '100', '--json']),
      'INTEGRITY_MISMATCH',
    );
    assert.equal(e.details.task, spooled.id);
    assert.equal(e.details.expected, sha256(big));
    expectError(
      xet(sb, r.dir, ['task', 'result', spooled.id, '--offset', String(big.length), '--json']),
      'INTEGRITY_MISMATCH',
    );
    // A whole read prints nothing and names the task by its full id, whatever prefix was given.
    const raw = rawResult(sb, r.dir, [spooled.id.slice(0, 6)]);
    assert.equal(raw.status, 3);
    assert.equal(raw.stdout.length, 0);
    assert.match(raw.stderr, new RegExp(`task ${spooled.id} `));
    // An inline result of one chunk is checked on that chunk.
    expectError(xet(sb, r.dir, ['task', 'result', inline.id, '--json']), 'INTEGRITY_MISMATCH');
  });
});
