// Hundreds more generated trees through the stat-cache equivalence checks
// (test/support/stat-cache-equivalence.ts), other seeds than the fast suite's 100. 2,000 took 29
// minutes of the full suite on the 2-core machine (0.9 s a tree): 500 keep it near 8.
import { test } from 'node:test';
import { checkTrees } from '../support/stat-cache-equivalence';

test('our stat cache makes git say what its own index makes it say (500 generated trees)', async () => {
  await checkTrees(500, 50_000);
});
