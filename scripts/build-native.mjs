#!/usr/bin/env node
// Builds git xet's native module (native/xet-native.c) into dist/native/xet-native.node with
// the system C compiler and Debian's libdeflate-dev; run by `npm run build` after tsc. Where either
// is missing the build says why and goes on: src/native.ts finds no module and its callers use
// node's zlib and mount(8), the same work more slowly. GIT_XET_REQUIRE_NATIVE=1 makes a failed
// build an error. With Debian's libisal-dev too it is built with ISA-L's igzip (deflateFastInto,
// for the bulk of large captures); without it, the same module without that one function, and a
// line saying so. It also builds the native thin client (native/git-xet-relay.c) into
// dist/native/git-xet-relay, which bin/git-xet runs to relay `capture`, `fork`, `push` and `handoff
// create` to a running daemon without starting node; without it, every command starts node as before.

import { spawnSync } from 'node:child_process';
import { mkdirSync, renameSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const source = join(root, 'native', 'xet-native.c');
const target = join(root, 'dist', 'native', 'xet-native.node');
// Ends in .node: require() loads any other extension as JavaScript.
const scratch = join(dirname(target), `.xet-native.${process.pid}.node`);
// CC may carry arguments ("ccache gcc", "gcc -m64"), as make takes it.
const [cc, ...ccArgs] = (process.env.CC || 'cc').trim().split(/\s+/);

mkdirSync(dirname(target), { recursive: true });

const base = [...ccArgs, '-O2', '-Wall', '-shared', '-fPIC', '-fvisibility=hidden', '-o', scratch, source];
const errors = (text) => {
  const lines = (text || '').trim().split('\n');
  const bad = lines.filter((l) => /error|undefined reference|cannot find/i.test(l));
  return (bad.length ? bad : lines).slice(0, 3).join(' / ');
};
function describe({ r, loads }) {
  return r.error
    ? r.error.message
    : r.status !== 0
      ? errors(r.stderr)
      : `it built but did not load: ${errors(loads.stderr) || `exit ${loads.status}`}`;
}
/** Builds with `extra` flags; the result of the compiler and of loading what it built. */
function attempt(extra, check) {
  const args = [...base, ...extra];
  const r = spawnSync(cc, args, { encoding: 'utf8' });
  // A module that built must also load and work in a fresh node (a library missing at run time, an
  // ABI mismatch) before it replaces anything.
  const loads =
    r.status === 0 &&
    spawnSync(
      process.execPath,
      [
        '-e',
        `const m = require(${JSON.stringify(scratch)}); const b = Buffer.alloc(m.deflateBound(3)); ` +
          `if (!(m.deflateInto(Buffer.from('abc'), 1, b, 0) > 0)) process.exit(1); ${check}`,
      ],
      { encoding: 'utf8' },
    );
  return { args, r, loads, ok: Boolean(loads && loads.status === 0) };
}
// The native thin client (native/git-xet-relay.c): bin/git-xet runs it when it is here, else node.
// A client that does not build or run is left out with a line saying so (every line then starts
// node, as before).
{
  const relay = join(root, 'dist', 'native', 'git-xet-relay');
  const relayScratch = `${relay}.${process.pid}`;
  let why = '';
  const args = [...ccArgs, '-O2', '-Wall', '-o', relayScratch];
  const r = spawnSync(cc, [...args, join(root, 'native', 'git-xet-relay.c')], { encoding: 'utf8' });
  // Without arguments it prints its usage and exits 70: it runs here.
  const runs = r.status === 0 && spawnSync(relayScratch, [], { encoding: 'utf8' }).status === 70;
  if (runs) renameSync(relayScratch, relay);
  else why = r.error ? r.error.message : r.status !== 0 ? errors(r.stderr) : 'it built but did not run';
  if (why) {
    rmSync(relayScratch, { force: true });
    rmSync(relay, { force: true });
    process.stderr.write(`git xet: the native thin client was not built (${why}); every command starts node\n`);
    if (process.env.GIT_XET_REQUIRE_NATIVE === '1') process.exit(1);
  }
}

const withIsal = attempt(
  ['-DXET_HAVE_ISAL', '-ldeflate', '-lisal'],
  `if (!(m.deflateFastInto(Buffer.from('abc'), b, 0) > 0)) process.exit(1)`,
);
if (withIsal.ok) {
  renameSync(scratch, target);
  process.exit(0);
}
const plain = attempt(['-ldeflate'], '');
if (plain.ok) {
  renameSync(scratch, target);
  process.stderr.write(
    `git xet: the native module was built without ISA-L (${describe(withIsal)}); ` +
      'large captures deflate with libdeflate, more slowly (install libisal-dev, then npm run build)\n',
  );
  process.exit(0);
}
const { args, r, loads } = plain;
rmSync(scratch, { force: true });
// A module built from an older source must not outlive a failed build of the new one.
rmSync(target, { force: true });
const why = describe({ r, loads });
process.stderr.write(
  `git xet: the native module was not built (${cc} ${args.join(' ')}: ${why}); ` +
    "node's zlib and mount(8) are used instead (install a C compiler and libdeflate-dev, then npm run build)\n",
);
process.exit(process.env.GIT_XET_REQUIRE_NATIVE === '1' ? 1 : 0);
