// Thousands of generated trees through the stat-cache equivalence checks
// (test/support/stat-cache-equivalence.ts); the fast suite runs 100.
import { test } from 'node:test';
import { checkTrees } from '../support/stat-cache-equivalence';

test('our stat cache makes git say what its own index makes it say (2,000 generated trees)', async () => {
  await checkTrees(2000, 50_000);
});
