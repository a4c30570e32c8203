// Unit tests of the pure pieces: canonical JSON, path safety, manifest versioning, capture policy,
// the config reader and the inter-process lock.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { buildProgram } from '../src/cli/main';
import { ERROR_CODES } from '../src/errors';
import { GitConfig } from '../src/git/config';
import { acquireLock } from '../src/sidecar/lock';
import { canonicalJson } from '../src/snapshot/canonical-json';
import { parseManifest } from '../src/snapshot/manifest';
import { checkPathSyntax, checkTreePaths } from '../src/snapshot/paths';
import ignore from 'ignore';
import { DEFAULT_SECRET_PATTERNS, PatternMatcher, resolvePolicy } from '../src/snapshot/policy';
import { codeOf } from './support/errors';

test('canonical JSON sorts keys at every depth and has no whitespace', () => {
  assert.equal(canonicalJson({ b: 1, a: [{ d: 'x', c: null }], e: true }), '{"a":[{"c":null,"d":"x"}],"b":1,"e":true}');
  assert.equal(canonicalJson({ s: 'é\n"' }), '{"s":"é\\n\\""}');
  assert.equal(canonicalJson({ a: undefined, b: 2 }), '{"b":2}');
  assert.throws(() => canonicalJson({ x: 1.5 }), /safe integers/);
});

test('path syntax: absolute, dot, dot-dot and .git components are PATH_ESCAPE', () => {
  for (const bad of ['/etc/passwd', '../x', 'a/../../x', 'a/./b', 'a//b', '.git/config', 'sub/.GIT/hooks/x', '']) {
    assert.equal(
      codeOf(() => checkPathSyntax(bad, 'test')),
      'PATH_ESCAPE',
      bad,
    );
  }
  for (const good of ['a', 'a b/c', '-lead', 'x\ny', 'tab\there', 'back\\slash', 'ünï', '.gitignore', 'a/.github/x']) {
    assert.equal(
      codeOf(() => checkPathSyntax(good, 'test')),
      undefined,
      good,
    );
  }
});

test('tree paths: a path through a file or symlink, duplicates and dir/file clashes are PATH_CONFLICT', () => {
  const leaf = (p: string) => ({ path: p, type: 'blob' });
  const dir = (p: string) => ({ path: p, type: 'tree' });
  assert.equal(
    codeOf(() => checkTreePaths([leaf('a'), leaf('a/b')], [], 't')),
    'PATH_CONFLICT',
  );
  assert.equal(
    codeOf(() => checkTreePaths([leaf('a'), leaf('a')], [], 't')),
    'PATH_CONFLICT',
  );
  assert.equal(
    codeOf(() => checkTreePaths([leaf('a')], ['a'], 't')),
    'PATH_CONFLICT',
  );
  assert.equal(
    codeOf(() => checkTreePaths([leaf('a')], ['a/b'], 't')),
    'PATH_CONFLICT',
  );
  assert.equal(
    codeOf(() => checkTreePaths([dir('a'), leaf('a/b'), leaf('c')], ['d/e'], 't')),
    undefined,
  );
});

function manifestWith(schema: string): string {
  return JSON.stringify({ schema });
}

test('manifest reader refuses other major versions with SCHEMA_UNSUPPORTED, junk with SNAPSHOT_INVALID', () => {
  assert.equal(
    codeOf(() => parseManifest(manifestWith('xet.snapshot/v5'))),
    'SCHEMA_UNSUPPORTED',
  );
  assert.equal(
    codeOf(() => parseManifest(manifestWith('xet.snapshot/v1'))),
    'SNAPSHOT_INVALID',
  ); // fields missing
  assert.equal(
    codeOf(() => parseManifest(manifestWith('xet.snapshot/v4'))),
    'SNAPSHOT_INVALID',
  ); // v4 is read
  assert.equal(
    codeOf(() => parseManifest(manifestWith('something/v1'))),
    'SNAPSHOT_INVALID',
  );
  assert.equal(
    codeOf(() => parseManifest('{not json')),
    'SNAPSHOT_INVALID',
  );
});

test('policy: defaults, config, flags; secrets and patterns use gitignore syntax', () => {
  const cfg = new GitConfig([
    { key: 'xet.capture.ignored', value: 'none' },
    { key: 'xet.capture.include', value: 'node_modules/' },
    { key: 'xet.capture.secret', value: '*.secret' },
  ]);
  const p = resolvePolicy(cfg, { exclude: ['*.log'] });
  assert.equal(p.ignored, 'none');
  assert.ok(p.isIncluded('node_modules/a/b.js'));
  assert.ok(!p.isIncluded('dist/a.js'));
  assert.ok(p.isExcluded('deep/x.log'));
  for (const s of [
    '.env',
    'app/.env.local',
    'k.pem',
    'ssh/id_rsa',
    'ssh/id_ed25519.pub',
    '.npmrc',
    'x.secret',
    'home/.aws/credentials',
  ]) {
    assert.ok(p.isSecret(s), s);
  }
  for (const s of ['env.ts', 'src/keys.ts', 'README']) assert.ok(!p.isSecret(s), s);
  assert.equal(resolvePolicy(new GitConfig([]), { ignored: 'all' }).ignored, 'all');
  assert.equal(
    codeOf(() => resolvePolicy(new GitConfig([]), { ignored: 'some' })),
    'USAGE',
  );
  assert.equal(
    codeOf(() => resolvePolicy(new GitConfig([{ key: 'xet.capture.ignored', value: 'x' }]), {})),
    'CONFIG_INVALID',
  );
});

test('lock: second taker waits and gets BUSY; a holder killed with SIGKILL frees it', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-lock-'));
  try {
    const file = path.join(dir, 'l.lock');
    const a = acquireLock(file, 'testing');
    assert.equal(
      codeOf(() => acquireLock(file, 'testing', 200)),
      'BUSY',
    );
    a.release();
    acquireLock(file, 'testing', 200).release();
    // Another process holds the lock, then dies without releasing it.
    const lockModule = path.resolve(__dirname, '..', 'src', 'sidecar', 'lock.js');
    const child = spawn(process.execPath, [
      '-e',
      `require(${JSON.stringify(lockModule)}).acquireLock(${JSON.stringify(file)}, 'holding'); console.log('held'); setTimeout(() => {}, 60000)`,
    ]);
    await new Promise<void>((res) => child.stdout.once('data', () => res()));
    assert.equal(
      codeOf(() => acquireLock(file, 'testing', 300)),
      'BUSY',
    );
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
    const b = acquireLock(file, 'testing', 2000);
    b.release();
    b.release(); // idempotent
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('every error code is raised somewhere in src/ and documented in README.md', () => {
  const root = path.resolve(__dirname, '..', '..');
  const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');
  const sources: string[] = [];
  const walk = (d: string) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith('.ts') && e.name !== 'errors.ts') sources.push(fs.readFileSync(p, 'utf8'));
    }
  };
  walk(path.join(root, 'src'));
  const all = sources.join('\n');
  for (const code of Object.keys(ERROR_CODES)) {
    assert.ok(readme.includes(`\`${code}\``), `README.md lists ${code}`);
    assert.ok(all.includes(`'${code}'`), `${code} is raised somewhere`);
  }
});

test('secrets are found whatever their case, and through bracket classes and trailing spaces', () => {
  const secret = new PatternMatcher(DEFAULT_SECRET_PATTERNS);
  for (const p of ['home/.AWS/Credentials', 'h/.aws/CREDENTIALS', 'x/.Docker/Config.json', 'CFG/.ENV', 'k/Server.PEM'])
    assert.ok(secret.matches(p), `${p} is a secret`);
  assert.ok(!secret.matches('home/.aws/credentials.md'), 'a longer name is not');
  assert.ok(new PatternMatcher(['*.[cC][rR][tT]']).matches('certs/server.crt'), 'a bracket class is not a literal run');
  assert.ok(new PatternMatcher(['tls.crt ']).matches('d/tls.crt'), 'a trailing space is not part of the name');
  assert.ok(new PatternMatcher(['keys/tls.crt ']).matches('keys/tls.crt'), 'nor of a slash pattern');
});

test('the fast pattern matcher agrees with the ignore package on every path', () => {
  const lists = [
    ['node_modules/', '*.log', 'build', '**/.aws/credentials', 'docs/*.md', '/root-only', 'a/**/b', '.env.*'],
    ['secret', 'x/y/z', '*.pem'],
    ['*.tmp', '!keep.tmp', 'cache/'],
    // The secret defaults, and literal runs with RegExp syntax in them (the prefilter escapes them).
    [...DEFAULT_SECRET_PATTERNS, 'a+b(c).txt', 'we$rd{1}|x', 'v^2.[ch]'],
    // Text that is not literal: bracket classes, escapes, trailing spaces (.gitignore drops them).
    ['*.[cC][rR][tT]', 'x[abc]yz', 'ab ', 'foo/bar ', '\\#hash', 'we\\*rd'],
    // Non-ASCII case (V8 misses some case-insensitive alternations of it), a tab or no-break space
    // as a whole pattern (a name to `ignore`), a byte order mark (stripped from the first only).
    ['SΜS', 'SIn', 'ſkσK#', 'x/ſkσ'],
    ['\t', '\u00a0'],
    ['\uFEFF.env'],
    ['a/b', '\uFEFF.env'],
    [],
  ];
  const paths = [
    'node_modules/a/b.js',
    'src/node_modules/x',
    'node_modules',
    'app.log',
    'deep/app.log/inner.txt',
    'build',
    'build/out.js',
    'src/build/x',
    'home/.aws/credentials',
    '.aws/credentials',
    'credentials',
    'docs/a.md',
    'docs/sub/a.md',
    'root-only',
    'sub/root-only',
    'a/b',
    'a/x/y/b',
    'b',
    'cfg/.env.local',
    '.env',
    'secret',
    'dir/secret/file',
    'x/y/z',
    'q/x/y/z',
    'k.pem',
    'keep.tmp',
    'other.tmp',
    'cache/v1/data',
    'APP.LOG',
    'CFG/.ENV.LOCAL',
    'KEEP.TMP',
    'home/.ssh/ID_RSA.pub',
    'certs/Server.PEM',
    'x/.docker/config.json',
    'x/.docker/config.json/inner',
    'a+b(c).txt',
    'aab(c).txt',
    'we$rd{1}|x',
    'werd1x',
    'v^2.c',
    'v2.c',
    'src/.npmrc',
    'credentials/.aws',
    'home/.AWS/Credentials',
    'home/.aws/CREDENTIALS',
    'x/.Docker/Config.JSON',
    '.ENV',
    'certs/server.crt',
    'certs/SERVER.CRT',
    'xbyz',
    'ab',
    'ab ',
    'foo/bar',
    'FOO/Bar/baz',
    '#hash',
    'we*rd',
    'ſkσK#',
    'SKΣK#/ſkσK#',
    'x/ſkσ',
    '\t',
    'd/\u00a0',
    '\uFEFF.env',
  ];
  for (const list of lists) {
    const fast = new PatternMatcher(list);
    const slow = ignore({ allowRelativePaths: true }).add(list);
    for (const p of paths) assert.equal(fast.matches(p), slow.ignores(p), `${JSON.stringify(list)} on ${p}`);
    // The walk's order: every file of a directory in turn, the same directories again and again
    // (answers are cached by directory and by name, so later questions take other routes).
    let seed = 7;
    const pick = <T>(xs: T[]): T => xs[(seed = (seed * 1103515245 + 12345) % 2147483648) % xs.length];
    const names = paths.flatMap((p) => p.split('/')).filter((n) => n !== '');
    for (let i = 0; i < 3000; i++) {
      const dir = Array.from({ length: 1 + (i % 4) }, () => pick(names)).join('/');
      for (let j = 0; j < 3; j++) {
        const p = `${dir}/${pick(names)}`;
        assert.equal(fast.matches(p), slow.ignores(p), `${JSON.stringify(list)} on ${p}`);
      }
    }
  }
});

test('every CLI command is documented in docs/CLI.md and the man page', () => {
  const root = path.resolve(__dirname, '..', '..');
  const cliDoc = fs.readFileSync(path.join(root, 'docs', 'CLI.md'), 'utf8');
  const man = fs.readFileSync(path.join(root, 'man', 'git-xet.1'), 'utf8');
  const names = buildProgram().commands.map((c) => c.name());
  assert.ok(names.length >= 7);
  for (const name of names) {
    assert.ok(cliDoc.includes(`### \`git xet ${name}`), `docs/CLI.md documents ${name}`);
    assert.ok(man.includes(`.B ${name}`), `the man page documents ${name}`);
  }
});
