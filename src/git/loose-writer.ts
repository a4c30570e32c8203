// Loose objects written by this process: a capture's manifest blob, top tree and commit, which
// cost a `git hash-object -w`, a `git mktree` and a `git commit-tree`, one after the other, at the
// end of every capture (~8-10 ms apiece here, most of a daemon's re-capture after its pack). The
// format is git's: zlib of "<type> <size>\0<content>" at objects/<2 hex>/<rest>, written under a temporary name in the same
// directory and linked to its own, so that a reader sees the whole object or nothing, and an
// object already there is left as it is. Where core.sharedRepository asks for permissions other
// than this process's umask gives, git adjusts them (adjust_shared_perm): callers let git write.

import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { deflateSync } from 'node:zlib';
import type { TreeEntryInput } from './plumbing';

const TREE_MODES: Record<string, string> = {
  '040000': '40000',
  '40000': '40000',
  '100644': '100644',
  '100755': '100755',
  '120000': '120000',
  '160000': '160000',
};

/** The zlib level git writes loose objects at with this configuration (core.looseCompression, else
 * core.compression, else 1; -1 is zlib's default, 6), or null for a value git would refuse (git is
 * then left to write, and to say so). */
export function looseCompressionLevel(config: { get(key: string): string | undefined }): number | null {
  const raw = config.get('core.loosecompression') ?? config.get('core.compression');
  if (raw === undefined) return 1;
  if (!/^-?\d+$/.test(raw.trim())) return null;
  const n = Number(raw.trim());
  if (n === -1) return 6;
  return n >= 0 && n <= 9 ? n : null;
}

/** The level this process writes loose objects at with this configuration, or null when git must
 * write them: core.sharedRepository asks for permissions (git sets them: adjust_shared_perm), or
 * the level is one git would refuse (git says so). */
export function looseWriteLevel(config: { get(key: string): string | undefined }): number | null {
  return config.get('core.sharedrepository') === undefined ? looseCompressionLevel(config) : null;
}

/** Writes `data` as a loose object of `type` (deflated at `level`: looseWriteLevel); returns its
 * id. */
export function writeLooseObject(
  objectsDir: string,
  format: 'sha1' | 'sha256',
  type: 'blob' | 'tree' | 'commit',
  data: Buffer,
  level = 1,
): string {
  const header = Buffer.from(`${type} ${data.length}\0`, 'latin1');
  const oid = createHash(format).update(header).update(data).digest('hex');
  const dir = path.join(objectsDir, oid.slice(0, 2));
  const file = path.join(dir, oid.slice(2));
  if (fs.existsSync(file)) return oid;
  fs.mkdirSync(dir, { recursive: true });
  const tmp = path.join(dir, `tmp_obj_xet_${process.pid}_${randomBytes(6).toString('hex')}`);
  try {
    fs.writeFileSync(tmp, deflateSync(Buffer.concat([header, data]), { level }), { mode: 0o444, flag: 'wx' });
    try {
      fs.linkSync(tmp, file);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e; // written meanwhile: the same bytes
    }
  } finally {
    fs.rmSync(tmp, { force: true });
  }
  return oid;
}

/** A tree's content from its entries, in git's order (a tree's name sorts as if it ended in '/'),
 * as `git mktree` checks them: a known mode, an id of the format's length, a name without '/' or
 * NUL that is not '.', '..' or empty, no name twice. */
export function treeContent(entries: readonly TreeEntryInput[], format: 'sha1' | 'sha256'): Buffer {
  const hexLen = format === 'sha256' ? 64 : 40;
  const keyed = entries.map((e) => {
    const mode = TREE_MODES[e.mode];
    if (!mode) throw new Error(`tree entry ${JSON.stringify(e.name)}: mode ${e.mode}`);
    if (e.type !== (mode === '40000' ? 'tree' : mode === '160000' ? 'commit' : 'blob'))
      throw new Error(`tree entry ${JSON.stringify(e.name)}: type ${e.type} for mode ${e.mode}`);
    if (!/^[0-9a-f]+$/.test(e.oid) || e.oid.length !== hexLen)
      throw new Error(`tree entry ${JSON.stringify(e.name)}: id ${e.oid}`);
    if (!e.name || e.name === '.' || e.name === '..' || /[/\0]/.test(e.name))
      throw new Error(`tree entry name ${JSON.stringify(e.name)}`);
    const name = Buffer.from(e.name, 'utf8');
    return { mode, name, oid: e.oid, key: mode === '40000' ? Buffer.concat([name, Buffer.from('/')]) : name };
  });
  keyed.sort((a, b) => Buffer.compare(a.key, b.key));
  const parts: Buffer[] = [];
  for (let i = 0; i < keyed.length; i++) {
    if (i > 0 && keyed[i - 1].name.equals(keyed[i].name))
      throw new Error(`tree entry ${keyed[i].name.toString('utf8')} twice`);
    parts.push(
      Buffer.from(`${keyed[i].mode} `, 'latin1'),
      keyed[i].name,
      Buffer.from([0]),
      Buffer.from(keyed[i].oid, 'hex'),
    );
  }
  return Buffer.concat(parts);
}

/** A commit as `git commit-tree` writes it when it adds no encoding header and no signature: the
 * tree, the parents in order, author and committer (one identity), a blank line, the message as
 * given. */
export function commitContent(c: {
  tree: string;
  parents: readonly string[];
  name: string;
  email: string;
  /** Dates as identDate (ident.ts) gives them. */
  authored: string;
  committed: string;
  message: string;
}): Buffer {
  const who = `${c.name} <${c.email}>`;
  const head = [
    `tree ${c.tree}`,
    ...c.parents.map((p) => `parent ${p}`),
    `author ${who} ${c.authored}`,
    `committer ${who} ${c.committed}`,
  ];
  return Buffer.from(`${head.join('\n')}\n\n${c.message}`, 'utf8');
}
