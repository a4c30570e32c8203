// git xet capture: snapshot the whole working tree.
import type { Command } from 'commander';
import { run } from '../run';
import { chatty, emit, formatBytes, progressLine } from '../output';

const collect = (v: string, prev: string[]) => [...prev, v];

export function registerCapture(program: Command): void {
  program
    .command('capture')
    .description('capture HEAD, refs, index, unstaged edits, untracked and ignored files as a snapshot')
    .option('-m, --message <msg>', 'a message stored with the snapshot')
    .option('--ignored <policy>', 'ignored files: all | none (default: xet.capture.ignored, else all)')
    .option(
      '--include <pattern>',
      'also capture matching ignored or secret files (gitignore syntax; repeatable)',
      collect,
      [],
    )
    .option('--exclude <pattern>', 'leave out matching untracked or ignored files (repeatable)', collect, [])
    .option('--always', "make a new snapshot even when nothing changed since this worktree's last one")
    .action(
      run(
        async (
          out,
          opts: { message?: string; ignored?: string; include: string[]; exclude: string[]; always?: boolean },
        ) => {
          const { capture } = await import('../../snapshot/capture');
          const r = await capture({ cwd: process.cwd(), ...opts, progress: progressLine(out) });
          emit(out, r, () => {
            const lines = [r.snapshot];
            if (chatty(out)) {
              if (r.unchanged)
                process.stderr.write(
                  `unchanged since snapshot ${r.snapshot.slice(0, 12)} (--always makes a new one)\n`,
                );
              process.stderr.write(
                `captured ${r.files} files (${formatBytes(r.bytes)}): ${r.tracked} tracked, ${r.untracked} untracked, ${r.ignored} ignored${r.incremental ? ' [incremental]' : ''}\n`,
              );
              if (r.excludedSecrets.length)
                process.stderr.write(
                  `left out ${r.excludedSecrets.length} secret file(s): ${r.excludedSecrets.slice(0, 5).join(', ')}\n`,
                );
              if (r.skipped.length)
                process.stderr.write(
                  `skipped ${r.skipped.length} special file(s): ${r.skipped
                    .slice(0, 5)
                    .map((s) => `${s.path} (${s.reason})`)
                    .join(', ')}\n`,
                );
              if (r.repositories.length)
                process.stderr.write(
                  `captured ${r.repositories.length} inner repositories: ${r.repositories
                    .slice(0, 5)
                    .map((x) => `${x.path} (${x.kind}, ${x.files} files)`)
                    .join(', ')}\n`,
                );
            }
            return lines.join('\n');
          });
        },
      ),
    );
}
