//! The uncontended hold against the map pattern, in one process: holdline
//! and `DashMap<String, Arc<parking_lot::Mutex<()>>>` take turns, round by
//! round, on one thread, over one hot key and over 10,000 keys round robin.
//! Each round gives one ratio (holdline's time per hold over the map's), so
//! the machine's noise hits both sides of a ratio alike; the table shows
//! the median ratio with the rounds' range, beside the ratios recorded with
//! README's numbers. A regression of a quarter or more is called out in
//! words. It is printed, never a failed run: whether a difference is noise
//! is for a reader to judge.

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Instant;

use crate::designs::{DashPl, Holdline, KeyedLock};

/// One workload of the check.
struct Case {
    name: &'static str,
    keys: usize,
    /// The ratio recorded with README's numbers: the median of six runs'
    /// medians, and the lowest and highest of them (this check, full
    /// length, on the 2-vCPU machine, at commit 4f1a046).
    recorded: (f64, f64, f64),
}

const CASES: [Case; 2] = [
    Case {
        name: "one hot key",
        keys: 1,
        recorded: (0.55, 0.46, 0.57),
    },
    Case {
        name: "10,000 keys",
        keys: 10_000,
        recorded: (0.59, 0.52, 0.78),
    },
];

/// The core before the lease and async work (commit 0e09196), each of its
/// rounds timed beside the map pattern (`benches/compare_cores.sh
/// 0e09196`, medians of three runs): its time over the map's.
const PREVIOUS_CORE: [f64; 2] = [0.78, 0.87];

/// How far above the recorded median a ratio is called out.
const CALL_OUT: f64 = 1.25;

/// `n` holds of `keys` round robin; answers ns per hold.
fn time_holds<D: KeyedLock>(d: &D, keys: &[String], n: usize) -> f64 {
    let started = Instant::now();
    let mut j = 0;
    for _ in 0..n {
        d.hold(&keys[j], || black_box(()));
        j += 1;
        if j == keys.len() {
            j = 0;
        }
    }
    started.elapsed().as_nanos() as f64 / n as f64
}

/// The median and range of `v`.
fn spread(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// One case measured: ns per hold of each side (medians over rounds) and
/// holdline's time over the map's, round by round.
#[derive(Clone, Debug)]
pub struct Measured {
    pub name: &'static str,
    pub holdline_ns: f64,
    pub map_ns: f64,
    /// Median, lowest and highest of the rounds' ratios.
    pub ratio: (f64, f64, f64),
}

/// The map design the check holds holdline against.
pub const MAP: &str = "dashmap+pl";

/// `rounds` alternating rounds of `holds` holds per design and case.
pub fn measure(rounds: usize, holds: usize) -> Vec<Measured> {
    CASES
        .iter()
        .map(|case| {
            let keys: Vec<String> = (0..case.keys).map(|i| format!("key-{i}")).collect();
            let (hl, map) = (Holdline::new(), DashPl::new());
            // Every key made once before timing, in both.
            time_holds(&hl, &keys, keys.len());
            time_holds(&map, &keys, keys.len());
            let (mut ratios, mut hl_ns, mut map_ns) = (Vec::new(), Vec::new(), Vec::new());
            for round in 0..rounds {
                // Alternate which goes first, so neither always follows the other.
                let (h, m) = if round % 2 == 0 {
                    let h = time_holds(&hl, &keys, holds);
                    (h, time_holds(&map, &keys, holds))
                } else {
                    let m = time_holds(&map, &keys, holds);
                    (time_holds(&hl, &keys, holds), m)
                };
                ratios.push(h / m);
                hl_ns.push(h);
                map_ns.push(m);
            }
            Measured {
                name: case.name,
                holdline_ns: spread(&mut hl_ns).0,
                map_ns: spread(&mut map_ns).0,
                ratio: spread(&mut ratios),
            }
        })
        .collect()
}

/// The check's text: each case beside its recorded ratio, a regression
/// called out.
pub fn report(rounds: usize, holds: usize, measured: &[Measured]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n== hot path: one thread, {rounds} alternating rounds of {holds} holds; \
         time per hold, holdline / {MAP} (median, min-max over rounds)"
    );
    for ((case, previous), m) in CASES.iter().zip(PREVIOUS_CORE).zip(measured) {
        let (r, lo, hi) = m.ratio;
        let (rec, rec_lo, rec_hi) = case.recorded;
        let _ = writeln!(
            out,
            "  {:<12} holdline {:>5.1} ns  {MAP} {:>5.1} ns  {r:.2}x ({lo:.2}-{hi:.2})  \
             recorded {rec:.2}x ({rec_lo:.2}-{rec_hi:.2}); the core at 0e09196: {previous:.2}x",
            case.name, m.holdline_ns, m.map_ns,
        );
        if r > rec * CALL_OUT {
            let _ = writeln!(
                out,
                "  {:<12} SLOWER: {:.0}% above the recorded ratio (a regression, or a noisy machine: run it again)",
                "",
                (r / rec - 1.0) * 100.0
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_prints_a_ratio_per_case() {
        let text = report(3, 2_000, &measure(3, 2_000));
        assert!(text.contains("== hot path"), "{text}");
        for case in &CASES {
            assert!(text.contains(case.name), "{text}");
        }
        assert_eq!(
            text.matches("the core at 0e09196").count(),
            CASES.len(),
            "{text}"
        );
    }

    #[test]
    fn spread_is_median_min_max() {
        assert_eq!(spread(&mut [3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
    }
}
