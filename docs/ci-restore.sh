#!/bin/sh
# Restore a git xet snapshot by id from the repository's own remote, check it, and run the tests in it.
# The producer published it first:  git push origin "refs/xet/snapshots/$ID"   (or: git xet push origin $ID)
#
# Usage: ci-restore.sh <remote-url> <snapshot-id> <dir> <test command>...
# Needs git and git xet on PATH (npm install --global git-xet); nothing else of the producer's machine.
# This file is quoted by README.md and run as it is by the test suite (test/ux.test.ts).
set -eu
url=$1
id=$2
dir=$3
shift 3

git xet restore "$id" "$dir" --from "$url"
cd "$dir"
# The copy is the snapshot, byte for byte: HEAD, index, untracked and ignored files (node_modules, builds).
git xet verify "$id" .
"$@"
