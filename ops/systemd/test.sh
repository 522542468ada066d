#!/usr/bin/env bash
# Checks ops/systemd/holdline.service: `systemd-analyze verify` finds no
# fault, and `systemd-analyze security --offline=true` scores its exposure
# at most 3.0 (0 is best, 10 worst). Needs no running systemd, only the
# systemd package's systemd-analyze (Debian 12: systemd 252).
#   bash ops/systemd/test.sh [HOLDLINE_BIN]
# verify insists that ExecStart's binary exists: a copy of the unit points
# at HOLDLINE_BIN (default target/release/holdline) instead of
# /usr/local/bin/holdline.
set -euo pipefail
cd "$(dirname "$0")/../.."
unit=ops/systemd/holdline.service
bin=$(realpath "${1:-target/release/holdline}")
limit=3.0
[ -x "$bin" ] || { echo "no binary at $bin: cargo build --release --bin holdline"; exit 1; }
command -v systemd-analyze >/dev/null || { echo "no systemd-analyze: apt-get install systemd"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed "s#/usr/local/bin/holdline#$bin#" "$unit" >"$work/holdline.service"
grep -q "ExecStart=$bin serve" "$work/holdline.service" || { echo "ExecStart not found in $unit"; exit 1; }
# verify prints faults on stderr and may still exit 0 for some: both count.
if ! systemd-analyze verify "$work/holdline.service" >"$work/verify.out" 2>&1 || [ -s "$work/verify.out" ]; then
    echo "systemd-analyze verify $unit:"; cat "$work/verify.out"; exit 1
fi
echo "verify: no faults"

systemd-analyze security --offline=true "$unit" >"$work/security.out" 2>&1 || true
score=$(sed -n 's/.*Overall exposure level for holdline.service: \([0-9.]*\).*/\1/p' "$work/security.out")
[ -n "$score" ] || { echo "no exposure score:"; cat "$work/security.out"; exit 1; }
if awk -v s="$score" -v l="$limit" 'BEGIN { exit !(s > l) }'; then
    grep '✗' "$work/security.out" || true
    echo "exposure $score is over $limit"; exit 1
fi
echo "security: exposure $score (at most $limit)"
