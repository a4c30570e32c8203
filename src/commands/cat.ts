// git xet cat: one file of a snapshot, or a byte range of it, to stdout, a file, or (MCP, --json)
// inline in the answer.
import type { Writable } from 'node:stream';
import { s } from './schema';
import { EXIT, XetError } from '../errors';
import { emit } from '../cli/output';
import type { CatResult } from '../snapshot/cat';
import { defineCommand } from './spec';

interface CatInput {
  target: string;
  range?: string;
  output?: string;
}

async function runCat(input: CatInput, cwd: string, output: Writable | string | 'inline', signal?: AbortSignal) {
  const { cat } = await import('../snapshot/cat');
  return cat({ cwd, target: input.target, range: input.range, output, signal });
}

const describeCat = (r: CatResult) =>
  `wrote ${r.bytes} bytes (${r.start}-${r.end}) of ${r.path} to ${r.output}` +
  (r.chunked ? ` (${r.chunksRead} chunks read, ${r.chunksFetched} fetched)` : '');

export const catCommand = defineCommand({
  path: ['cat'],
  tool: 'cat',
  description: 'write a file of a snapshot, or a byte range of it, reading only the chunks the range needs',
  input: {
    target: s.string().describe('<snapshot>:<path> (the path as in the worktree, from its top)'),
    range: s
      .string()
      .optional()
      .describe(
        'START-END (END inclusive, as HTTP Range), START- (to the end) or START+LENGTH; default the whole file',
      ),
    output: s
      .string()
      .optional()
      .describe('write to this file (atomically) instead of stdout; through MCP the bytes come back inline'),
  },
  args: ['target'],
  flags: { range: { value: '<range>' }, output: { short: 'o', value: '<file>' } },
  paths: { output: 'target' },
  // Reads only; in a lazy copy it may fetch the chunks it needs (objects the copy already promises).
  annotations: { readOnly: true, destructive: false, idempotent: true, openWorld: true },
  output: s.looseObject({
    snapshot: s.string(),
    path: s.string(),
    size: s.number(),
    start: s.number(),
    end: s.number(),
    bytes: s.number(),
    chunked: s.boolean(),
    chunksRead: s.number(),
    chunksFetched: s.number(),
    output: s.string().nullable(),
    content: s.string().optional(),
    encoding: s.enum(['utf8', 'base64']).optional(),
  }),
  // MCP (and --json without -o): the bytes inline, at most 1 MiB. A tool annotated read-only writes
  // no files: through MCP `output` is refused.
  async run(input, ctx) {
    if (input.output !== undefined && ctx.via === 'mcp') {
      throw new XetError('USAGE', 'the cat tool returns the bytes in its answer (at most 1 MiB); it writes no file', {
        output: input.output,
      });
    }
    return runCat(
      input,
      ctx.cwd,
      input.output === undefined || input.output === '-' ? 'inline' : input.output,
      ctx.signal,
    );
  },
  human: describeCat,
  // The command line streams to stdout (no -o, or -o -), and a SIGTERM or Ctrl-C stops it with
  // nothing half written at -o FILE.
  async cliAction(input, ctx, out) {
    const toStdout = input.output === undefined || input.output === '-';
    const ac = new AbortController();
    const stop = (): void => ac.abort();
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
    // A reader that closes the pipe early (`| head -c 100`) ends the read quietly, as a choice.
    let closed = false;
    const onPipeError = (e: NodeJS.ErrnoException): void => {
      if (e.code === 'EPIPE') closed = true;
      ac.abort();
    };
    if (toStdout && !out.json) process.stdout.on('error', onPipeError);
    try {
      if (toStdout && out.json) {
        const r = await runCat(input, ctx.cwd, 'inline', ac.signal);
        emit(out, r, () => describeCat(r));
        return EXIT.OK;
      }
      const r = await runCat(input, ctx.cwd, toStdout ? process.stdout : (input.output as string), ac.signal);
      if (!toStdout) emit(out, r, () => describeCat(r));
      return EXIT.OK;
    } catch (e) {
      if (closed) return EXIT.OK;
      if (ac.signal.aborted && !(e instanceof XetError && e.code === 'CANCELLED')) {
        throw new XetError('CANCELLED', 'cat was stopped by a signal');
      }
      throw e;
    } finally {
      process.removeListener('SIGTERM', stop);
      process.removeListener('SIGINT', stop);
      process.stdout.removeListener('error', onPipeError);
    }
  },
});
