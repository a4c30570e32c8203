// Error codes: the ones no other test reaches are produced here by real processes (a bare repository,
// an old git on PATH, a file name that is not UTF-8, a discard that would lose a secret), and a
// meta-test checks that every code in src/errors.ts is documented and expected by name in a test.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { FAULT_POINTS } from './support/faults';
import { git, initRepo } from './support/git';
import { withSandbox } from './support/sandbox';
import { capture, expectError, expectExit, parseJson, xet } from './support/xet';

const ROOT = path.resolve(__dirname, '..', '..');

/** Codes in src/errors.ts, read at run time so codes added on other branches are covered too. */
function errorCodes(): string[] {
  const src = fs.readFileSync(path.join(ROOT, 'src', 'errors.ts'), 'utf8');
  const block = /export const ERROR_CODES = \{([\s\S]*?)\n\} as const;/.exec(src)?.[1];
  assert.ok(block, 'ERROR_CODES found in src/errors.ts');
  const codes = [...block.matchAll(/^\s+([A-Z][A-Z0-9_]*):/gm)].map((m) => m[1]);
  assert.ok(codes.length > 10, `codes parsed: ${codes.join(', ')}`);
  return codes;
}

/** Every suite, fast (test/) and slow (test/slow/): both run in CI. */
function testSources(): { file: string; text: string }[] {
  return ['test', path.join('test', 'slow')].flatMap((rel) => {
    const dir = path.join(ROOT, rel);
    return fs
      .readdirSync(dir)
      .filter((n) => n.endsWith('.test.ts'))
      .map((n) => ({ file: path.join(rel, n), text: fs.readFileSync(path.join(dir, n), 'utf8') }));
  });
}

test('every error code is in README.md and expected by name by some test', () => {
  const codes = errorCodes();
  const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const table = [...readme.matchAll(/^\| `([A-Z][A-Z0-9_]*)` +\|/gm)].map((m) => m[1]);
  assert.deepEqual([...table].sort(), [...codes].sort(), "README.md's table lists exactly src/errors.ts's codes");
  const cli = fs.readFileSync(path.join(ROOT, 'docs', 'CLI.md'), 'utf8');
  for (const m of cli.matchAll(/`([A-Z][A-Z0-9]*_[A-Z0-9_]+|USAGE|BUSY)`/g)) {
    // Environment variables, system limits, git's own state files (MERGE_RR, ORIG_HEAD…) and task
    // recovery's classifications are not codes.
    if (
      /^(GIT|XET|XDG|O|MERGE|BISECT|AUTO)_|_MAX$|_HEAD$|^(SESSION_RESUMABLE|NOT_RECOVERABLE)$/.test(m[1]) &&
      !codes.includes(m[1])
    )
      continue;
    assert.ok(codes.includes(m[1]), `docs/CLI.md names ${m[1]}, which src/errors.ts does not define`);
  }
  const sources = testSources();
  const unexpected: string[] = [];
  for (const code of codes) {
    // The code as a string literal of its own (expectError(…, 'CODE'), isXetError(e, 'CODE'), a table
    // of cases): a test name or message that mentions it does not count, nor does an alternation.
    const literal = new RegExp(`['"]${code}['"]`, 'g');
    const expected = sources.some(({ text }) =>
      [...text.matchAll(literal)].some((m) => {
        const at = m.index ?? 0;
        const before = text.slice(Math.max(0, at - 30), at);
        const after = text.slice(at + m[0].length, at + m[0].length + 40);
        return !(/\[\s*$|['"][A-Z_]+['"],\s*$/.test(before) || /^\s*,\s*['"][A-Z_]+['"]/.test(after));
      }),
    );
    if (!expected) unexpected.push(code);
  }
  assert.deepEqual(unexpected, [], `codes that no test under test/ expects by name: ${unexpected.join(', ')}`);
});

test('BARE_REPOSITORY: commands that need a working tree refuse a bare repository', () =>
  withSandbox((sb) => {
    const bare = sb.path('bare.git');
    git(sb, sb.root, ['init', '-q', '--bare', bare]);
    expectError(xet(sb, bare, ['capture', '--json']), 'BARE_REPOSITORY');
    assert.equal(git(sb, bare, ['for-each-ref']), '', 'nothing written');
  }));

test('GIT_TOO_OLD: a git older than the minimum is refused before anything is written', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    const realGit = spawnSync('sh', ['-c', 'command -v git'], { env: sb.env, encoding: 'utf8' }).stdout.trim();
    assert.ok(realGit, 'git is on PATH');
    // A real git that says it is 2.30: only the version answer is changed.
    const bin = sb.path('old-git');
    fs.mkdirSync(bin);
    fs.writeFileSync(
      path.join(bin, 'git'),
      `#!/bin/sh\nif [ "$1" = "--version" ]; then echo "git version 2.30.1"; exit 0; fi\nexec ${realGit} "$@"\n`,
      { mode: 0o755 },
    );
    const env = { PATH: `${bin}${path.delimiter}${sb.env.PATH}` };
    const e = expectError(xet(sb, r.dir, ['capture', '--json'], { env }), 'GIT_TOO_OLD');
    assert.equal(e.details.found, '2.30.1');
    assert.equal(r.git('for-each-ref', 'refs/xet/'), '', 'no snapshot');
    capture(sb, r.dir); // the real git's version passes
  }));

test('PATH_ENCODING: a file name that is not UTF-8 refuses the capture, naming its bytes', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    fs.mkdirSync(r.p('dir'));
    const name = Buffer.from([0x6e, 0xe9, 0x2e, 0x74, 0x78, 0x74]); // "né.txt" in Latin-1
    fs.writeFileSync(Buffer.concat([Buffer.from(`${r.p('dir')}/`), name]), 'latin-1 name\n');
    const e = expectError(xet(sb, r.dir, ['capture', '--json']), 'PATH_ENCODING');
    assert.equal(e.details.nameHex, name.toString('hex'));
    assert.equal(e.details.dir, 'dir');
    assert.equal(r.git('for-each-ref', 'refs/xet/'), '', 'no snapshot');
  }));

test('WORK_NOT_KEPT: discard refuses when its capture would leave a secret out, and the fork stays', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    const snap = capture(sb, r.dir);
    const f = sb.path('f');
    expectExit(xet(sb, r.dir, ['fork', snap, f, '--mode', 'copy', '--json']), 0);
    fs.writeFileSync(path.join(f, '.env'), 'TOKEN=only-here\n');
    fs.writeFileSync(path.join(f, 'work.txt'), 'work\n');
    const e = expectError(xet(sb, r.dir, ['discard', f, '--json']), 'WORK_NOT_KEPT');
    assert.deepEqual(e.details.paths, ['.env']);
    assert.equal(fs.readFileSync(path.join(f, '.env'), 'utf8'), 'TOKEN=only-here\n', 'the secret is still there');
    const listed = parseJson(xet(sb, r.dir, ['forks', '--json'])).forks;
    assert.deepEqual(
      listed.map((x: { state: string }) => x.state),
      ['active'],
    );
    // Dropping it is an explicit choice.
    expectExit(xet(sb, r.dir, ['discard', f, '--no-capture', '--json']), 0);
    assert.equal(fs.existsSync(f), false);
  }));

test('every fault point is placed in src and used by a test', () => {
  const read = (dir: string): string[] =>
    fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
      const p = path.join(dir, e.name);
      return e.isDirectory() ? read(p) : e.name.endsWith('.ts') ? [fs.readFileSync(p, 'utf8')] : [];
    });
  const src = read(path.join(ROOT, 'src')).join('\n');
  const tests = testSources()
    .map((s) => s.text)
    .join('\n');
  for (const point of FAULT_POINTS) {
    assert.match(src, new RegExp(`(faultPoint|dieAt|pauseAt)\\('${point}'\\)`), `${point} is placed in src`);
    assert.ok(tests.includes(point), `${point} is used by some test`);
  }
});
