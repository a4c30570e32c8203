// git xet hydrate: write the chunked files a lazy restore left out, fetching their chunks.
import { s } from './schema';
import { defineCommand } from './spec';

export const hydrateCommand = defineCommand({
  path: ['hydrate'],
  tool: 'hydrate',
  description: 'write the chunked files a lazy restore (restore --from URL --lazy) left out, fetching their chunks',
  input: {
    paths: s.array(s.string()).default([]).describe('deferred files to write (default: all of them)'),
  },
  args: ['paths'],
  annotations: { readOnly: false, destructive: false, idempotent: true, openWorld: true },
  long: true,
  output: s.looseObject({
    hydrated: s.array(s.looseObject({ path: s.string(), size: s.number() })),
    remaining: s.array(s.string()),
    chunksFetched: s.number(),
    bytes: s.number(),
  }),
  async run(input, ctx) {
    const { hydrate } = await import('../snapshot/lazy');
    return hydrate({ cwd: ctx.cwd, paths: input.paths, signal: ctx.signal });
  },
  human: (r) =>
    `hydrated ${r.hydrated.length} files (${r.bytes} bytes, ${r.chunksFetched} chunks fetched)` +
    (r.remaining.length ? `; ${r.remaining.length} still deferred` : ''),
});
