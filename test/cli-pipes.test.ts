// The CLI at the edges of its streams and arguments: a reader that closes the pipe early, and an
// argument that was not UTF-8 on the command line (Node decodes argv lossily).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { test } from 'node:test';
import { initRepo } from './support/git';
import { withSandbox } from './support/sandbox';
import { expectError, XET_BIN, xet } from './support/xet';

test('a reader that closes the pipe at once: the command ends without an internal error or a stack trace', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('c1', { 'a.txt': 'a\n' });
    for (const args of [
      ['task', 'list', '--json'],
      ['snapshots', '--json'],
      ['version', '--json'],
    ]) {
      // `exec 1>&-`-like: the reader (head -c 0) exits before the CLI writes; the CLI's status is
      // what sh reports through `; echo $?` of a pipeline's first command (PIPESTATUS is bash's).
      const res = spawnSync(
        'sh',
        [
          '-c',
          `{ ${JSON.stringify(process.execPath)} ${JSON.stringify(XET_BIN)} "$@" 2>err; echo $? > status; } | head -c 0`,
          'sh',
          ...args,
        ],
        { cwd: r.dir, env: sb.env, encoding: 'utf8' },
      );
      assert.equal(res.status, 0);
      const status = Number(fs.readFileSync(`${r.dir}/status`, 'utf8'));
      const err = fs.readFileSync(`${r.dir}/err`, 'utf8');
      assert.ok(status !== 70, `${args.join(' ')}: not an internal error (exit ${status}, stderr ${err})`);
      assert.doesNotMatch(err, /EPIPE|at .*\.js:\d+/, `${args.join(' ')}: no stack trace`);
    }
  }));

test('handoff create: a correlation id that is not UTF-8 on the command line is USAGE, nothing created', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('c1', { 'a.txt': 'a\n' });
    const snap = JSON.parse(xet(sb, r.dir, ['capture', '--json']).stdout).snapshot as string;
    const wrap = [
      'sh',
      '-c',
      `bad=$(printf '\\355\\240\\200'); for a; do shift; [ "$a" = BAD ] && a=$bad; set -- "$@" "$a"; done; exec "$@"`,
      'sh',
    ];
    const e = expectError(
      xet(sb, r.dir, ['handoff', 'create', snap, '--title', 't', '--correlation-id', 'BAD', '--json'], { wrap }),
      'USAGE',
      2,
    );
    assert.match(e.message, /not valid UTF-8/);
    assert.equal(r.git('for-each-ref', 'refs/xet/handoffs/'), '', 'no handoff ref');
  }));
