#!/usr/bin/env node
// Builds git xet's native module (native/libdeflate-addon.c) into dist/native/libdeflate.node with
// the system C compiler and Debian's libdeflate-dev; run by `npm run build` after tsc. Where either
// is missing the build says why and goes on: src/git/zlib-fast.ts then uses node's zlib, which
// writes the same objects more slowly. GIT_XET_REQUIRE_NATIVE=1 makes a failed build an error.

import { spawnSync } from 'node:child_process';
import { mkdirSync, renameSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const source = join(root, 'native', 'libdeflate-addon.c');
const target = join(root, 'dist', 'native', 'libdeflate.node');
const scratch = `${target}.${process.pid}.tmp`;
const cc = process.env.CC || 'cc';

mkdirSync(dirname(target), { recursive: true });
const args = ['-O2', '-Wall', '-shared', '-fPIC', '-fvisibility=hidden', '-o', scratch, source, '-ldeflate'];
const r = spawnSync(cc, args, { encoding: 'utf8' });
if (r.status === 0) {
  renameSync(scratch, target);
  process.exit(0);
}
rmSync(scratch, { force: true });
const why = r.error ? r.error.message : (r.stderr || '').trim().split('\n').slice(0, 3).join(' / ');
process.stderr.write(
  `git xet: the native zlib module was not built (${cc} ${args.join(' ')}: ${why}); ` +
    "node's zlib is used instead (install a C compiler and libdeflate-dev, then npm run build)\n",
);
process.exit(process.env.GIT_XET_REQUIRE_NATIVE === '1' ? 1 : 0);
