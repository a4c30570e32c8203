// The stat cache capture writes itself (src/snapshot/capture-files.ts, src/git/index-writer.ts),
// held to the index git writes for the same files, over generated trees: random names, sizes,
// modes, symlinks, hard links, duplicate contents, times in the past, in this second and in the
// future. For each tree:
//   - `ls-files -s --debug` (every stat field, mode, id and flag) is the same for both indexes, and
//     `git write-tree` of ours (through its cache-tree) is the tree capture built;
//   - after random changes (edits that keep the size, edits whose mtime is set back to the old one,
//     mode flips, deletions, a file turned into a symlink, new files, touches), `git diff-files`,
//     `git status --porcelain` and `git update-index --refresh` say the same with either index;
//   - a second capture, with ours as its stat cache, builds the tree git builds from scratch: no
//     change is hidden by a stat entry we wrote.
// Used by test/stat-cache-equivalence.test.ts (a few hundred trees) and its slow twin (thousands).

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { captureFiles } from '../../src/snapshot/capture-files';
import { createShadow } from '../../src/git/shadow';
import { gitTry } from './git';
import { rng } from './rng';
import { createSandbox, type Sandbox } from './sandbox';

const NAMES = [
  'a',
  'b',
  'a-b',
  'a.b',
  'a0',
  'a_b',
  'Z',
  'é',
  'x y',
  'long-name-of-a-file',
  '.hidden',
  'README',
  'ü.txt',
];
const SIZES = [0, 1, 7, 100, 4095, 4096, 20000, 70000, 140000];

function listFiles(root: string): string[] {
  const out: string[] = [];
  const walk = (dir: string, rel: string) => {
    for (const d of fs.readdirSync(dir, { withFileTypes: true })) {
      if (rel === '' && d.name === '.git') continue;
      const r = rel ? `${rel}/${d.name}` : d.name;
      if (d.isDirectory()) walk(path.join(dir, d.name), r);
      else if (d.isFile() || d.isSymbolicLink()) out.push(r);
    }
  };
  walk(root, '');
  return out;
}

interface Ctx {
  sb: Sandbox;
  repo: string;
  objects: string;
  ours: string;
  theirs: string;
}

function gitEnv(ctx: Ctx, index: string): NodeJS.ProcessEnv {
  const shadow = path.join(ctx.sb.root, 'shadow');
  return {
    GIT_DIR: shadow,
    GIT_WORK_TREE: ctx.repo,
    GIT_INDEX_FILE: index,
    GIT_OBJECT_DIRECTORY: ctx.objects,
    GIT_CONFIG_GLOBAL: '/dev/null',
    GIT_CONFIG_NOSYSTEM: '1',
  };
}

function g(ctx: Ctx, index: string, args: string[], input?: string): { status: number | null; out: string } {
  const r = gitTry(ctx.sb, ctx.repo, args, { env: gitEnv(ctx, index), input });
  return { status: r.status, out: r.stdout.toString('utf8') + r.stderr.toString('utf8') };
}

async function ourCapture(ctx: Ctx, previousTree: string | null): Promise<string> {
  const scratch = fs.mkdtempSync(path.join(ctx.sb.root, 'scan-'));
  const shadow = createShadow({
    dir: scratch,
    objectFormat: 'sha1',
    objectsDir: ctx.objects,
    worktree: ctx.repo,
    indexFile: ctx.ours,
  });
  try {
    const r = await captureFiles({
      worktree: ctx.repo,
      objectFormat: 'sha1',
      objectsDir: ctx.objects,
      indexFile: ctx.ours,
      paths: listFiles(ctx.repo),
      previousTree,
      gitOptions: { cwd: ctx.repo, env: shadow.env },
    });
    return r.tree;
  } finally {
    shadow.dispose();
  }
}

function theirCapture(ctx: Ctx): string {
  fs.rmSync(ctx.theirs, { force: true });
  const paths = listFiles(ctx.repo);
  const r = g(
    ctx,
    ctx.theirs,
    ['update-index', '--add', '--info-only', '-z', '--stdin'],
    paths.map((p) => `${p}\0`).join(''),
  );
  assert.equal(r.status, 0, r.out);
  const t = g(ctx, ctx.theirs, ['write-tree', '--missing-ok']);
  assert.equal(t.status, 0, t.out);
  return t.out.trim();
}

function makeTree(ctx: Ctx, rand: () => number): void {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)];
  const count = 1 + Math.floor(rand() * 24);
  const made: string[] = [];
  const now = Math.floor(Date.now() / 1000);
  for (let k = 0; k < count; k++) {
    const depth = Math.floor(rand() * 3);
    const parts: string[] = [];
    for (let d = 0; d < depth; d++) parts.push(pick(NAMES));
    parts.push(pick(NAMES));
    const rel = parts.join('/');
    const abs = path.join(ctx.repo, rel);
    // A name already used as a file cannot become a directory, and the other way round.
    try {
      fs.mkdirSync(path.dirname(abs), { recursive: true });
    } catch {
      continue;
    }
    if (fs.existsSync(abs)) continue;
    const kind = rand();
    try {
      if (kind < 0.1 && made.length) {
        fs.symlinkSync(pick([...made, 'missing', '../x', 'a/b/c']), abs);
      } else if (kind < 0.15 && made.length) {
        const from = path.join(ctx.repo, pick(made));
        if (fs.lstatSync(from).isFile()) fs.linkSync(from, abs);
        else continue;
      } else {
        const size = pick(SIZES);
        const dup = rand() < 0.2 ? 'same content\n' : null;
        const data = dup ? Buffer.from(dup) : Buffer.alloc(size, Math.floor(rand() * 256));
        if (!dup && size > 0) data[Math.floor(rand() * size)] = 0x41 + k;
        fs.writeFileSync(abs, data, { mode: rand() < 0.3 ? 0o755 : 0o644 });
      }
    } catch {
      continue;
    }
    made.push(rel);
    const when = rand();
    if (!fs.lstatSync(abs).isSymbolicLink()) {
      // Long ago, a few seconds ago, this very second, or in the future (racy to git and to us).
      const t = when < 0.4 ? now - 100000 : when < 0.6 ? now - 2 : when < 0.85 ? now : now + 5;
      fs.utimesSync(abs, t + rand(), t + rand());
    }
  }
}

function mutate(ctx: Ctx, rand: () => number): void {
  const files = listFiles(ctx.repo);
  for (const rel of files) {
    const abs = path.join(ctx.repo, rel);
    const st = fs.lstatSync(abs);
    const r = rand();
    if (st.isSymbolicLink()) {
      if (r < 0.2) fs.rmSync(abs);
      continue;
    }
    if (r < 0.1) {
      // Same size, new bytes, mtime put back: only ctime (and our nanoseconds) can tell.
      const data = fs.readFileSync(abs);
      if (data.length) {
        data[0] ^= 0xff;
        fs.writeFileSync(abs, data);
        fs.utimesSync(abs, st.atime, st.mtime);
      }
    } else if (r < 0.2) {
      fs.appendFileSync(abs, 'more');
    } else if (r < 0.27) {
      fs.chmodSync(abs, st.mode & 0o100 ? 0o644 : 0o755);
    } else if (r < 0.33) {
      fs.rmSync(abs);
    } else if (r < 0.37) {
      fs.rmSync(abs);
      fs.symlinkSync('now-a-link', abs);
    } else if (r < 0.45) {
      const t = new Date();
      fs.utimesSync(abs, t, t);
    }
  }
  if (rand() < 0.5) fs.writeFileSync(path.join(ctx.repo, `new-${Math.floor(rand() * 1e6)}`), 'new file\n');
}

/** The same answers from git with our index and with its own, for one question. */
function sameAnswers(ctx: Ctx, args: string[], what: string): void {
  const a = `${ctx.ours}.q`;
  const b = `${ctx.theirs}.q`;
  fs.copyFileSync(ctx.ours, a);
  fs.copyFileSync(ctx.theirs, b);
  // Copies keep the index files' mtimes: git's racy check compares entries with them.
  fs.utimesSync(a, fs.statSync(ctx.ours).atime, fs.statSync(ctx.ours).mtime);
  fs.utimesSync(b, fs.statSync(ctx.theirs).atime, fs.statSync(ctx.theirs).mtime);
  const ra = g(ctx, a, args);
  const rb = g(ctx, b, args);
  assert.equal(ra.status, rb.status, `${what}: git ${args.join(' ')} exit status`);
  assert.equal(ra.out, rb.out, `${what}: git ${args.join(' ')} output`);
}

export async function checkTrees(count: number, seed: number): Promise<void> {
  const sb = createSandbox('xet-statcache-');
  try {
    const objects = sb.path('objects');
    fs.mkdirSync(path.join(objects, 'pack'), { recursive: true });
    const shadowDir = sb.path('shadow');
    fs.mkdirSync(path.join(shadowDir, 'refs'), { recursive: true });
    createShadow({
      dir: shadowDir,
      objectFormat: 'sha1',
      objectsDir: objects,
      worktree: sb.root,
      indexFile: sb.path('none'),
    });
    for (let n = 0; n < count; n++) {
      const rand = rng(seed + n);
      const repo = sb.path(`t${n}`);
      fs.mkdirSync(repo);
      const ctx: Ctx = { sb, repo, objects, ours: sb.path(`t${n}.ours`), theirs: sb.path(`t${n}.theirs`) };
      makeTree(ctx, rand);
      const what = `tree ${n} (seed ${seed + n})`;
      const ourTree = await ourCapture(ctx, null);
      const theirTree = theirCapture(ctx);
      assert.equal(ourTree, theirTree, `${what}: files tree`);
      const lsA = g(ctx, ctx.ours, ['ls-files', '-s', '--debug']);
      const lsB = g(ctx, ctx.theirs, ['ls-files', '-s', '--debug']);
      assert.equal(lsA.out, lsB.out, `${what}: index entries`);
      const wt = g(ctx, ctx.ours, ['write-tree', '--missing-ok']);
      assert.equal(wt.out.trim(), ourTree, `${what}: git write-tree of our index (cache-tree)`);
      for (const args of [['diff-files'], ['status', '--porcelain', '-uall'], ['update-index', '-q', '--refresh']]) {
        sameAnswers(ctx, args, `${what}, unchanged`);
      }
      mutate(ctx, rand);
      for (const args of [['diff-files'], ['status', '--porcelain', '-uall'], ['update-index', '--refresh']]) {
        sameAnswers(ctx, args, `${what}, changed`);
      }
      // No change hidden: the second capture, stat cache in hand, sees what git sees from scratch.
      const again = await ourCapture(ctx, ourTree);
      assert.equal(again, theirCapture(ctx), `${what}: second capture`);
      fs.rmSync(repo, { recursive: true, force: true });
    }
  } finally {
    sb.cleanup();
  }
}
