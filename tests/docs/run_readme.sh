#!/usr/bin/env bash
# The README's shell commands, in order, as a newcomer runs them on a fresh
# clone (scripts/test.sh runs this after the plain build's tests, in the tree it
# built): every command line of README.md's ```sh blocks (its usage lines,
# `distlock SUB [options]`, are not commands: docs.commands checks them), with
# three substitutions, each said as it is made:
#   scripts/test.sh   skipped: it is what runs this;
#   scripts/demo.sh   with DISTLOCK_DEMO_TOOL=build/bin/distlock, the tool
#                     test.sh built, in place of its own build of the same
#                     target in build-demo/ (two minutes of CI);
#   --prefix DIR      a temporary directory.
# Then the installed tool runs a command under a lock. Exit 1 at the first
# command that fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
[ -x build/bin/distlock ] || { echo "run_readme: no build/bin/distlock: build the tree first" >&2; exit 1; }
work=$(mktemp -d /tmp/distlock-readme.XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 - README.md > "$work/commands" <<'EOF'
import sys
sys.path.insert(0, "tests/docs")
from check_commands import blocks
for _, command in blocks(sys.argv[1]):
    if not command.startswith("distlock "):  # usage lines
        print(command)
EOF
[ -s "$work/commands" ] || { echo "run_readme: no command found in README.md's shell blocks" >&2; exit 1; }
n=0
while IFS= read -r line; do
    case "$line" in
        scripts/test.sh*) echo "[readme] skipped (it is what runs this): $line"; continue ;;
        scripts/demo.sh*) echo "[readme] $line   (DISTLOCK_DEMO_TOOL=build/bin/distlock)"
            DISTLOCK_DEMO_TOOL=$PWD/build/bin/distlock bash -c "$line" </dev/null ;;
        *) line=$(sed -E "s#--prefix +[^ ]+#--prefix $work/prefix#" <<<"$line")
            echo "[readme] $line"
            bash -c "$line" </dev/null ;;
    esac
    n=$((n + 1))
done < "$work/commands"
[ -x "$work/prefix/bin/distlock" ] || { echo "run_readme: the README's install left no bin/distlock in the prefix" >&2; exit 1; }
"$work/prefix/bin/distlock" --version
"$work/prefix/bin/distlock" run --backend "file://$work/locks" --name readme -- sh -c 'echo "token $DISTLOCK_FENCING_TOKEN"'
echo "[readme] $n command(s) of README.md run; the installed tool took a lock"
