#!/usr/bin/env bash
# Puts several revisions of the core side by side in one run, beside the
# dashmap + parking_lot pattern: criterion times them (the groups of
# `cargo bench -p holdline-benches --bench hold`: `uncontended`,
# `uncontended-10k-keys`, `try-held`), or callgrind counts their
# instructions per hold:
#
#   benches/compare_cores.sh [--callgrind] REV... [-- CRITERION OPTIONS]
#
# Each REV's core/ (a commit's, through `git archive`) is unpacked under
# $TMPDIR as a crate of its own name (Cargo cannot link two packages both
# named `holdline`), and the working tree's core is added as `now`; a crate
# built there around holdline-benches' library (benches/src/lib.rs) runs
# them. The summary at the end gives each one's median time and its ratio
# to the map's (below 1: faster than the map pattern). What follows `--`
# goes to criterion: `-- --quick`, `-- try-held`, `-- --save-baseline x`.
#
# `--guard` runs the hot paths' guard instead (benches/src/guard.rs): the
# uncontended hold (through a closure and through a guard; plain, and
# with maxHold 120 s on 1 and 2 threads of keys of their own; a handle
# lease with ttl 10 s, acquired and released, on 1 and 2 threads of keys
# of their own), a try of a held key, one hot key on 4
# and 8 threads (more than the cores), the async hot key at 4 and 64
# tasks, a semaphore of 2 permits under 8 tasks, a read-mostly key and
# read-write tasks (16 on 4 keys, against tokio's RwLock), the read-mostly
# keys on 8 threads too, and the hot key (4, 8 threads) and the
# read-mostly keys (8 threads) through a lock with bounded bypass,
# each REV's core, the working tree's and the anchors alternating in one
# process, printed as rates and as now's ratio to each with its spread
# (GUARD_ROUNDS, default 5; GUARD_MS a row, default 300; GUARD_ROWS, a
# comma list of row names). A REV older than permits has no permits rows,
# one older than guards no guard row.
#
#   benches/compare_cores.sh --guard HEAD~1
#
# `--callgrind` counts instructions per hold on the measuring thread
# (valgrind's callgrind: the difference between two run lengths, so set-up
# is not counted), for `uncontended` and `try-held`; not for 10,000 keys,
# as the store's sweeps make that count depend on timing.
#
# Example (how a change to the hot path is confirmed against the commit
# before it):
#   benches/compare_cores.sh HEAD~1
#   benches/compare_cores.sh --callgrind HEAD~1
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
callgrind=0 guard=0 revs=() criterion_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --callgrind) callgrind=1 ;;
        --guard) guard=1 ;;
        --) shift; criterion_args=("$@"); break ;;
        --rounds|--holds)
            echo "compare_cores.sh: $1 was the old timing loop's; criterion sizes its samples now:" \
                "pass its options after --, e.g. -- --quick, or -- --sample-size 10 --measurement-time 1" >&2
            exit 2 ;;
        -*) echo "compare_cores.sh: unknown option $1 (criterion's go after --)" >&2; exit 2 ;;
        *) revs+=("$1") ;;
    esac
    shift
done
work=${TMPDIR:-/tmp}/holdline-compare
rm -rf "$work/cores" "$work/src" "$work/benches"
mkdir -p "$work/cores" "$work/src" "$work/benches"

names=() deps="" contenders="" guards=""
for rev in "${revs[@]}"; do
    name="r_$(git rev-parse --short "$rev")"
    git archive "$rev" core | tar -x -C "$work/cores"
    mv "$work/cores/core" "$work/cores/$name"
    rm -rf "$work/cores/$name/tests" "$work/cores/$name/examples" "$work/cores/$name/benches"
    # A crate of its own: its own name, no workspace inheritance, no
    # dev-dependencies, and no warning for the workspace's cfgs.
    sed -i -e "s/^name = \"holdline\"/name = \"holdline_$name\"/" \
        -e 's/^edition.workspace = true/edition = "2021"/' \
        -e '/rust-version.workspace/d' -e '/license.workspace/d' \
        -e '/repository.workspace/d' -e '/homepage.workspace/d' \
        -e '/^\[lints\]/,$d' "$work/cores/$name/Cargo.toml"
    sed -i '/^\[dev-dependencies\]/,/^$/d' "$work/cores/$name/Cargo.toml"
    printf '\n[lints.rust]\nunexpected_cfgs = "allow"\n' >> "$work/cores/$name/Cargo.toml"
    names+=("$name")
    deps+="$name = { package = \"holdline_$name\", path = \"cores/$name\" }"$'\n'
    contenders+="holdline_benches::core_contender!(C_$name, $name);"$'\n'
    # The permits rows need `LockBuilder::permits` (since 02c3cd7).
    # (Read whole, then searched: `grep -q` quitting early would fail
    # the pipe under pipefail and hide the rows.)
    # (`KeyHold::permits` is in core/src/lock/key_hold.rs since lock.rs
    # was split by concept.)
    lock_rs=$(git show "$rev:core/src/lock.rs" 2>/dev/null ||
        git show "$rev:core/src/lock/key_hold.rs")
    # The guard row needs `Lock::lock` (core/src/guard.rs, since 9288050);
    # a revision without that file answers None for it.
    guard_rs=$(git show "$rev:core/src/guard.rs" 2>/dev/null || true)
    # The bypass rows need `LockBuilder::fairness` (core/src/store.rs,
    # since d4f847b).
    store_rs=$(git show "$rev:core/src/store.rs" 2>/dev/null || true)
    if grep -q 'pub fn fairness' <<<"$store_rs"; then
        guards+="holdline_benches::guard_core!(G_$name, $name, permits, guard, bypass);"$'\n'
    elif grep -q 'pub fn lock<' <<<"$guard_rs"; then
        guards+="holdline_benches::guard_core!(G_$name, $name, permits, guard);"$'\n'
    elif grep -q 'pub fn permits' <<<"$lock_rs"; then
        guards+="holdline_benches::guard_core!(G_$name, $name, permits);"$'\n'
    else
        guards+="holdline_benches::guard_core!(G_$name, $name);"$'\n'
    fi
done

cat > "$work/Cargo.toml" <<EOF
[package]
name = "holdline-compare"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
holdline-benches = { path = "$root/benches" }
${deps}
[[bench]]
name = "compare"
harness = false

[profile.release]
debug = 1

[profile.bench]
debug = 1

[workspace]
EOF
# The workspace's versions of everything (and no registry look-up for them).
cp "$root/Cargo.lock" "$work/Cargo.lock"

{
    echo "//! The revisions compared, the working tree's core (\`now\`) and the map."
    echo "#![allow(non_camel_case_types)] // C_r_<commit>: the revision's name as it is"
    echo "use holdline_benches::{Contender, DashPl, Holdline, MAP};"
    echo "$contenders"
    echo "pub fn contenders() -> Vec<(&'static str, Box<dyn Contender>)> {"
    echo "    vec!["
    for n in "${names[@]}"; do echo "        (\"$n\", Box::new(C_$n::default())),"; done
    echo "        (\"now\", Box::new(Holdline::default())),"
    echo "        (MAP, Box::new(DashPl::default())),"
    echo "    ]"
    echo "}"
    echo "$guards"
    echo "pub fn guards() -> Vec<(&'static str, Box<dyn holdline_benches::guard::GuardDesign>)> {"
    echo "    vec!["
    for n in "${names[@]}"; do echo "        (\"$n\", Box::new(G_$n::default())),"; done
    echo "        (\"now\", Box::new(holdline_benches::guard::HoldlineGuard::default())),"
    echo "    ]"
    echo "}"
} > "$work/src/lib.rs"
mkdir -p "$work/src/bin"
echo 'fn main() { holdline_benches::guard::guard_main(&holdline_compare::guards()) }' > "$work/src/bin/guard.rs"
echo 'fn main() { holdline_benches::callgrind_main(&holdline_compare::contenders()) }' > "$work/src/main.rs"
echo 'fn main() { holdline_benches::compare_main(&holdline_compare::contenders()) }' > "$work/benches/compare.rs"
names+=("now" "dashmap+pl")

export CARGO_TARGET_DIR="$work/target"
if [ "$guard" = 1 ]; then
    cargo build --release --quiet --manifest-path "$work/Cargo.toml" --bin guard
    "$work/target/release/guard"
elif [ "$callgrind" = 1 ]; then
    cargo build --release --quiet --manifest-path "$work/Cargo.toml"
    bin="$work/target/release/holdline-compare"
    ir() { # instructions on the measuring thread: workload $1, contender $2, $3 operations
        local out; out=$(mktemp -d)
        valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$out/cg" "$bin" "$1" "$2" "$3" >/dev/null 2>&1
        grep -h "^totals:\|^summary:" "$out/cg-01" | head -1 | awk '{print $2}'
        rm -rf "$out"
    }
    echo "instructions per operation (callgrind, the measuring thread; 400,000 - 200,000 operations)"
    for w in uncontended try-held; do
        for d in "${names[@]}"; do
            a=$(ir "$w" "$d" 200000); b=$(ir "$w" "$d" 400000)
            printf '  %-12s %-12s %d\n' "$w" "$d" $(( (b - a) / 200000 ))
        done
    done
else
    cargo bench --quiet --manifest-path "$work/Cargo.toml" --bench compare -- "${criterion_args[@]}"
fi
