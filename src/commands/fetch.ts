// git xet fetch: bring refs/xet/* (snapshots, handoffs) from a remote, and set up its refspec.
import { s } from './schema';
import { defineCommand } from './spec';

export const fetchCommand = defineCommand({
  path: ['fetch'],
  tool: 'fetch',
  description: 'fetch snapshots and handoffs (refs/xet/*) from a remote; never overwrites a local one',
  input: {
    remote: s.string().optional().describe('remote name or URL (default: the branch upstream remote, else origin)'),
  },
  args: ['remote'],
  paths: { remote: 'source' },
  names: ['remote'],
  // Adds refs (and the remote's refspec once); never overwrites a local one.
  annotations: { readOnly: false, destructive: false, idempotent: true, openWorld: true },
  long: true,
  output: s.looseObject({
    remote: s.string(),
    url: s.string(),
    fetched: s.array(s.looseObject({ ref: s.string(), oid: s.string() })),
    refspecAdded: s.boolean(),
  }),
  async run(input, ctx) {
    const { fetchXetRefs } = await import('../remote/publish');
    return fetchXetRefs({ cwd: ctx.cwd, remote: input.remote });
  },
  human: (r) => `${r.fetched.length} new ref(s) from ${r.url}`,
});
