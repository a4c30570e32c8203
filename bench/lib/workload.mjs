// The Node workload of bench/run.mjs, forks.mjs and handoff.mjs: a repository with the release
// history of one npm package vendored under vendor/, an npm-installed node_modules (ignored), build
// output, and work in progress of every kind. Built once under bench/work/workload-<key>/repo, keyed
// by a hash of bench/workload/package-lock.json and the recipe below, and reused by every run.

import { createHash, randomBytes } from 'node:crypto';
import {
  appendFileSync,
  copyFileSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { join, relative } from 'node:path';
import { performance } from 'node:perf_hooks';
import { BENCH_DIR, BenchError, GIT_ENV, ROOT, WORK, git, log, rmrf, run, sh, walk } from './harness.mjs';

const WORKLOAD_SRC = join(BENCH_DIR, 'workload');

// Bump when the workload recipe below changes: it is part of the cache key.
const WORKLOAD_RECIPE = 'v1';
// History of the workload repo: successive releases of one npm package.
export const HISTORY_PACKAGE = 'lodash';
const HISTORY_VERSIONS = ['4.17.15', '4.17.16', '4.17.17', '4.17.18', '4.17.19', '4.17.20', '4.17.21'];

function sha256(...parts) {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return h.digest('hex');
}

export async function ensureWorkload(opts) {
  const pkgJson = readFileSync(join(WORKLOAD_SRC, 'package.json'));
  const lock = readFileSync(join(WORKLOAD_SRC, 'package-lock.json'));
  const key = sha256(
    WORKLOAD_RECIPE,
    '\0',
    HISTORY_PACKAGE,
    HISTORY_VERSIONS.join(','),
    '\0',
    pkgJson,
    '\0',
    lock,
  ).slice(0, 16);
  const dir = join(WORK, `workload-${key}`);
  const repo = join(dir, 'repo');
  const readyFile = join(dir, 'READY.json');
  mkdirSync(WORK, { recursive: true });

  // Drop workloads built from other lockfiles/recipes.
  for (const name of readdirSync(WORK)) {
    if (name.startsWith('workload-') && name !== `workload-${key}`) {
      log(`removing stale workload ${name}`);
      rmrf(join(WORK, name));
    }
  }
  if (existsSync(readyFile) && !opts.rebuildWorkload) {
    const info = JSON.parse(readFileSync(readyFile, 'utf8'));
    // A capture run in the workload itself (instead of a copy) leaves snapshot refs and a pack of
    // every file: every later "cold" capture would find its objects present. Such a workload is
    // rebuilt, not reused.
    const now = await gitFingerprint(repo);
    if (info.gitFingerprint === now) {
      log(`reusing workload ${relative(ROOT, repo)} (key ${key})`);
      return { ...info, repo, dir, reused: true };
    }
    log(`workload ${relative(ROOT, repo)} is not as built (its refs or packs changed): rebuilding it`);
  }
  rmrf(dir);
  mkdirSync(dir, { recursive: true });
  log(`building workload in ${relative(ROOT, repo)} (key ${key})`);
  const t0 = performance.now();

  // 1. Release tarballs (cached across workload rebuilds).
  const packs = join(WORK, 'cache', 'packs');
  mkdirSync(packs, { recursive: true });
  for (const v of HISTORY_VERSIONS) {
    const tgz = join(packs, `${HISTORY_PACKAGE}-${v}.tgz`);
    if (existsSync(tgz)) continue;
    log(`npm pack ${HISTORY_PACKAGE}@${v}`);
    const r = await run('npm', ['pack', `${HISTORY_PACKAGE}@${v}`, '--silent', '--no-audit', '--no-fund'], {
      cwd: packs,
    });
    if (!existsSync(tgz)) {
      throw new BenchError(`npm pack ${HISTORY_PACKAGE}@${v} did not produce ${tgz} (stdout: ${r.stdout.trim()})`);
    }
  }

  // 2. Repository with history: one commit per release, vendored under vendor/<pkg>/.
  mkdirSync(repo);
  await git(repo, ['init', '-q', '-b', 'main']);
  for (const [k, v] of [
    ['user.name', 'Bench Author'],
    ['user.email', 'bench@example.invalid'],
    ['core.autocrlf', 'false'],
    ['commit.gpgsign', 'false'],
    ['tag.gpgsign', 'false'],
    ['gc.auto', '0'],
  ]) {
    await git(repo, ['config', k, v]);
  }
  let day = 0;
  const commit = async (msg) => {
    day++;
    const date = `2024-01-${String(day).padStart(2, '0')}T12:00:00Z`;
    await run('git', ['commit', '-q', '--no-verify', '-m', msg], {
      cwd: repo,
      env: { ...GIT_ENV, GIT_AUTHOR_DATE: date, GIT_COMMITTER_DATE: date },
    });
  };
  copyFileSync(join(WORKLOAD_SRC, 'package.json'), join(repo, 'package.json'));
  copyFileSync(join(WORKLOAD_SRC, 'package-lock.json'), join(repo, 'package-lock.json'));
  writeFileSync(join(repo, '.gitignore'), 'node_modules/\ndist/\n*.log\n');
  writeFileSync(
    join(repo, 'README.md'),
    '# bench workload\n\nA vendored library with release history, npm dependencies and build output.\n',
  );
  mkdirSync(join(repo, 'scripts'));
  writeFileSync(join(repo, 'scripts', 'build.sh'), '#!/bin/sh\nnode scripts/build.mjs "$@"\n', {
    mode: 0o755,
  });
  writeFileSync(join(repo, 'scripts', 'build.mjs'), '// see bench/run.mjs buildDist()\n');
  await git(repo, ['add', '-A']);
  await commit('initial: app skeleton and dependencies');

  const vendor = join(repo, 'vendor', HISTORY_PACKAGE);
  for (const v of HISTORY_VERSIONS) {
    rmrf(vendor);
    mkdirSync(vendor, { recursive: true });
    await run('tar', ['-xzf', join(packs, `${HISTORY_PACKAGE}-${v}.tgz`), '-C', vendor, '--strip-components=1']);
    await git(repo, ['add', '-A']);
    await commit(`vendor: ${HISTORY_PACKAGE} ${v}`);
    await git(repo, ['tag', `${HISTORY_PACKAGE}-v${v}`]);
  }
  // a tracked symlink and a second branch, so refs and modes are exercised
  await sh(`ln -s vendor/${HISTORY_PACKAGE} latest`, { cwd: repo });
  await git(repo, ['add', 'latest']);
  await commit('add latest symlink');
  await git(repo, ['branch', 'release/4.17', `${HISTORY_PACKAGE}-v${HISTORY_VERSIONS.at(-2)}`]);

  // 3. node_modules (ignored) from the committed lockfile.
  log('npm ci (this downloads ~100 MB from the npm registry once; the workload is then cached)');
  await run('npm', ['ci', '--no-audit', '--no-fund', '--ignore-scripts', '--loglevel=error'], {
    cwd: repo,
    timeoutSec: 1800,
  });

  // 4. Build output (ignored): transpiled-looking per-module files plus a bundle.
  buildDist(repo, vendor);
  writeFileSync(join(repo, 'npm-debug.log'), 'verbose bench log line\n'.repeat(200));

  // 5. Work in progress: unstaged, staged, partially staged, deleted, untracked.
  const tracked = (await git(repo, ['ls-files', '-z', `vendor/${HISTORY_PACKAGE}`])).stdout
    .split('\0')
    .filter((p) => p.endsWith('.js'))
    .sort();
  const pick = (i) => tracked[Math.floor((i * tracked.length) / 17)];
  const wip = {
    unstaged: [`vendor/${HISTORY_PACKAGE}/README.md`, pick(1), pick(2)],
    staged: [pick(3)],
    partiallyStaged: [pick(4)],
    deleted: [pick(5)],
    stagedNew: ['src/feature.js'],
    untracked: ['notes/TODO.md', 'scratch.txt'],
  };
  for (const f of wip.unstaged) appendFileSync(join(repo, f), '\n// local edit (unstaged)\n');
  for (const f of wip.staged) appendFileSync(join(repo, f), '\n// staged edit\n');
  for (const f of wip.partiallyStaged) appendFileSync(join(repo, f), '\n// staged half\n');
  mkdirSync(join(repo, 'src'));
  writeFileSync(join(repo, 'src', 'feature.js'), "module.exports = require('../vendor/lodash').identity;\n");
  await git(repo, ['add', ...wip.staged, ...wip.partiallyStaged, ...wip.stagedNew]);
  for (const f of wip.partiallyStaged) appendFileSync(join(repo, f), '// unstaged half\n');
  for (const f of wip.deleted) unlinkSync(join(repo, f));
  mkdirSync(join(repo, 'notes'));
  writeFileSync(join(repo, 'notes', 'TODO.md'), '- [ ] benchmark git xet\n');
  writeFileSync(join(repo, 'scratch.txt'), 'scratch\n');
  await git(repo, ['status', '--porcelain']); // refresh the index stat cache once

  // 6. Describe it.
  const info = { key, builtAt: new Date().toISOString(), wip, ...(await describeWorkload(repo)) };
  info.buildSeconds = (performance.now() - t0) / 1000;
  info.gitFingerprint = await gitFingerprint(repo);
  writeFileSync(readyFile, JSON.stringify(info, null, 2) + '\n');
  log(`workload built in ${info.buildSeconds.toFixed(1)}s`);
  return { ...info, repo, dir, reused: false };
}

function buildDist(repo, vendor) {
  const dist = join(repo, 'dist');
  mkdirSync(join(dist, 'cjs'), { recursive: true });
  const banner = '/*! bench build | MIT */\n"use strict";\n';
  const bundle = [];
  let n = 0;
  for (const name of readdirSync(vendor).sort()) {
    if (!name.endsWith('.js')) continue;
    const src = readFileSync(join(vendor, name), 'utf8');
    writeFileSync(join(dist, 'cjs', name), banner + src);
    writeFileSync(
      join(dist, 'cjs', `${name}.map`),
      JSON.stringify({ version: 3, file: name, sources: [`../../vendor/lodash/${name}`], mappings: '' }),
    );
    bundle.push(`// ---- ${name}\n(function(){\n${src}\n})();\n`);
    n++;
  }
  writeFileSync(join(dist, 'bundle.js'), banner + bundle.join(''));
  writeFileSync(join(dist, 'manifest.json'), JSON.stringify({ modules: n }, null, 2));
}

async function describeWorkload(repo) {
  const all = walk(repo, { skipTop: ['.git'] });
  const nm = walk(join(repo, 'node_modules'));
  const dist = walk(join(repo, 'dist'));
  const gitDir = walk(join(repo, '.git'));
  const commits = Number((await git(repo, ['rev-list', '--all', '--count'])).stdout.trim());
  const trackedFiles = (await git(repo, ['ls-files', '-z'])).stdout.split('\0').filter(Boolean).length;
  const refs = (await git(repo, ['for-each-ref', '--format=%(refname)'])).stdout.trim().split('\n').length;
  const status = (await git(repo, ['status', '--porcelain=v1', '-uall'])).stdout.trimEnd();
  let largest = { path: null, size: 0 };
  for (const e of all.entries) if (e.type === 'f' && e.size > largest.size) largest = e;
  const du = (await run('du', ['-sb', repo])).stdout.split(/\s/)[0];
  const duNm = (await run('du', ['-sb', join(repo, 'node_modules')])).stdout.split(/\s/)[0];
  return {
    worktree: { files: all.files, symlinks: all.symlinks, dirs: all.dirs, bytes: all.bytes },
    nodeModules: { files: nm.files, symlinks: nm.symlinks, bytes: nm.bytes, duBytes: Number(duNm) },
    dist: { files: dist.files, bytes: dist.bytes },
    gitDir: { files: gitDir.files, bytes: gitDir.bytes },
    repoDuBytes: Number(du),
    largestFile: { path: largest.path, bytes: largest.size },
    commits,
    trackedFiles,
    refs,
    statusLines: status ? status.split('\n') : [],
  };
}

/** Generated app: one commit of `files` small files in 40 dirs plus ten 1 MiB ones, and 200 untracked. */
export async function makeApp(dir, files) {
  mkdirSync(dir, { recursive: true });
  await git(dir, ['init', '-q', '-b', 'main']);
  for (let i = 0; i < files; i++) {
    const d = join(dir, 'src', `m${i % 40}`);
    if (i < 40) mkdirSync(d, { recursive: true });
    writeFileSync(join(d, `f${i}.js`), `// file ${i}\nmodule.exports = ${JSON.stringify('x'.repeat(i % 700))};\n`);
  }
  mkdirSync(join(dir, 'assets'), { recursive: true });
  for (let i = 0; i < 10; i++) writeFileSync(join(dir, 'assets', `blob${i}.bin`), randomBytes(1024 * 1024));
  await git(dir, ['add', '-A']);
  await git(dir, ['commit', '-q', '-m', 'app']);
  mkdirSync(join(dir, 'wip'), { recursive: true });
  for (let i = 0; i < 200; i++) writeFileSync(join(dir, 'wip', `u${i}.txt`), `untracked ${i}\n`);
}

/** n of the app's tracked .js files, spread evenly over them: the files a benchmark's edits touch. */
export async function appEditFiles(dir, n) {
  const editable = (await git(dir, ['ls-files', '-z', '--', '*.js'])).stdout.split('\0').filter(Boolean);
  return Array.from({ length: n }, (_, i) => editable[Math.floor(((i + 0.5) * editable.length) / n)]);
}

/** The workload's refs and the names and sizes of its packs and git xet's sidecar directory: what a
 * capture run in the workload itself would change. */
async function gitFingerprint(repo) {
  const refs = await git(repo, ['for-each-ref', '--format=%(refname) %(objectname)']);
  const packDir = join(repo, '.git', 'objects', 'pack');
  const packs = existsSync(packDir)
    ? readdirSync(packDir)
        .sort()
        .map((n) => `${n} ${lstatSync(join(packDir, n)).size}`)
    : [];
  const xet = existsSync(join(repo, '.git', 'xet')) ? ['xet'] : [];
  return sha256(refs.stdout, '\0', packs.join('\n'), '\0', xet.join(''));
}
