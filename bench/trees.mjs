#!/usr/bin/env node
// Trees and the stat cache of a capture (issue 14, docs/DESIGN-NOTES.md "Trees and the stat cache
// from columns"): every capture, a re-capture of ten edits too, builds the tree of each directory of
// the worktree and writes an index of every path. Measured the way the CLI meets it, in a fresh node
// process each time (nothing compiled yet): src/git/tree-builder.ts's buildTrees and
// src/git/index-writer.ts's serializeIndex over the workload's paths, against git doing the same
// from the same entries (`update-index --index-info` into an empty index, then `write-tree`).
//
//   npm run build && node bench/trees.mjs [--reps 5]

import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import {
  GIT_ENV,
  ROOT,
  fmtX,
  loadNow,
  log,
  median,
  parseArgs,
  reportRun,
  rmrf,
  start,
  table,
  walk,
} from './lib/harness.mjs';
import { ensureWorkload } from './lib/workload.mjs';

const opts = parseArgs(process.argv.slice(2), {
  script: 'bench/trees.mjs',
  results: 'trees-results.json',
  common: { reps: 5, tmpBase: '/dev/shm', writeResults: undefined, resultsFile: undefined },
  options: [],
});

// The child: columns from the list (as capture holds them), then the two calls, timed inside.
const CHILD = `
const { readFileSync } = require('node:fs');
const { performance } = require('node:perf_hooks');
const dist = process.argv[1];
const { buildTrees } = require(dist + '/git/tree-builder.js');
const { serializeIndex, serializeCacheTree, STAT_BYTES, STAT } = require(dist + '/git/index-writer.js');
const lines = readFileSync(process.argv[2], 'utf8').split('\\n').filter(Boolean);
const n = lines.length;
const paths = new Array(n);
const oids = Buffer.alloc(n * 20);
const stat = Buffer.alloc(n * STAT_BYTES);
for (let k = 0; k < n; k++) {
  const [mode, oid, p] = lines[k].split(' ');
  paths[k] = p;
  oids.write(oid, k * 20, 'hex');
  stat.writeUInt32BE(parseInt(mode, 8), k * STAT_BYTES + STAT.mode);
}
const modes = new Uint32Array(n);
for (let k = 0; k < n; k++) modes[k] = stat.readUInt32BE(k * STAT_BYTES + STAT.mode);
const rows = Array.from({ length: n }, (_, k) => k);
const t0 = performance.now();
const built = buildTrees({ paths, modes, oids }, 'sha1');
const t1 = performance.now();
const names = Buffer.from(paths.join('\\0') + '\\0', 'utf8');
const index = serializeIndex({ names, rows, stat, oid: oids }, {
  version: 4, format: 'sha1', extensions: [{ signature: 'TREE', data: serializeCacheTree(built.cacheTree) }],
});
const t2 = performance.now();
process.stdout.write(JSON.stringify({ root: built.root, trees: built.trees.length, indexBytes: index.length, treesMs: t1 - t0, indexMs: t2 - t1 }));
`;

async function main() {
  const tmp = mkdtempSync(join(opts.tmpBase, 'xet-bench-trees-'));
  await reportRun(
    opts,
    {},
    async (results) => {
      const wl = await ensureWorkload(opts);
      const entries = walk(wl.repo, { skipTop: ['.git'] }).entries.filter((e) => e.type === 'f' || e.type === 'l');
      // Ids are made up (git's write-tree is run with --missing-ok): the cost is in the entries.
      const list = entries
        .map((e) => ({
          path: e.path,
          mode: e.type === 'l' ? '120000' : e.exec ? '100755' : '100644',
          oid: createHash('sha1').update(e.path).digest('hex'),
        }))
        .sort((x, y) => Buffer.compare(Buffer.from(x.path), Buffer.from(y.path)));
      const listFile = join(tmp, 'entries.txt');
      writeFileSync(listFile, list.map((e) => `${e.mode} ${e.oid} ${e.path}\n`).join(''));
      const indexInfo = list.map((e) => `${e.mode} ${e.oid}\t${e.path}\n`).join('');
      const repo = join(tmp, 'repo');
      spawnSync('git', ['init', '-q', repo], { env: GIT_ENV });
      results.paths = list.length;
      log(`${list.length} paths from the workload`);

      const ours = [];
      const gits = [];
      let root = null;
      for (let r = 0; r < opts.reps; r++) {
        const c = spawnSync(process.execPath, ['-e', CHILD, join(ROOT, 'dist', 'src'), listFile], { encoding: 'utf8' });
        if (c.status !== 0) throw new Error(`child failed: ${c.stderr}`);
        const o = JSON.parse(c.stdout);
        ours.push(o);
        rmrf(join(repo, '.git', 'index'));
        const t0 = performance.now();
        const u = spawnSync('git', ['update-index', '--index-info'], { cwd: repo, env: GIT_ENV, input: indexInfo });
        if (u.status !== 0) throw new Error(`git update-index failed: ${u.stderr}`);
        const w = spawnSync('git', ['write-tree', '--missing-ok'], { cwd: repo, env: GIT_ENV, encoding: 'utf8' });
        const ms = performance.now() - t0;
        if (w.status !== 0) throw new Error(`git write-tree failed: ${w.stderr}`);
        root = w.stdout.trim();
        if (o.root !== root) throw new Error(`buildTrees gave ${o.root}, git write-tree ${root}`);
        gits.push(ms);
      }
      const treesMs = median(ours.map((o) => o.treesMs));
      const indexMs = median(ours.map((o) => o.indexMs));
      const gitMs = median(gits);
      results.median = { treesMs, indexMs, gitMs, trees: ours[0].trees, indexBytes: ours[0].indexBytes };
      const report = [
        '',
        `trees and the stat cache of ${list.length} paths (${ours[0].trees} trees), fresh process each, median of ${opts.reps}`,
        loadNow(),
        '',
        ...table(
          ['buildTrees', 'serializeIndex', 'together', 'git update-index --index-info + write-tree', 'ratio'],
          [
            [
              `${treesMs.toFixed(1)} ms`,
              `${indexMs.toFixed(1)} ms`,
              `${(treesMs + indexMs).toFixed(1)} ms`,
              `${gitMs.toFixed(1)} ms`,
              fmtX((treesMs + indexMs) / gitMs),
            ],
          ],
        ),
        `same root as git's write-tree: ${root}`,
      ];
      return report;
    },
    () => rmrf(tmp),
  );
}

start(main);
