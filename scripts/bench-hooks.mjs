#!/usr/bin/env node
// Cost of git xet's guard hooks on `git commit` (issue 10: at most 5 ms a commit). Four repositories:
// no hooks; four trivial `exit 0` hooks (what Git itself spends to run hooks at all); git xet's hooks
// without a guard (every commit of every user); git xet's hooks under a live runner's guard (commits
// made inside a task). `git commit --allow-empty` N times each (default 200), interleaved in rounds
// of 20 so that load on the machine hits all four alike. Reports the median wall time and the mean
// CPU time (user+sys of git and every hook process, from /proc/self/stat's cutime and cstime).
//
//   npm run build && node scripts/bench-hooks.mjs [N]

import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

const XET = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..', 'bin', 'git-xet');
const N = Number(process.argv[2] ?? 200);
const base = mkdtempSync(path.join(tmpdir(), 'xet-bench-hooks-'));
const env = {
  ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('GIT_'))),
  HOME: base,
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_AUTHOR_NAME: 'b',
  GIT_AUTHOR_EMAIL: 'b@example.invalid',
  GIT_COMMITTER_NAME: 'b',
  GIT_COMMITTER_EMAIL: 'b@example.invalid',
};
const sh = (cmd, args, cwd) => {
  const r = spawnSync(cmd, args, { cwd, env, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.stderr}`);
  return r.stdout;
};
const ticks = Number(sh('getconf', ['CLK_TCK'], base).trim()) || 100;
const childCpuMs = () => {
  const f = readFileSync('/proc/self/stat', 'utf8')
    .slice(readFileSync('/proc/self/stat', 'utf8').lastIndexOf(') ') + 2)
    .split(' ');
  return ((Number(f[13]) + Number(f[14])) * 1000) / ticks; // fields 16 and 17
};

const names = ['none', 'trivial', 'git-xet', 'git-xet, live guard'];
const dirs = Object.fromEntries(names.map((n, i) => [n, path.join(base, `r${i}`)]));
for (const n of names) {
  sh('git', ['init', '-q', dirs[n]], base);
  sh('git', ['commit', '-q', '--allow-empty', '-m', 'init'], dirs[n]);
}
for (const h of ['pre-commit', 'pre-merge-commit', 'pre-rebase', 'reference-transaction']) {
  const f = path.join(dirs.trivial, '.git', 'hooks', h);
  writeFileSync(f, '#!/bin/sh\nexit 0\n');
  chmodSync(f, 0o755);
}
for (const n of ['git-xet', 'git-xet, live guard']) sh(process.execPath, [XET, 'hooks', 'install'], dirs[n]);
const runner = spawn('sleep', ['3600'], { stdio: 'ignore' });
await new Promise((r) => runner.once('spawn', r));
const stat = readFileSync(`/proc/${runner.pid}/stat`, 'utf8');
const start = stat.slice(stat.lastIndexOf(') ') + 2).split(' ')[19];
const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
writeFileSync(
  path.join(dirs['git-xet, live guard'], '.git', 'xet-guard'),
  `xet-guard 1 0123456789abcdef ${runner.pid} ${start} ${boot}\n{}\n`,
);

const wall = Object.fromEntries(names.map((n) => [n, []]));
const cpu = Object.fromEntries(names.map((n) => [n, 0]));
for (let round = 0; round < N / 20; round++) {
  for (const n of names) {
    for (let i = 0; i < 20; i++) {
      const c0 = childCpuMs();
      const t0 = process.hrtime.bigint();
      sh('git', ['commit', '-q', '--allow-empty', '-m', 'c'], dirs[n]);
      wall[n].push(Number(process.hrtime.bigint() - t0) / 1e6);
      cpu[n] += childCpuMs() - c0;
    }
  }
}
runner.kill('SIGKILL');
rmSync(base, { recursive: true, force: true });

const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
const m0 = median(wall.none);
const c0 = cpu.none / N;
console.log(
  `git commit --allow-empty, ${N} each; load average ${readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')}`,
);
console.log('hooks                 wall median      cpu mean');
for (const n of names) {
  const m = median(wall[n]);
  const c = cpu[n] / N;
  console.log(
    `${n.padEnd(20)}  ${m.toFixed(2).padStart(6)} ms (+${(m - m0).toFixed(2)})  ${c.toFixed(2).padStart(6)} ms (+${(c - c0).toFixed(2)})`,
  );
}
