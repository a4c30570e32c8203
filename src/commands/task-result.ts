// git xet task result (owner: result helper): the exact bytes of a task's result, in chunks that end
// on UTF-8 boundaries (src/tasks/result.ts).
import { s, type InferShape } from './schema';
import { XetError } from '../errors';
import { RESULT_CHUNK_MAX } from '../tasks/model';
import type { ResultChunk } from '../tasks/result';
import { emit } from '../cli/output';
import { defineCommand, type CommandContext } from './spec';
import { countInput } from './task-read';

/** A decimal byte count; anything else (signs, exponents, fractions, hex) is a usage error. */
function byteCount(flag: string, value: string | number | undefined): number | undefined {
  if (value === undefined) return undefined;
  const v = String(value);
  const n = /^\d{1,15}$/.test(v) ? Number(v) : NaN;
  if (!Number.isSafeInteger(n))
    throw new XetError('USAGE', `${flag} needs a whole number of bytes, not ${JSON.stringify(v)}`);
  return n;
}

function writeOut(bytes: Buffer): Promise<void> {
  return new Promise((resolve, reject) => process.stdout.write(bytes, (e) => (e ? reject(e) : resolve())));
}

const taskResultInput = {
  task: s.string().describe('task id (full or a unique prefix of at least 4 hex digits)'),
  offset: countInput('start here (a character boundary: 0 or an earlier nextOffsetBytes)'),
  maxBytes: countInput(`at most this many bytes (1 to ${RESULT_CHUNK_MAX}; default ${RESULT_CHUNK_MAX})`),
  wait: s.boolean().optional().describe('wait until the task has ended, then read its result'),
};
type TaskResultInput = InferShape<typeof taskResultInput>;

/** One chunk, or (`oneChunk` false) every chunk of the result, read under one sidecar connection
 * before the first byte goes out (a failure prints nothing half). */
async function readChunks(
  input: TaskResultInput,
  ctx: CommandContext,
  oneChunk: boolean,
): Promise<{ id: string; chunks: (ResultChunk & { origin: 'local' | 'record' })[] }> {
  const spec = input.task;
  // Parsed before anything else: bad options change nothing (not even reconciliation).
  const offset = byteCount('--offset', input.offset);
  const maxBytes = byteCount('--max-bytes', input.maxBytes);
  const { findRepo } = await import('../git/repo');
  const { reconcileAtStart } = await import('../tasks/recover');
  const { withExistingSidecar } = await import('../sidecar/db');
  const { getTask, resolveTaskId } = await import('../tasks/store');
  const { readResultChunk } = await import('../tasks/result');
  const repo = await findRepo(ctx.cwd, true);
  await reconcileAtStart(repo);
  const { collectUnlessReadOnlyTool } = await import('./task-read');
  await collectUnlessReadOnlyTool(repo, ctx);
  if (input.wait) {
    const { openExisting, waitForEnd } = await import('./task-read');
    const db = await openExisting(repo);
    if (db) {
      try {
        // A task known only by its record has ended already (records are made of ended tasks).
        const { findTaskRecord } = await import('../tasks/record');
        const { repoOpts } = await import('../git/repo');
        let known = true;
        try {
          resolveTaskId(db, spec);
        } catch (e) {
          if (!(e instanceof XetError) || e.code !== 'TASK_NOT_FOUND') throw e;
          known = (await findTaskRecord(spec, repoOpts(repo))) === null;
        }
        if (known) await waitForEnd(repo, db, resolveTaskId(db, spec), ctx.signal);
      } finally {
        db.close();
      }
    }
  }
  let id = spec;
  const local = () =>
    withExistingSidecar(repo.commonDir, (db) => {
      const row = getTask(db, resolveTaskId(db, spec));
      if (row === null) throw new XetError('TASK_NOT_FOUND', `no task ${spec}`, { task: spec });
      id = row.id;
      if (oneChunk) return [readResultChunk(db, repo.commonDir, row, offset ?? 0, maxBytes ?? RESULT_CHUNK_MAX)];
      const all = [readResultChunk(db, repo.commonDir, row, 0, RESULT_CHUNK_MAX)];
      while (!all[all.length - 1].eof) {
        all.push(readResultChunk(db, repo.commonDir, row, all[all.length - 1].nextOffsetBytes, RESULT_CHUNK_MAX));
      }
      return all;
    }) ?? null;
  let chunks: ResultChunk[] | null = null;
  try {
    chunks = local();
  } catch (e) {
    if (!(e instanceof XetError) || e.code !== 'TASK_NOT_FOUND') throw e;
  }
  if (chunks !== null) return { id, chunks: chunks.map((c) => ({ ...c, origin: 'local' as const })) };
  // Not a task of this repository: a task record fetched with its handoff (read as hostile).
  const { recordChunks } = await import('../tasks/record');
  const got = await recordChunks(repo, spec, oneChunk ? [offset ?? 0, maxBytes ?? RESULT_CHUNK_MAX] : null);
  if (got === null)
    throw new XetError('TASK_NOT_FOUND', `no task ${spec} in this repository (nor a task record of it)`, {
      task: spec,
    });
  return got;
}

export const taskResultCommand = defineCommand({
  path: ['task', 'result'],
  tool: 'task_result',
  description: "read a task's result exactly: the whole of it, or one chunk ending on a UTF-8 boundary",
  input: taskResultInput,
  args: ['task'],
  flags: { offset: { value: '<bytes>' }, maxBytes: { value: '<n>' } },
  names: ['task'],
  annotations: { readOnly: true, destructive: false, idempotent: true },
  // --wait may last as long as the task.
  long: true,
  output: s.looseObject({
    text: s.string(),
    offsetBytes: s.number(),
    nextOffsetBytes: s.number(),
    eof: s.boolean(),
    sizeBytes: s.number(),
    sha256: s.string(),
    origin: s.enum(['local', 'record']),
  }),
  // One chunk, as --json prints it (an MCP client pages with offset and nextOffsetBytes).
  async run(input, ctx) {
    return (await readChunks(input, ctx, true)).chunks[0];
  },
  // Without --json the bytes themselves: the whole result, or the chunk asked for.
  async cliAction(input, ctx, out) {
    const oneChunk = out.json || input.offset !== undefined || input.maxBytes !== undefined;
    const { id, chunks } = await readChunks(input, ctx, oneChunk);
    if (out.json) {
      emit(out, chunks[0], () => '');
      return;
    }
    const bytes = chunks.map((c) => Buffer.from(c.text, 'utf8'));
    if (!oneChunk) {
      const { createHash } = await import('node:crypto');
      const h = createHash('sha256');
      for (const b of bytes) h.update(b);
      if (h.digest('hex') !== chunks[0].sha256) {
        throw new XetError(
          'INTEGRITY_MISMATCH',
          `the stored result of task ${id} does not hash to its recorded sha256`,
          {
            task: id,
            sha256: chunks[0].sha256,
          },
        );
      }
    }
    for (const b of bytes) await writeOut(b);
  },
});
