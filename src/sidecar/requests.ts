// Request ids of `handoff create --request-id` (table from migration 4). A handoff's id covers its
// creation time, so a retry after a lost reply would make a second handoff; instead the first call
// reserves the request id with the hash of its inputs and the creation time it chose, and every
// retry with the same id and inputs reuses that time: the same descriptor bytes, the same handoff.

import type { Db } from './db';

export interface RequestRow {
  requestId: string;
  inputsSha256: string;
  createdAt: string;
  handoff: string | null;
}

/** The row for `requestId`, reserving it with these inputs and `createdAt` if it is new. One
 * IMMEDIATE transaction, so two concurrent first calls agree on one creation time. */
export function reserveRequest(db: Db, requestId: string, inputsSha256: string, createdAt: string): RequestRow {
  return db
    .transaction(() => {
      const row = db
        .prepare(
          'SELECT request_id AS requestId, inputs_sha256 AS inputsSha256, created_at AS createdAt, handoff FROM handoff_requests WHERE request_id = ?',
        )
        .get(requestId) as RequestRow | undefined;
      if (row) return row;
      db.prepare(
        'INSERT INTO handoff_requests(request_id, inputs_sha256, created_at, handoff, recorded_at) VALUES (?, ?, ?, NULL, ?)',
      ).run(requestId, inputsSha256, createdAt, new Date().toISOString());
      return { requestId, inputsSha256, createdAt, handoff: null };
    })
    .immediate();
}

export function completeRequest(db: Db, requestId: string, handoff: string): void {
  db.prepare('UPDATE handoff_requests SET handoff = ? WHERE request_id = ?').run(handoff, requestId);
}
