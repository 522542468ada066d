#!/usr/bin/env bash
# Runs every shell block of the guide marked runnable, as written, from the
# repository root, each in a bash of its own with `set -euo pipefail`; fails
# on the first block that fails. A block is marked by the line
# `<!-- runnable -->` right before its ```sh fence (mdBook shows nothing for
# the marker). Mark only blocks that are fast and safe on a fresh CI machine.
#
#   bash docs/run-shell-blocks.sh            # every chapter of docs/src
#   bash docs/run-shell-blocks.sh FILE.md... # only these
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then set -- docs/src/*.md; fi
blocks=$(mktemp -d)
trap 'rm -rf "$blocks"' EXIT
# Each marked block becomes $blocks/N.sh, with a first line naming where it came from.
awk -v dir="$blocks" '
    FNR == 1 { marked = 0; inblock = 0 }
    inblock && /^```[[:space:]]*$/ { inblock = 0; close(out); next }
    inblock { print > out; next }
    /^<!-- runnable -->[[:space:]]*$/ { marked = 1; next }
    marked && /^```(sh|bash)[[:space:]]*$/ {
        n++; out = sprintf("%s/%03d.sh", dir, n); inblock = 1; marked = 0
        printf "# %s:%d\n", FILENAME, FNR > out; next
    }
    { marked = 0 }
' "$@"
count=0
for block in "$blocks"/*.sh; do
    [ -e "$block" ] || continue
    count=$((count + 1))
    printf '\n--- %s\n' "$(head -1 "$block" | cut -c3-)"
    sed 1d "$block"
    printf -- '---\n'
    if ! timeout 1800 bash -euo pipefail "$block"; then
        echo "run-shell-blocks: the block at $(head -1 "$block" | cut -c3-) failed" >&2
        exit 1
    fi
done
[ "$count" -gt 0 ] || { echo "run-shell-blocks: no runnable block found" >&2; exit 1; }
echo "run-shell-blocks: $count blocks ran"
