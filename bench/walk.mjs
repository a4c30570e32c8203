#!/usr/bin/env node
// The walk of a worktree (issue 14, docs/DESIGN-NOTES.md "The walk's directories read in C"): every
// capture, a re-capture of ten edits too, reads every directory of the worktree and decides what
// each entry is. Measured the way the CLI meets it, in a fresh node process each time (nothing
// compiled yet): src/snapshot/walk.ts's walkWorktree over the workload with its directories read
// ahead by the native module, and reading each one with node's readdirSync, against `find` listing
// the same tree (the obvious way to list a tree; it reads directories and prints, no stat). And
// the daemon's walk (docs/DESIGN-NOTES.md "A daemon that re-reads only the directories that
// changed"): a warm process whose watch (src/daemon/tree-watch.ts) has seen one walk, timed on its
// next walk after ten files were appended to and one file was made (one directory changed).
//
//   npm run build && node bench/walk.mjs [--reps 5] [--tmp-base /dev/shm]

import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { GIT_ENV, ROOT, fmtX, loadNow, log, median, parseArgs, reportRun, rmrf, start, table } from './lib/harness.mjs';
import { ensureWorkload } from './lib/workload.mjs';

const opts = parseArgs(process.argv.slice(2), {
  script: 'bench/walk.mjs',
  results: 'walk-results.json',
  common: { reps: 5, tmpBase: '/dev/shm', writeResults: undefined, resultsFile: undefined },
  options: [],
});

// The child: the sets capture passes (from git, read before the clock starts), then one walk.
const CHILD = `
const { readFileSync } = require('node:fs');
const { performance } = require('node:perf_hooks');
const [dist, root, trackedFile, ignoredFile, listing] = process.argv.slice(1);
const { walkWorktree } = require(dist + '/snapshot/walk.js');
const { resolvePolicy } = require(dist + '/snapshot/policy.js');
const { GitConfig } = require(dist + '/git/config.js');
const split = (f) => readFileSync(f, 'utf8').split('\\0').filter(Boolean);
const tracked = new Set(split(trackedFile));
const ignored = new Set(split(ignoredFile));
const policy = resolvePolicy(new GitConfig([]), {});
const t0 = performance.now();
const w = walkWorktree({ root, tracked, ignored, policy, gitDirs: [root + '/.git'], listing });
const ms = performance.now() - t0;
process.stdout.write(JSON.stringify({ ms, paths: w.paths.length, emptyDirs: w.emptyDirs.length }));
`;

// The daemon's child: one watched walk to settle (and warm the code), ten edits, the walk timed.
const WATCHED = `
const { readFileSync, appendFileSync, writeFileSync, rmSync } = require('node:fs');
const { performance } = require('node:perf_hooks');
const [dist, root, trackedFile, ignoredFile, edited] = process.argv.slice(1);
const { walkWorktree } = require(dist + '/snapshot/walk.js');
const { resolvePolicy } = require(dist + '/snapshot/policy.js');
const { GitConfig } = require(dist + '/git/config.js');
const { TreeWatch } = require(dist + '/daemon/tree-watch.js');
const split = (f) => readFileSync(f, 'utf8').split('\\0').filter(Boolean);
const inputs = { root, tracked: new Set(split(trackedFile)), ignored: new Set(split(ignoredFile)),
  policy: resolvePolicy(new GitConfig([]), {}), gitDirs: [root + '/.git'] };
const w = new TreeWatch(root);
const walk = () => {
  const memo = w.begin(inputs);
  if (!memo) throw new Error('not watched: ' + w.state().reason);
  const r = walkWorktree({ ...inputs, memo });
  w.end(memo, memo.next);
  return r;
};
walk();
for (const f of split(edited)) appendFileSync(root + '/' + f, '// edit\\n');
writeFileSync(root + '/bench-walk-new.txt', 'new');
const t0 = performance.now();
const r = walk();
const ms = performance.now() - t0;
rmSync(root + '/bench-walk-new.txt');
process.stdout.write(JSON.stringify({ ms, paths: r.paths.length - 1, emptyDirs: r.emptyDirs.length }));
`;

async function main() {
  const tmp = mkdtempSync(join(opts.tmpBase, 'xet-bench-walk-'));
  await reportRun(
    opts,
    {},
    async (results) => {
      const wl = await ensureWorkload(opts);
      // A copy on the file system measured (tmpfs by default), as the main bench does.
      const root = join(tmp, 'repo');
      const cp = spawnSync('cp', ['-a', wl.repo, root]);
      if (cp.status !== 0) throw new Error(`cp -a failed: ${cp.stderr}`);
      const git = (args) => {
        const r = spawnSync('git', args, { cwd: root, env: GIT_ENV, maxBuffer: 1 << 30 });
        if (r.status !== 0) throw new Error(`git ${args.join(' ')} failed: ${r.stderr}`);
        return r.stdout;
      };
      const trackedFile = join(tmp, 'tracked');
      const ignoredFile = join(tmp, 'ignored');
      writeFileSync(trackedFile, git(['ls-files', '-z']));
      writeFileSync(ignoredFile, git(['ls-files', '-z', '-o', '-i', '--exclude-standard', '--directory']));
      const dist = join(ROOT, 'dist', 'src');
      const editedFile = join(tmp, 'edited');
      const tenFiles = git(['ls-files', '-z', 'vendor/lodash'])
        .toString('utf8')
        .split('\0')
        .filter((f) => f.endsWith('.js'))
        .slice(0, 10);
      if (tenFiles.length < 10) throw new Error('the workload has fewer than ten files in vendor/lodash');
      writeFileSync(editedFile, tenFiles.map((f) => `${f}\0`).join(''));
      const runs = { auto: [], js: [], find: [], watched: [] };
      let shape = null;
      for (let r = 0; r < opts.reps; r++) {
        for (const listing of ['auto', 'js']) {
          const c = spawnSync(process.execPath, ['-e', CHILD, dist, root, trackedFile, ignoredFile, listing], {
            encoding: 'utf8',
          });
          if (c.status !== 0) throw new Error(`child failed: ${c.stderr}`);
          const o = JSON.parse(c.stdout);
          const s = `${o.paths} paths, ${o.emptyDirs} empty directories`;
          if (shape && s !== shape) throw new Error(`the walks differ: ${s} against ${shape}`);
          shape = s;
          runs[listing].push(o.ms);
        }
        const wc = spawnSync(process.execPath, ['-e', WATCHED, dist, root, trackedFile, ignoredFile, editedFile], {
          encoding: 'utf8',
        });
        if (wc.status !== 0) throw new Error(`watched child failed: ${wc.stderr}`);
        const wo = JSON.parse(wc.stdout);
        if (shape && `${wo.paths} paths, ${wo.emptyDirs} empty directories` !== shape)
          throw new Error(`the watched walk differs: ${wo.paths} paths against ${shape}`);
        runs.watched.push(wo.ms);
        const t0 = performance.now();
        const f = spawnSync('find', [root, '-path', join(root, '.git'), '-prune', '-o', '-print0'], {
          maxBuffer: 1 << 30,
        });
        if (f.status !== 0) throw new Error(`find failed: ${f.stderr}`);
        runs.find.push(performance.now() - t0);
      }
      const m = {
        auto: median(runs.auto),
        js: median(runs.js),
        find: median(runs.find),
        watched: median(runs.watched),
      };
      results.median = m;
      results.shape = shape;
      log(`walk: ${shape}`);
      const report = [
        '',
        `the walk of the workload (${shape}), fresh process each, median of ${opts.reps}`,
        loadNow(),
        '',
        ...table(
          [
            'walk, read ahead (readDirs)',
            'walk, readdirSync',
            'find -print0',
            'read ahead / readdirSync',
            'read ahead / find',
            'daemon, watched, 10 edits',
            'watched / find',
          ],
          [
            [
              `${m.auto.toFixed(1)} ms`,
              `${m.js.toFixed(1)} ms`,
              `${m.find.toFixed(1)} ms`,
              fmtX(m.auto / m.js),
              fmtX(m.auto / m.find),
              `${m.watched.toFixed(1)} ms`,
              fmtX(m.watched / m.find),
            ],
          ],
        ),
      ];
      return report;
    },
    () => rmrf(tmp),
  );
}

start(main);
