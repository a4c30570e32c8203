// Chunked snapshots for the readers' tests, made without capture's chunking: a snapshot captured the
// ordinary way is rewritten with plumbing into the v3 form docs/FORMAT.md describes (named files'
// blobs -> chunk pointers, their chunks and list trees packed, a `chunks/` tree, the manifest's
// `chunked`, counts and schema). The result is a snapshot a v3 capture could have written, so
// restore, diff, export, archive and push/fetch can be tested on chunked files on their own.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { chunkFile } from '../../src/chunks/chunk-file';
import { buildChunkList } from '../../src/chunks/list-tree';
import { pointerOf, serializePointer } from '../../src/chunks/pointer';
import { writePack, type PackItem } from '../../src/git/pack-writer';
import { canonicalJson } from '../../src/snapshot/canonical-json';
import { git, gitTry } from './git';
import type { Sandbox } from './sandbox';

export interface ChunkedRewrite {
  /** The new snapshot's id (its ref is created, the old one's removed). */
  snapshot: string;
  /** Path -> pointer blob id, whole blob id, chunk count. */
  files: Map<string, { pointer: string; blob: string; chunks: number }>;
}

/**
 * Rewrite snapshot `snap` of the repository at `dir` so that `paths` (regular files of its files/
 * tree) are stored as chunks. With `dropWhole`, every object only the old snapshot reached (the
 * files' whole blobs among them) is pruned, so nothing can read them but through the chunks.
 */
export async function chunkSnapshot(
  sb: Sandbox,
  dir: string,
  snap: string,
  paths: string[],
  opts: { dropWhole?: boolean; keepOld?: boolean } = {},
): Promise<ChunkedRewrite> {
  const g = (args: string[], input?: string | Buffer, env?: NodeJS.ProcessEnv) => git(sb, dir, args, { input, env });
  const objects = path.resolve(dir, g(['rev-parse', '--git-path', 'objects']).trim());
  const scratch = fs.mkdtempSync(path.join(sb.root, 'chunk-rewrite-'));
  try {
    const filesTree = g(['rev-parse', `${snap}:files`]).trim();
    const items: PackItem[] = [];
    const lists = new Set<string>();
    const chunkIds = new Set<string>();
    const files = new Map<string, { pointer: string; blob: string; chunks: number }>();
    const infoLines: string[] = [];
    for (const p of paths) {
      const [meta] = g(['ls-tree', '-z', '--full-tree', filesTree, '--', `:(literal)${p}`]).split('\t');
      const [mode, type, oid] = meta.split(' ');
      if (type !== 'blob' || (mode !== '100644' && mode !== '100755')) throw new Error(`${p} is not a regular file`);
      const tmp = path.join(scratch, 'file');
      const body = gitTry(sb, dir, ['cat-file', 'blob', oid]).stdout;
      fs.writeFileSync(tmp, body);
      const cf = await chunkFile(tmp, { format: 'sha1' });
      if (cf.blob !== oid) throw new Error(`chunkFile names ${p} ${cf.blob}, git ${oid}`);
      const { list, segments } = buildChunkList(cf.chunks, 'sha1');
      for (const c of cf.chunks) {
        if (chunkIds.has(c.oid)) continue;
        chunkIds.add(c.oid);
        items.push({ oid: c.oid, type: 'blob', data: Buffer.from(body.subarray(c.offset, c.offset + c.size)) });
      }
      if (!lists.has(list.oid)) {
        lists.add(list.oid);
        for (const t of [list, ...segments]) items.push({ oid: t.oid, type: 'tree', data: t.data });
      }
      const pointer = serializePointer(pointerOf(cf, list.oid));
      const pointerOid = g(['hash-object', '-w', '--stdin'], pointer).trim();
      files.set(p, { pointer: pointerOid, blob: cf.blob, chunks: cf.chunks.length });
      infoLines.push(`${mode} ${pointerOid}\t${p}`);
    }
    // An empty tree may stand for an empty file's list (it has no entries to pack).
    if (items.length) await writePack(objects, 'sha1', dedupe(items));
    // files/ with the pointers in place of the blobs.
    const env = { GIT_INDEX_FILE: path.join(scratch, 'index') };
    g(['read-tree', filesTree], undefined, env);
    g(['update-index', '-z', '--index-info'], infoLines.map((l) => `${l}\0`).join(''), env);
    const newFiles = g(['write-tree'], undefined, env).trim();
    if (lists.has('4b825dc642cb6eb9a060e54bf8d69288fbee4904')) g(['hash-object', '-w', '-t', 'tree', '/dev/null']);
    const chunksTree = g(['mktree'], [...lists].map((l) => `040000 tree ${l}\t${l}\n`).join('')).trim();
    // The manifest, as a v3 capture writes it.
    const manifest = JSON.parse(g(['cat-file', 'blob', `${snap}:manifest.json`])) as Record<string, unknown> & {
      counts: Record<string, number>;
    };
    manifest.schema = 'xet.snapshot/v3';
    manifest.chunked = [...paths].sort(bytewise);
    manifest.counts.chunkedFiles = paths.length;
    manifest.counts.chunks = chunkIds.size;
    const manifestOid = g(['hash-object', '-w', '--stdin'], canonicalJson(manifest)).trim();
    const top = g(['ls-tree', '-z', snap])
      .split('\0')
      .filter(Boolean)
      .filter((rec) => !/\t(files|manifest\.json|chunks)$/.test(rec))
      .map((rec) => `${rec}\n`);
    top.push(`040000 tree ${newFiles}\tfiles\n`, `100644 blob ${manifestOid}\tmanifest.json\n`);
    top.push(`040000 tree ${chunksTree}\tchunks\n`);
    const tree = g(['mktree'], top.join('')).trim();
    const parents = g(['rev-list', '--parents', '-n', '1', snap]).trim().split(' ').slice(1);
    const message = g(['log', '-1', '--format=%B', snap]).replace(
      /Schema: xet\.snapshot\/v\d+/,
      'Schema: xet.snapshot/v3',
    );
    const commit = g(['commit-tree', tree, ...parents.flatMap((p) => ['-p', p])], message).trim();
    g(['update-ref', `refs/xet/snapshots/${commit}`, commit]);
    if (!opts.keepOld) g(['update-ref', '-d', `refs/xet/snapshots/${snap}`]);
    if (opts.dropWhole) {
      g(['reflog', 'expire', '--expire=now', '--all']);
      g(['gc', '-q', '--prune=now']);
      for (const f of files.values()) {
        const tracked = gitTry(sb, dir, ['cat-file', '-e', f.blob]).status === 0;
        if (tracked && !reachableElsewhere(sb, dir, f.blob)) throw new Error(`${f.blob} survived the prune`);
      }
    }
    return { snapshot: commit, files };
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

/** Whether a blob is still reachable from some ref (a tracked file's committed bytes are). */
function reachableElsewhere(sb: Sandbox, dir: string, oid: string): boolean {
  const all = git(sb, dir, ['rev-list', '--objects', '--all']);
  return all.split('\n').some((l) => l.startsWith(oid));
}

function dedupe(items: PackItem[]): PackItem[] {
  const seen = new Set<string>();
  return items.filter((i) => (seen.has(i.oid) ? false : (seen.add(i.oid), true)));
}

const bytewise = (a: string, b: string): number => Buffer.compare(Buffer.from(a), Buffer.from(b));
