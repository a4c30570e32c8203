#!/usr/bin/env node
// Builds git xet's native module (native/xet-native.c) into dist/native/xet-native.node with
// the system C compiler and Debian's libdeflate-dev; run by `npm run build` after tsc. Where either
// is missing the build says why and goes on: src/native.ts finds no module and its callers use
// node's zlib and mount(8), the same work more slowly. GIT_XET_REQUIRE_NATIVE=1 makes a failed
// build an error.

import { spawnSync } from 'node:child_process';
import { mkdirSync, renameSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const source = join(root, 'native', 'xet-native.c');
const target = join(root, 'dist', 'native', 'xet-native.node');
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
// A module built from an older source must not outlive a failed build of the new one.
rmSync(target, { force: true });
const why = r.error ? r.error.message : (r.stderr || '').trim().split('\n').slice(0, 3).join(' / ');
process.stderr.write(
  `git xet: the native module was not built (${cc} ${args.join(' ')}: ${why}); ` +
    "node's zlib and mount(8) are used instead (install a C compiler and libdeflate-dev, then npm run build)\n",
);
process.exit(process.env.GIT_XET_REQUIRE_NATIVE === '1' ? 1 : 0);
