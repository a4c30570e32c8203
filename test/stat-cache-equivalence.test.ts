// The stat cache capture writes, held to git's own index over generated trees (the checks are in
// test/support/stat-cache-equivalence.ts; test/slow/ runs thousands more).
import { test } from 'node:test';
import { checkTrees } from './support/stat-cache-equivalence';

test('our stat cache makes git say what its own index makes it say (100 generated trees)', async () => {
  await checkTrees(100, 1000);
});
