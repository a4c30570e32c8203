// orderedFinder (src/snapshot/ordered-find.ts): the position indexOf gives, for every question,
// whether the questions come in order (as staleSizes asks), out of order, repeated or absent.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { orderedFinder } from '../src/snapshot/ordered-find';

function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

test('orderedFinder finds what indexOf finds, in order, out of order, repeated and absent', () => {
  const rand = rng(44);
  const alphabet = ['a', 'b', '/', 'z', 'é', '\u{1F600}', '\uE000', '.', '-'];
  let checked = 0;
  for (let round = 0; round < 300; round++) {
    const size = Math.floor(rand() * (round % 10 === 0 ? 2000 : 60));
    const set = new Set<string>();
    while (set.size < size) {
      let s = '';
      const len = 1 + Math.floor(rand() * 12);
      for (let i = 0; i < len; i++) s += alphabet[Math.floor(rand() * alphabet.length)];
      set.add(s);
    }
    const sorted = [...set].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    // Questions: some present, some absent, mostly ascending (a subset in order), then shuffled ones.
    const present = sorted.filter(() => rand() < 0.4);
    const absent = Array.from({ length: 10 }, () => `${sorted[Math.floor(rand() * sorted.length)] ?? ''}~${round}`);
    const inOrder = [...present, ...absent].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    const shuffled = [...inOrder].sort(() => rand() - 0.5);
    const find = orderedFinder(sorted);
    for (const q of [...inOrder, ...shuffled, ...inOrder, sorted[0] ?? 'x', sorted[sorted.length - 1] ?? 'y', '']) {
      assert.equal(find(q), sorted.indexOf(q), `round ${round}: ${JSON.stringify(q)}`);
      checked++;
    }
  }
  assert.ok(checked > 10_000);
});

test('orderedFinder over an empty list finds nothing', () => {
  const find = orderedFinder([]);
  assert.equal(find('a'), -1);
  assert.equal(find('b'), -1);
});
