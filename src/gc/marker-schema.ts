// The zod schemas of pin and drop records (xet.pin/v1, xet.drop/v1; docs/FORMAT.md), apart from
// markers.ts so that zod (~30 ms and ~95 modules at start-up) is loaded only when a marker is read
// back, never by the commands that only write one or never touch one (capture, restore, verify).

import { z } from 'zod';
import { DROP_SCHEMA, OID_RE, PIN_SCHEMA, type DropRecord, type PinRecord } from './markers';

const isoSecond = z.string().regex(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/);

// Typed as the records they parse to: the interfaces in markers.ts and these cannot drift apart.
export const PinRecordSchema: z.ZodType<PinRecord> = z.object({
  schema: z.literal(PIN_SCHEMA),
  snapshot: z.string().regex(OID_RE),
  reason: z.string().max(4096),
  until: isoSecond.nullable(),
  createdAt: isoSecond,
});

export const DropRecordSchema: z.ZodType<DropRecord> = z.object({
  schema: z.literal(DROP_SCHEMA),
  snapshot: z.string().regex(OID_RE),
  droppedAt: isoSecond,
  reason: z.enum(['explicit', 'retention']),
});
