#!/usr/bin/env bash
# A flamegraph of `holdline serve` under the harness's paced row (16
# connections offering 1,600 hold + release pairs a second in all): the
# harness runs the row, `perf record -a -g` samples the whole machine
# meanwhile, and the server's connection threads (holdline-core-N) are
# drawn with inferno. Needs perf (Debian: linux-perf) and inferno
# (`cargo install inferno`); run as root or with perf_event_paranoid <= 1.
#
#   flamegraphs/server-paced.sh [BIN] [NAME]
#
# BIN defaults to target/release/holdline (built first); NAME (default
# `now`) names flamegraphs/server-paced-NAME.svg and NAME.txt: the
# hottest leaf functions, user and kernel, with their share of the
# server's samples. The harness's own table (with syscalls/op from
# strace -c and ctx switches/op) is copied to NAME.row.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
name=${2:-now}
if [ -z "$bin" ]; then
    cargo build --release --bin holdline
    bin=target/release/holdline
fi
for tool in perf inferno-collapse-perf inferno-flamegraph; do
    command -v "$tool" >/dev/null || { echo "server-paced.sh: $tool is missing" >&2; exit 1; }
done
cargo build --release -p harness
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
HOLDLINE_BIN=$bin target/release/harness --scenario server-paced --runs 3 --no-plots \
    --out "$work/harness" >"$work/row.txt" 2>&1 &
harness=$!
# The holdline row runs first: sample while it does.
sleep 3
perf record -F 999 -g -a -o "$work/perf.data" -- sleep 20 >/dev/null 2>&1
wait "$harness"
perf script -i "$work/perf.data" --comms holdline-core-0,holdline-core-1,holdline-core-2,holdline-core-3 \
    2>/dev/null >"$work/stacks.txt"
# --all marks kernel frames `_[k]`, for the split below.
# The row's second window runs the server under strace -c (its syscalls/op):
# stacks stopped for the tracer are the tracer's cost, not the server's.
inferno-collapse-perf --all "$work/stacks.txt" | grep -v -e ptrace -e syscall_trace -e syscall_exit_work \
    >"$work/folded.txt"
inferno-flamegraph --title "holdline serve, paced row ($name)" "$work/folded.txt" \
    >"flamegraphs/server-paced-$name.svg"
{
    echo "# holdline serve under the paced row ($name): leaf functions by share of the server's samples"
    # perf's cpu-clock samples are counted by their period, in ns.
    awk '{n=$NF+0; if ($0 ~ /_\[k\] [0-9]+$/) k+=n; t+=n}
         END {printf "# %.0f ms of CPU sampled, %.1f%% of it in the kernel\n", t/1e6, 100*k/t}' \
        "$work/folded.txt"
    awk '{n=$NF; $NF=""; k=split($0, f, ";"); leaf=f[k]; sub(/ +$/, "", leaf); s[leaf]+=n; t+=n}
         END {for (l in s) printf "%6.2f%%  %s\n", 100*s[l]/t, l}' "$work/folded.txt" |
        sort -rn | head -40
} >"flamegraphs/server-paced-$name.txt"
grep -A30 '^== server-paced' "$work/row.txt" >"flamegraphs/server-paced-$name.row.txt" || true
echo "wrote flamegraphs/server-paced-$name.svg, .txt and .row.txt"
