// git xet archive: a snapshot's files as a tar stream (stdout or a file).
import type { Command } from 'commander';
import { XetError } from '../errors';
import { run } from '../cli/run';
import { emit } from '../cli/output';

export function registerArchive(program: Command): void {
  program
    .command('archive')
    .description("write a snapshot's files (the worktree as captured, without .git) as a tar archive")
    .argument('<snapshot>', 'snapshot id')
    .option('--format <format>', 'tar or tar.gz (default: from the -o name, else tar)')
    .option('--prefix <dir/>', 'put every entry under this directory')
    .option('-o, --output <file>', 'write to this file instead of stdout ("-" is stdout)')
    .action(
      run(async (out, snapshot: string, opts: { format?: string; prefix?: string; output?: string }) => {
        const toStdout = opts.output === undefined || opts.output === '-';
        if (toStdout && out.json) {
          throw new XetError('USAGE', '--json needs -o FILE: the archive itself would go to stdout');
        }
        if (toStdout && process.stdout.isTTY) {
          throw new XetError('USAGE', 'refusing to write a tar archive to a terminal: use -o FILE or a pipe');
        }
        const format = opts.format ?? (/\.(tar\.gz|tgz)$/.test(opts.output ?? '') ? 'tar.gz' : 'tar');
        const { archive } = await import('../snapshot/archive');
        const r = await archive({
          cwd: process.cwd(),
          snapshot,
          format: format as 'tar',
          prefix: opts.prefix,
          output: toStdout ? process.stdout : (opts.output as string),
        });
        if (!toStdout) {
          emit(out, r, () => `wrote ${r.output} (${r.files} files, ${r.symlinks} symlinks, ${r.dirs} directories)`);
        }
      }),
    );
}
