//! The uncontended hold of one thread, timed by criterion for any set of
//! contenders: the workspace's core, the `DashMap<String,
//! Arc<parking_lot::Mutex<()>>>` pattern, plain mutexes, and earlier
//! revisions of the core. `benches/hold.rs` runs it on this workspace;
//! `compare_cores.sh` builds a crate of its own around it, with a core per
//! revision ([`core_contender!`]), to put revisions side by side in one run.

use std::env;
use std::hint::black_box;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime};

use criterion::Criterion;
use dashmap::DashMap;

pub mod guard;

/// The keyed pattern holdline is measured against.
pub type DashPl = DashMap<String, Arc<parking_lot::Mutex<()>>>;

/// [`DashPl`]'s name in groups and summaries.
pub const MAP: &str = "dashmap+pl";

/// The pattern's lookup: a shared read of the shard when the key is there,
/// an insert otherwise; the entry stays after the hold.
pub fn dash_get(map: &DashPl, key: &str) -> Arc<parking_lot::Mutex<()>> {
    if let Some(m) = map.get(key) {
        return m.value().clone();
    }
    map.entry(key.to_owned()).or_default().value().clone()
}

/// One thread's uncontended hold, as a contender does it. The loops are
/// the contender's own (one dynamic call per batch of holds), so what is
/// timed is the hold, not the call.
pub trait Contender: Sync {
    /// `n` holds of `keys`, round robin.
    fn hold_round_robin(&self, keys: &[String], n: u64);
    /// `n` tries of `key`, which another thread holds: each must fail.
    fn try_held(&self, key: &str, n: u64);
    /// Holds `key` from `held` until `done`: the other thread of [`Contender::try_held`].
    fn hold_until(&self, key: &str, held: &Barrier, done: &Barrier);
}

/// The next index of a round robin over `len`.
#[inline]
pub fn next_index(j: usize, len: usize) -> usize {
    if j + 1 == len {
        0
    } else {
        j + 1
    }
}

impl Contender for DashPl {
    #[inline(never)]
    fn hold_round_robin(&self, keys: &[String], n: u64) {
        let mut j = 0;
        for _ in 0..n {
            let m = dash_get(self, &keys[j]);
            let _g = m.lock();
            black_box(());
            j = next_index(j, keys.len());
        }
    }
    #[inline(never)]
    fn try_held(&self, key: &str, n: u64) {
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

/// A plain mutex: one lock whatever the key (a floor, not a keyed design).
impl Contender for parking_lot::Mutex<()> {
    #[inline(never)]
    fn hold_round_robin(&self, _keys: &[String], n: u64) {
        for _ in 0..n {
            drop(black_box(self).lock());
        }
    }
    #[inline(never)]
    fn try_held(&self, _key: &str, n: u64) {
        for _ in 0..n {
            assert!(black_box(self).try_lock().is_none());
        }
    }
    fn hold_until(&self, _key: &str, held: &Barrier, done: &Barrier) {
        let _g = self.lock();
        held.wait();
        done.wait();
    }
}

/// As the parking_lot mutex: one lock whatever the key.
impl Contender for std::sync::Mutex<()> {
    #[inline(never)]
    fn hold_round_robin(&self, _keys: &[String], n: u64) {
        for _ in 0..n {
            drop(black_box(self).lock().unwrap());
        }
    }
    #[inline(never)]
    fn try_held(&self, _key: &str, n: u64) {
        for _ in 0..n {
            assert!(black_box(self).try_lock().is_err());
        }
    }
    fn hold_until(&self, _key: &str, held: &Barrier, done: &Barrier) {
        let _g = self.lock().unwrap();
        held.wait();
        done.wait();
    }
}

/// Defines `$name`, a [`Contender`] holding keys through the core crate
/// `$krate`'s `Store` and `Lock` (holdline's API since the first revision
/// `compare_cores.sh` compares).
#[macro_export]
macro_rules! core_contender {
    ($(#[$doc:meta])* $name:ident, $krate:ident) => {
        $(#[$doc])*
        pub struct $name {
            _store: ::$krate::Store,
            lock: ::$krate::Lock,
        }

        impl Default for $name {
            fn default() -> Self {
                let store = ::$krate::Store::new();
                let lock = store.lock("bench").open().expect("open");
                $name { _store: store, lock }
            }
        }

        impl $crate::Contender for $name {
            #[inline(never)]
            fn hold_round_robin(&self, keys: &[String], n: u64) {
                let mut j = 0;
                for _ in 0..n {
                    let held = self.lock.hold(keys[j].as_str(), |_| ::std::hint::black_box(()));
                    held.expect("hold");
                    j = $crate::next_index(j, keys.len());
                }
            }
            #[inline(never)]
            fn try_held(&self, key: &str, n: u64) {
                for _ in 0..n {
                    let tried = self.lock.try_hold(::std::hint::black_box(key), |_| ());
                    assert!(tried.expect("try_hold").is_none());
                }
            }
            fn hold_until(
                &self,
                key: &str,
                held: &::std::sync::Barrier,
                done: &::std::sync::Barrier,
            ) {
                let hold = self.lock.hold(key, |_| {
                    held.wait();
                    done.wait();
                });
                hold.expect("hold");
            }
        }
    };
}

core_contender!(
    /// The workspace's core.
    Holdline,
    holdline
);

/// What one thread does, uncontended: a criterion group each, with a
/// function per contender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Hold and let go of one key.
    OneKey,
    /// Hold 10,000 keys round robin (each made before timing, in the warm-up).
    ManyKeys,
    /// `try_hold` a key another thread holds.
    TryHeld,
}

impl Workload {
    pub const ALL: [Workload; 3] = [Workload::OneKey, Workload::ManyKeys, Workload::TryHeld];

    /// The criterion group's name.
    pub fn group(self) -> &'static str {
        match self {
            Workload::OneKey => "uncontended",
            Workload::ManyKeys => "uncontended-10k-keys",
            Workload::TryHeld => "try-held",
        }
    }

    fn keys(self) -> Vec<String> {
        let n = if self == Workload::ManyKeys {
            10_000
        } else {
            1
        };
        (0..n).map(|i| format!("key-{i}")).collect()
    }

    /// `n` of the workload's operations by `c`, another thread holding the
    /// key for [`Workload::TryHeld`] (set up by the caller).
    fn run(self, c: &dyn Contender, keys: &[String], n: u64) {
        match self {
            Workload::TryHeld => c.try_held(&keys[0], n),
            _ => c.hold_round_robin(keys, n),
        }
    }

    /// Runs `f` while, for [`Workload::TryHeld`], another thread holds
    /// `c`'s key.
    fn beside_holder<R>(self, c: &dyn Contender, key: &str, f: impl FnOnce() -> R) -> R {
        if self != Workload::TryHeld {
            return f();
        }
        let (held, done) = (Barrier::new(2), Barrier::new(2));
        std::thread::scope(|s| {
            s.spawn(|| c.hold_until(key, &held, &done));
            held.wait();
            let r = f();
            done.wait();
            r
        })
    }
}

/// A contender by name, as groups and summaries show it.
pub type Named<'a> = (&'a str, &'a dyn Contender);

/// The settings every group here runs with: short enough for a 2-core
/// machine, `cargo bench -- --quick` shorter still.
pub fn criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
        .configure_from_args()
}

/// A group that ran: its workload and its contenders' names.
pub struct Compared {
    pub workload: Workload,
    pub names: Vec<String>,
}

/// Times every contender on `workload`.
pub fn bench(c: &mut Criterion, workload: Workload, contenders: &[Named]) -> Compared {
    let keys = workload.keys();
    let mut g = c.benchmark_group(workload.group());
    for &(name, contender) in contenders {
        workload.beside_holder(contender, &keys[0], || {
            g.bench_function(name, |b| {
                b.iter_custom(|n| {
                    let started = Instant::now();
                    workload.run(contender, &keys, n);
                    started.elapsed()
                })
            });
        });
    }
    g.finish();
    Compared {
        workload,
        names: contenders.iter().map(|(n, _)| n.to_string()).collect(),
    }
}

/// Where criterion writes its estimates, found as criterion finds it.
fn criterion_dir() -> Option<PathBuf> {
    if let Some(home) = env::var_os("CRITERION_HOME") {
        return Some(home.into());
    }
    if let Some(target) = env::var_os("CARGO_TARGET_DIR") {
        return Some(PathBuf::from(target).join("criterion"));
    }
    let metadata = Command::new(env::var_os("CARGO")?)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .ok()?;
    let metadata: serde_json::Value = serde_json::from_slice(&metadata.stdout).ok()?;
    Some(PathBuf::from(metadata["target_directory"].as_str()?).join("criterion"))
}

/// A function's median time per operation, in ns, from the estimates
/// criterion wrote since `since` (none when it was filtered out or not
/// measured: `--list`, `--test`).
fn median_ns(dir: &std::path::Path, group: &str, name: &str, since: SystemTime) -> Option<f64> {
    let file = dir.join(group).join(name).join("new/estimates.json");
    if std::fs::metadata(&file).ok()?.modified().ok()? < since {
        return None;
    }
    let estimates: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).ok()?).ok()?;
    estimates["median"]["point_estimate"].as_f64()
}

/// Prints each group measured since `since` as a table: every contender's
/// median time per operation and its ratio to [`MAP`]'s (below 1: faster
/// than the map pattern).
pub fn print_against_map(compared: &[Compared], since: SystemTime) {
    let Some(dir) = criterion_dir() else {
        return;
    };
    for Compared { workload, names } in compared {
        let group = workload.group();
        let times: Vec<(&str, f64)> = names
            .iter()
            .filter_map(|n| Some((n.as_str(), median_ns(&dir, group, n, since)?)))
            .collect();
        let map = times.iter().find(|(n, _)| *n == MAP).map(|&(_, t)| t);
        if times.is_empty() {
            continue;
        }
        println!("{group}: median ns per operation; time against {MAP}'s");
        for (name, ns) in &times {
            match map {
                Some(map) if *name != MAP => {
                    println!("  {name:<14} {ns:>7.1} ns  {:.2}x", ns / map)
                }
                _ => println!("  {name:<14} {ns:>7.1} ns"),
            }
        }
    }
}

/// `compare_cores.sh`'s bench: every workload, a function per contender,
/// then the summary against the map.
pub fn compare_main(contenders: &[(&str, Box<dyn Contender>)]) {
    let named: Vec<Named> = contenders.iter().map(|(n, c)| (*n, c.as_ref())).collect();
    let since = SystemTime::now();
    let mut c = criterion();
    let compared: Vec<Compared> = Workload::ALL
        .iter()
        .map(|&w| bench(&mut c, w, &named))
        .collect();
    c.final_summary();
    print_against_map(&compared, since);
}

/// `compare_cores.sh --callgrind`'s program: `GROUP CONTENDER N` runs a
/// warm-up (every key made), then `N` operations of the workload, for
/// callgrind to count; two lengths apart, the difference is `N` holds.
pub fn callgrind_main(contenders: &[(&str, Box<dyn Contender>)]) {
    let args: Vec<String> = env::args().skip(1).collect();
    let [group, name, n] = &args[..] else {
        panic!("usage: GROUP CONTENDER N (got {args:?})");
    };
    let workload = Workload::ALL
        .into_iter()
        .find(|w| w.group() == group)
        .unwrap_or_else(|| panic!("{group}: not a workload"));
    let (_, contender) = contenders
        .iter()
        .find(|(c, _)| c == name)
        .unwrap_or_else(|| panic!("{name}: not a contender"));
    let n: u64 = n.parse().expect("N: a count");
    let keys = workload.keys();
    workload.beside_holder(contender.as_ref(), &keys[0], || {
        workload.run(contender.as_ref(), &keys, keys.len().max(10_000) as u64);
        workload.run(contender.as_ref(), &keys, n);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every contender runs every workload (the macro's code included, on
    /// this workspace's core).
    #[test]
    fn every_contender_runs_every_workload() {
        let (hl, map) = (Holdline::default(), DashPl::default());
        let (pl, std) = (parking_lot::Mutex::new(()), std::sync::Mutex::new(()));
        let contenders: [Named; 4] = [
            ("holdline", &hl),
            (MAP, &map),
            ("parking_lot", &pl),
            ("std", &std),
        ];
        for w in Workload::ALL {
            let keys = w.keys();
            for (_, c) in contenders {
                w.beside_holder(c, &keys[0], || w.run(c, &keys, 20_000));
            }
        }
        assert_eq!(map.len(), 10_000);
    }

    #[test]
    fn round_robin_wraps() {
        assert_eq!(
            (next_index(0, 3), next_index(2, 3), next_index(0, 1)),
            (1, 0, 0)
        );
    }
}
