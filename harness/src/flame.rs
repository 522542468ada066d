//! `harness flamegraph`: profiles holdline's uncontended and hot-key paths
//! with pprof (SIGPROF sampling) and writes `flamegraphs/uncontended.svg`
//! and `flamegraphs/hot-key.svg`, plus `flamegraphs/fresh-key.svg` (a key
//! created, held once and forgotten). `--design NAME` profiles a peer instead
//! (files then carry its name).

use std::fs::File;
use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use crate::cli::FlameArgs;
use crate::designs::{Design, KeyedLock};
use crate::{for_design, workspace_path};

type Res = Result<(), Box<dyn std::error::Error>>;

fn workload<D: KeyedLock>(scenario: &str, threads: usize, dur: Duration) {
    let d = D::default();
    let keys: Vec<Vec<String>> = (0..threads)
        .map(|t| match scenario {
            "uncontended" => (0..crate::scenario::UNCONTENDED_KEYS)
                .map(|j| format!("u{t}-{j}"))
                .collect(),
            // Keys that come round again only long after they went idle.
            "fresh-key" => (0..1 << 17).map(|j| format!("f{t}-{j}")).collect(),
            _ => vec!["hot".to_string()],
        })
        .collect();
    // Single-key baselines: one lock per thread when uncontended.
    let per_thread: Vec<crate::measure::Padded<D>> = if D::SINGLE && scenario == "uncontended" {
        (0..threads)
            .map(|_| crate::measure::Padded(D::default()))
            .collect()
    } else {
        Vec::new()
    };
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for (t, ks) in keys.iter().enumerate() {
            let (stop, d) = (&stop, per_thread.get(t).map(|p| &p.0).unwrap_or(&d));
            std::thread::Builder::new()
                .name(format!("{scenario}-{t}"))
                .spawn_scoped(s, move || {
                    let mut i = 0usize;
                    while !stop.load(Relaxed) {
                        for _ in 0..64 {
                            d.hold(&ks[i % ks.len()], || black_box(()));
                            i = i.wrapping_add(1);
                        }
                    }
                })
                .expect("spawn");
        }
        std::thread::sleep(dur);
        stop.store(true, Relaxed);
    });
}

fn profile<D: KeyedLock>(scenario: &str, dur: Duration, path: &Path) -> Res {
    let guard = pprof::ProfilerGuardBuilder::default()
        .frequency(997)
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()?;
    workload::<D>(scenario, 2, dur);
    let report = guard.report().build()?;
    let samples: isize = report.data.values().sum();
    let mut opts = pprof::flamegraph::Options::default();
    opts.title = format!(
        "{} {scenario} (2 threads, {:?}, {samples} samples)",
        D::NAME,
        dur
    );
    report.flamegraph_with_options(File::create(path)?, &mut opts)?;
    std::fs::write(
        path.with_extension("txt"),
        summary(&report, &opts.title, samples),
    )?;
    eprintln!("wrote {} ({samples} samples)", path.display());
    if samples == 0 {
        return Err("pprof took no samples".into());
    }
    Ok(())
}

/// A text summary beside the SVG: the hottest leaf functions (self time) and
/// the functions on most stacks (inclusive), each as a share of all samples.
fn summary(report: &pprof::Report, title: &str, samples: isize) -> String {
    use std::collections::{HashMap, HashSet};
    use std::fmt::Write as _;
    let mut selfs: HashMap<String, isize> = HashMap::new();
    let mut incl: HashMap<String, isize> = HashMap::new();
    for (frames, &n) in &report.data {
        let mut seen = HashSet::new();
        let mut leaf = true;
        for sym in frames.frames.iter().flatten() {
            let name = sym.name();
            if leaf {
                *selfs.entry(name.clone()).or_default() += n;
                leaf = false;
            }
            if seen.insert(name.clone()) {
                *incl.entry(name).or_default() += n;
            }
        }
    }
    let pct = |n: isize| 100.0 * n as f64 / samples.max(1) as f64;
    let mut out =
        format!("{title}\n\nself time (leaf function, inlined frames counted as their own):\n");
    let mut v: Vec<_> = selfs.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    for (name, n) in v.iter().take(20) {
        let _ = writeln!(out, "{:6.1}%  {n:6}  {name}", pct(*n));
    }
    let _ = writeln!(out, "\ninclusive (on the stack), holdline / crossbeam / atomic-wait / std::sync / std::thread frames:");
    let mut v: Vec<_> = incl
        .into_iter()
        .filter(|(k, _)| {
            [
                "holdline",
                "crossbeam",
                "atomic_wait",
                "std::sync",
                "std::thread::park",
                "futex",
                "syscall",
            ]
            .iter()
            .any(|p| k.contains(p))
        })
        .collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    for (name, n) in v.iter().take(30) {
        let _ = writeln!(out, "{:6.1}%  {n:6}  {name}", pct(*n));
    }
    out
}

pub fn run(args: &FlameArgs) -> Res {
    let dur = Duration::from_millis(
        args.duration
            .unwrap_or(if args.quick { 1000 } else { 6000 }),
    );
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| workspace_path("flamegraphs"));
    std::fs::create_dir_all(&dir)?;
    let design = args.design;
    for scenario in ["uncontended", "hot-key", "fresh-key"] {
        let name = if design == Design::Holdline {
            format!("{scenario}.svg")
        } else {
            format!("{scenario}-{}.svg", design.name())
        };
        let path = dir.join(name);
        for_design!(design, D => profile::<D>(scenario, dur, &path))?;
    }
    Ok(())
}
