// git xet archive: a snapshot's files as a tar stream (stdout or a file).
import { s } from './schema';
import { EXIT, XetError } from '../errors';
import { emit } from '../cli/output';
import type { Writable } from 'node:stream';
import type { ArchiveResult } from '../snapshot/archive';
import { defineCommand } from './spec';

/** `--format` (`tgz` is `tar.gz`), else from the -o name, else tar. */
const formatOf = (input: { format?: string; output?: string }) =>
  (input.format ?? (/\.(tar\.gz|tgz)$/.test(input.output ?? '') ? 'tar.gz' : 'tar')) as 'tar';

interface ArchiveInput {
  snapshot: string;
  format?: string;
  prefix?: string;
  output?: string;
}

async function writeArchive(input: ArchiveInput, cwd: string, output: string | Writable) {
  const { archive } = await import('../snapshot/archive');
  return archive({
    cwd,
    snapshot: input.snapshot,
    format: formatOf(input),
    prefix: input.prefix,
    output,
  });
}

const describeArchive = (r: ArchiveResult) =>
  `wrote ${r.output} (${r.files} files, ${r.symlinks} symlinks, ${r.dirs} directories)`;

export const archiveCommand = defineCommand({
  path: ['archive'],
  tool: 'archive',
  description: "write a snapshot's files (the worktree as captured, without .git) as a tar archive",
  input: {
    snapshot: s.string().describe('snapshot id'),
    format: s
      .string()
      .optional()
      .describe('tar, tar.gz or tgz (the same as tar.gz); default: from the -o name, else tar'),
    prefix: s.string().optional().describe('put every entry under this directory'),
    output: s.string().optional().describe('write to this file instead of stdout ("-" is stdout)'),
  },
  args: ['snapshot'],
  flags: { format: { value: '<format>' }, prefix: { value: '<dir/>' }, output: { short: 'o', value: '<file>' } },
  paths: { output: 'target' },
  names: ['snapshot'],
  // Replaces an existing file at `output`.
  annotations: { readOnly: false, destructive: true, idempotent: true },
  long: true,
  output: s.looseObject({
    snapshot: s.string(),
    format: s.enum(['tar', 'tar.gz']),
    prefix: s.string(),
    output: s.string().nullable(),
    files: s.number(),
    symlinks: s.number(),
    dirs: s.number(),
    bytes: s.number(),
    mtime: s.string(),
  }),
  // An MCP tool (and --json) writes only to a file: the archive has no place in a JSON answer.
  async run(input, ctx) {
    if (input.output === undefined || input.output === '-') {
      throw new XetError('USAGE', 'archive needs output: a file to write the archive to');
    }
    return writeArchive(input, ctx.cwd, input.output);
  },
  human: describeArchive,
  // The command line also streams the archive to stdout (no -o, or -o -).
  async cliAction(input, ctx, out) {
    const toStdout = input.output === undefined || input.output === '-';
    if (toStdout && out.json) {
      throw new XetError('USAGE', '--json needs -o FILE: the archive itself would go to stdout');
    }
    if (toStdout && process.stdout.isTTY) {
      throw new XetError('USAGE', 'refusing to write a tar archive to a terminal: use -o FILE or a pipe');
    }
    const r = await writeArchive(input, ctx.cwd, toStdout ? process.stdout : (input.output as string));
    if (!toStdout) emit(out, r, () => describeArchive(r));
    return EXIT.OK;
  },
});
