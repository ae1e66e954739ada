#!/usr/bin/env bash
# The code's one format (.clang-format, clang-format 14):
#   scripts/format.sh           reformat every tracked C++ file in place
#   scripts/format.sh --check   list the files that differ, exit 1 if any (CI)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
check=0
case "${1:-}" in
    --check) check=1 ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac
. scripts/lib.sh
ensure_packages clang-format-14
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.cpp.in' '*.hpp.in')
if [ "$check" = 0 ]; then
    clang-format-14 -i "${files[@]}"
    exit 0
fi
bad=()
for f in "${files[@]}"; do
    clang-format-14 --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
    printf 'not formatted (scripts/format.sh fixes it):\n' >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
fi
echo "all ${#files[@]} C++ files formatted"
