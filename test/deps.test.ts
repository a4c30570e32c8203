// Every declared dependency is used: a runtime dependency is imported by some file under src/, and a
// @types/ package types a dependency that does not ship its own types (else TypeScript never reads
// it). Reads package.json and the sources at run time, so a dependency added or left behind fails here.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';

// Compiled location: dist/test/deps.test.js -> ../../
const ROOT = path.resolve(__dirname, '..', '..');
const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
};

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...sourceFiles(p));
    else if (/\.(ts|js|cjs|mjs)$/.test(e.name)) out.push(p);
  }
  return out;
}

/** Module specifiers of import/export-from, import() and require() calls. */
function importedModules(text: string): Set<string> {
  const out = new Set<string>();
  const res = [/\bfrom\s+['"]([^'"]+)['"]/g, /\bimport\s*\(\s*['"]([^'"]+)['"]/g, /\brequire\s*\(\s*['"]([^'"]+)['"]/g];
  for (const re of res) for (const m of text.matchAll(re)) out.add(m[1]);
  return out;
}

function packageOf(spec: string): string {
  const parts = spec.split('/');
  return spec.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
}

test('every runtime dependency in package.json is imported under src/', () => {
  const used = new Set<string>();
  for (const f of sourceFiles(path.join(ROOT, 'src'))) {
    for (const spec of importedModules(fs.readFileSync(f, 'utf8'))) {
      if (!spec.startsWith('.') && !spec.startsWith('node:')) used.add(packageOf(spec));
    }
  }
  const deps = Object.keys(pkg.dependencies ?? {});
  assert.ok(deps.length > 0, 'package.json has no dependencies: the check would prove nothing');
  const unused = deps.filter((d) => !used.has(d));
  assert.deepEqual(unused, [], `declared in package.json "dependencies" but imported nowhere under src/: ${unused}`);
});

test('every @types/ package types a dependency that ships no types of its own', () => {
  const all = { ...pkg.dependencies, ...pkg.devDependencies };
  const problems: string[] = [];
  for (const name of Object.keys(all).filter((n) => n.startsWith('@types/'))) {
    const target = name.slice('@types/'.length).replace(/^(.+)__(.+)$/, '@$1/$2');
    if (target === 'node') continue;
    if (!(target in all)) {
      problems.push(`${name}: ${target} is not a dependency`);
      continue;
    }
    const dir = path.join(ROOT, 'node_modules', target);
    const own = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')) as Record<string, unknown>;
    const exportsTypes = JSON.stringify(own.exports ?? {}).includes('"types"');
    if (own.types || own.typings || exportsTypes || fs.existsSync(path.join(dir, 'index.d.ts'))) {
      problems.push(`${name}: ${target} ships its own types, so TypeScript never reads ${name}`);
    }
  }
  assert.deepEqual(problems, []);
});
