// git xet push: publish refs/xet/* (snapshots, handoffs), all or the ones named, to a xet store or any Git remote.
import { s } from './schema';
import { checkedRepo, defineCommand, takeFromCheck } from './spec';
import type { Repo } from '../git/repo';
import type { GitConfig } from '../git/config';

/** What a push returns (--json, MCP's structuredContent); also handoff create --push's `push`. */
export const pushResultShape = s.looseObject({
  publication: s.string(),
  remote: s.string(),
  url: s.string(),
  kind: s.enum(['xet', 'git']),
  refs: s.array(s.looseObject({ ref: s.string(), status: s.string() })),
  resolved: s.array(s.looseObject({ id: s.string(), state: s.string() })),
});

/** The text a person sees for a push. */
export function pushLines(r: {
  url: string;
  publication: string;
  refs: { status: string }[];
  resolved: { id: string; state: string }[];
}): string[] {
  const fresh = r.refs.filter((x) => x.status === 'new').length;
  return [
    ...r.resolved.map((p) => `earlier publication ${p.id}: ${p.state}`),
    `${fresh} ref(s) published to ${r.url} (publication ${r.publication}), ${r.refs.length - fresh} already there`,
  ];
}

export const pushCommand = defineCommand({
  path: ['push'],
  tool: 'push',
  description: 'publish snapshots and handoffs (refs/xet/*) to a remote; create-once, with a publication id',
  input: {
    remote: s.string().optional().describe('remote name or URL (default: the branch upstream remote, else origin)'),
    ids: s
      .array(s.string())
      .default([])
      .describe('publish only these snapshots and handoffs (a handoff brings its snapshot)'),
  },
  args: ['remote', 'ids'],
  paths: { remote: 'source' },
  names: ['remote', 'ids'],
  // Refs are create-once (a second push adds no ref), but each push is a publication of its own.
  annotations: { readOnly: false, destructive: false, idempotent: false, openWorld: true },
  long: true,
  output: pushResultShape,
  // The daemon runs it for a thin client only when it is all in-process (a directory store): a push
  // through git may need the client's credentials, terminal or ssh agent, which the daemon has not;
  // a hook of the user's that git runs when the tracking refs are written needs its environment.
  relayable: async (input, ctx) => {
    const [{ pushesInProcess }, { repo, config, userHook }] = await Promise.all([
      import('../remote/publish'),
      checkedRepo(input, ctx.cwd),
    ]);
    if (userHook) return 'a reference-transaction hook runs';
    return (await pushesInProcess(repo, input.remote, config)) ? null : 'the push goes through git';
  },
  async run(input, ctx) {
    const { pushXetRefs } = await import('../remote/publish');
    const checked = takeFromCheck<{ repo: Repo; config: GitConfig }>(input);
    return pushXetRefs({ cwd: ctx.cwd, remote: input.remote, only: input.ids, signal: ctx.signal, ...checked });
  },
  human: (r) => pushLines(r).join('\n'),
});
