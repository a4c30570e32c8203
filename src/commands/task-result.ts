// git xet task result (owner: result helper): the exact bytes of a task's result, in chunks that end
// on UTF-8 boundaries (src/tasks/result.ts).
import type { Command } from 'commander';
import { XetError } from '../errors';
import { RESULT_CHUNK_MAX } from '../tasks/model';
import { run } from '../cli/run';
import { emit } from '../cli/output';

/** A decimal byte count; anything else (signs, exponents, fractions, hex) is a usage error. */
function byteCount(flag: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = /^\d{1,15}$/.test(v) ? Number(v) : NaN;
  if (!Number.isSafeInteger(n))
    throw new XetError('USAGE', `${flag} needs a whole number of bytes, not ${JSON.stringify(v)}`);
  return n;
}

function writeOut(bytes: Buffer): Promise<void> {
  return new Promise((resolve, reject) => process.stdout.write(bytes, (e) => (e ? reject(e) : resolve())));
}

export function registerTaskResult(task: Command): void {
  task
    .command('result')
    .description("read a task's result exactly: the whole of it, or one chunk ending on a UTF-8 boundary")
    .argument('<task>', 'task id (full or a unique prefix of at least 4 hex digits)')
    .option('--offset <bytes>', 'start here (a character boundary: 0 or an earlier nextOffsetBytes)')
    .option('--max-bytes <n>', `at most this many bytes (1 to ${RESULT_CHUNK_MAX}; default ${RESULT_CHUNK_MAX})`)
    .action(
      run(async (out, spec: string, opts: { offset?: string; maxBytes?: string }) => {
        // Parsed before anything else: bad options change nothing (not even reconciliation).
        const offset = byteCount('--offset', opts.offset);
        const maxBytes = byteCount('--max-bytes', opts.maxBytes);
        const { findRepo } = await import('../git/repo');
        const { reconcileAtStart } = await import('../tasks/recover');
        const { collectTasks } = await import('../tasks/retention');
        const { withExistingSidecar } = await import('../sidecar/db');
        const { getTask, resolveTaskId } = await import('../tasks/store');
        const { readResultChunk } = await import('../tasks/result');
        const repo = await findRepo(process.cwd(), true);
        await reconcileAtStart(repo);
        collectTasks(repo);
        const oneChunk = out.json || offset !== undefined || maxBytes !== undefined;
        let id = spec;
        const chunks =
          withExistingSidecar(repo.commonDir, (db) => {
            const row = getTask(db, resolveTaskId(db, spec));
            if (row === null) throw new XetError('TASK_NOT_FOUND', `no task ${spec}`, { task: spec });
            id = row.id;
            if (oneChunk) return [readResultChunk(db, repo.commonDir, row, offset ?? 0, maxBytes ?? RESULT_CHUNK_MAX)];
            // The whole result: one descriptor per chunk, all read under one sidecar connection,
            // before the first byte goes out (a failure prints nothing half).
            const all = [readResultChunk(db, repo.commonDir, row, 0, RESULT_CHUNK_MAX)];
            while (!all[all.length - 1].eof) {
              all.push(readResultChunk(db, repo.commonDir, row, all[all.length - 1].nextOffsetBytes, RESULT_CHUNK_MAX));
            }
            return all;
          }) ?? null;
        if (chunks === null)
          throw new XetError('TASK_NOT_FOUND', `no task ${spec} (this repository has no tasks)`, { task: spec });
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
      }),
    );
}
