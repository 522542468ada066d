#!/usr/bin/env bash
# Times the uncontended hold of several versions of the core side by side,
# in one process, against the dashmap + parking_lot pattern:
#
#   benches/compare_cores.sh [--callgrind] [--rounds N] [--holds N] REV...
#
# Each REV's core/ (a commit's, through `git archive`) is unpacked under
# $TMPDIR as a crate of its own name (Cargo cannot link two packages both
# named `holdline`), and the working tree's core is added as `now`.
# Three workloads, on one thread: `hot` (one key), `many` (10,000 keys round
# robin), `try` (try_hold of a key another thread holds). Every round runs
# every design once, in a rotating order, each right beside a run of the
# map, and takes its ratio to that neighbouring run, so a noisy moment
# touches both sides of a ratio alike; the table shows each design's median
# time and median ratio with the rounds' min-max. `--callgrind` instead counts instructions per hold on
# the measuring thread (valgrind's callgrind: the difference between two
# run lengths, so set-up is not counted); `many` is not counted, as the
# store's sweeps make its count depend on timing.
#
# Example (the numbers in README.md):
#   benches/compare_cores.sh 0e09196 c99d736
#   benches/compare_cores.sh --callgrind 0e09196 c99d736
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
callgrind=0 rounds=15 holds=400000 revs=()
while [ $# -gt 0 ]; do
    case "$1" in
        --callgrind) callgrind=1 ;;
        --rounds) rounds=$2; shift ;;
        --holds) holds=$2; shift ;;
        *) revs+=("$1") ;;
    esac
    shift
done
work=${TMPDIR:-/tmp}/holdline-compare
mkdir -p "$work/cores" "$work/src"

names=() deps=""
for rev in "${revs[@]}"; do
    name="r_$(git rev-parse --short "$rev")"
    rm -rf "$work/cores/$name" "$work/cores/core"
    git archive "$rev" core | tar -x -C "$work/cores"
    mv "$work/cores/core" "$work/cores/$name"
    rm -rf "$work/cores/$name/tests" "$work/cores/$name/examples" "$work/cores/$name/benches"
    # A crate of its own: its own name, no workspace inheritance, no dev-deps.
    sed -i -e "s/^name = \"holdline\"/name = \"holdline_$name\"/" \
        -e 's/^edition.workspace = true/edition = "2021"/' \
        -e '/rust-version.workspace/d' -e '/license.workspace/d' \
        -e '/^\[lints\]/,$d' "$work/cores/$name/Cargo.toml"
    sed -i '/^\[dev-dependencies\]/,/^$/d' "$work/cores/$name/Cargo.toml"
    names+=("$name")
    deps+="$name = { package = \"holdline_$name\", path = \"cores/$name\" }"$'\n'
done
names+=("now")
deps+="now = { package = \"holdline\", path = \"$root/core\" }"$'\n'

cat > "$work/Cargo.toml" <<EOF
[package]
name = "holdline-compare"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
${deps}parking_lot = "0.12"
dashmap = "6"

[profile.release]
debug = 1

[lints.rust]
unexpected_cfgs = "allow"

[workspace]
EOF

{
    cat <<'EOF'
use dashmap::DashMap;
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::Instant;

type Dash = DashMap<String, Arc<parking_lot::Mutex<()>>>;

fn dash_get(map: &Dash, key: &str) -> Arc<parking_lot::Mutex<()>> {
    if let Some(m) = map.get(key) {
        return m.value().clone();
    }
    map.entry(key.to_owned()).or_default().value().clone()
}

/// One design under test: `run` holds `n` keys of `keys` round robin,
/// `tries` tries `key` (held elsewhere) `n` times, `hold_until` holds `key`
/// between two barrier waits.
trait Design: Sync {
    fn run(&self, keys: &[String], n: usize);
    fn tries(&self, key: &str, n: usize);
    fn hold_until(&self, key: &str, held: &Barrier, done: &Barrier);
}

impl Design for Dash {
    #[inline(never)]
    fn run(&self, keys: &[String], n: usize) {
        let mut j = 0;
        for _ in 0..n {
            let m = dash_get(self, &keys[j]);
            let _g = m.lock();
            black_box(());
            j += 1;
                        if j == keys.len() {
                            j = 0;
                        }
        }
    }
    #[inline(never)]
    fn tries(&self, key: &str, n: usize) {
        for _ in 0..n {
            assert!(dash_get(self, black_box(key)).try_lock().is_none());
        }
    }
    fn hold_until(&self, key: &str, held: &Barrier, done: &Barrier) {
        let m = dash_get(self, key);
        let _g = m.lock();
        held.wait();
        done.wait();
    }
}

macro_rules! core_design {
    ($m:ident, $krate:ident) => {
        mod $m {
            use std::hint::black_box;
            pub struct D(pub ::$krate::Store, pub ::$krate::Lock);
            pub fn new() -> D {
                let store = ::$krate::Store::new();
                let lock = store.lock("bench").open().unwrap();
                D(store, lock)
            }
            impl super::Design for D {
                #[inline(never)]
                fn run(&self, keys: &[String], n: usize) {
                    let mut j = 0;
                    for _ in 0..n {
                        self.1.hold(keys[j].as_str(), |_| black_box(())).unwrap();
                        j += 1;
                        if j == keys.len() {
                            j = 0;
                        }
                    }
                }
                #[inline(never)]
                fn tries(&self, key: &str, n: usize) {
                    for _ in 0..n {
                        assert!(self.1.try_hold(black_box(key), |_| ()).unwrap().is_none());
                    }
                }
                fn hold_until(&self, key: &str, held: &std::sync::Barrier, done: &std::sync::Barrier) {
                    self.1.hold(key, |_| { held.wait(); done.wait(); }).unwrap();
                }
            }
        }
    };
}
EOF
    for n in "${names[@]}"; do echo "core_design!(d_$n, $n);"; done
    echo
    echo "fn designs() -> Vec<(&'static str, Box<dyn Design>)> {"
    echo "    vec!["
    for n in "${names[@]}"; do echo "        (\"$n\", Box::new(d_$n::new())),"; done
    echo "        (\"dashmap+pl\", Box::new(Dash::default())),"
    echo "    ]"
    echo "}"
    cat <<'EOF'

fn spread(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let workload = args[1].as_str();
    let rounds: usize = args[2].parse().unwrap();
    let n: usize = args[3].parse().unwrap();
    // With a fifth argument, only that design runs (callgrind).
    let only = args.get(4).cloned();
    let keys: Vec<String> = match workload {
        "many" => (0..10_000).map(|i| format!("key-{i}")).collect(),
        _ => vec!["key-0".to_owned()],
    };
    let designs = designs();
    let holders = designs.len() + 1;
    let (held, done) = (Barrier::new(holders), Barrier::new(holders));
    std::thread::scope(|s| {
        if workload == "try" {
            for (_, d) in &designs {
                let (k, held, done) = (&keys[0], &held, &done);
                s.spawn(move || d.hold_until(k, held, done));
            }
            held.wait();
        }
        let time = |d: &dyn Design, n: usize| -> f64 {
            let t = Instant::now();
            if workload == "try" { d.tries(&keys[0], n) } else { d.run(&keys, n) }
            t.elapsed().as_nanos() as f64 / n as f64
        };
        if let Some(only) = &only {
            let (_, d) = designs.iter().find(|(name, _)| name == only).expect("a design");
            time(d.as_ref(), keys.len().max(10_000));
            time(d.as_ref(), n);
        } else {
            for (_, d) in &designs {
                time(d.as_ref(), keys.len().max(n / 4));
            }
            // Each design is timed right beside the map (in alternating
            // order), and its ratio is taken to that neighbouring run: the
            // machine's noise touches both sides of a ratio alike.
            let k = designs.len() - 1;
            let map = designs[k].1.as_ref();
            let (mut ns, mut ratios) = (vec![Vec::new(); k + 1], vec![Vec::new(); k]);
            for r in 0..rounds {
                for i in 0..k {
                    let i = (i + r) % k;
                    let d = designs[i].1.as_ref();
                    let (t, m) = if r % 2 == 0 {
                        let t = time(d, n);
                        (t, time(map, n))
                    } else {
                        let m = time(map, n);
                        (time(d, n), m)
                    };
                    ns[i].push(t);
                    ns[k].push(m);
                    ratios[i].push(t / m);
                }
            }
            println!("{workload}: {rounds} rounds of {n} holds (ns per hold, median and min-max; ratio to dashmap+pl timed beside it)");
            for (i, (name, _)) in designs.iter().enumerate() {
                let (t, tlo, thi) = spread(&mut ns[i]);
                if i == k {
                    println!("  {name:<12} {t:>6.1} ns ({tlo:.1}-{thi:.1})");
                    continue;
                }
                let (r, lo, hi) = spread(&mut ratios[i]);
                println!("  {name:<12} {t:>6.1} ns ({tlo:.1}-{thi:.1})  {r:.2}x ({lo:.2}-{hi:.2})");
            }
        }
        if workload == "try" {
            done.wait();
        }
    });
}
EOF
} > "$work/src/main.rs"

CARGO_TARGET_DIR="$work/target" cargo build --release --quiet --manifest-path "$work/Cargo.toml" 2>/dev/null
bin="$work/target/release/holdline-compare"

if [ "$callgrind" = 1 ]; then
    ir() { # instructions on the measuring thread for N holds of design D in workload W
        local out; out=$(mktemp -d)
        valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$out/cg" "$bin" "$1" 1 "$3" "$2" >/dev/null 2>&1
        grep -h "^totals:\|^summary:" "$out/cg-01" | head -1 | awk '{print $2}'
        rm -rf "$out"
    }
    echo "instructions per hold (callgrind, the measuring thread; 400,000 - 200,000 holds)"
    for w in hot try; do
        for d in "${names[@]}" dashmap+pl; do
            a=$(ir "$w" "$d" 200000); b=$(ir "$w" "$d" 400000)
            printf '  %-4s %-12s %d\n' "$w" "$d" $(( (b - a) / 200000 ))
        done
    done
else
    for w in hot many try; do "$bin" "$w" "$rounds" "$holds"; done
fi
