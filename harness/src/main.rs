//! `cargo run --release -p harness [-- OPTIONS]`: holdline against the keyed
//! mutex designs people use instead, scenario by scenario.
//! `cargo run --release -p harness -- flamegraph`: flamegraphs of holdline's
//! uncontended and hot-key paths (pprof).

mod alloc;
mod designs;
mod flame;
mod report;
mod scenarios;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use scenarios::{Cfg, Row, SCENARIOS};

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

const USAGE: &str = "\
usage: harness [OPTIONS]
       harness flamegraph [--duration MS] [--design NAME] [--out DIR]

Runs every scenario against every design and prints a table (ratios against
holdline per row); writes CSV, JSON and SVG plots under target/harness/.

options:
  --quick              CI smoke run: short phases, threads 1,2, 200k keys (< 60 s)
  --threads 1,2,4      thread counts (default 1,2,4)
  --duration MS        throughput phase per row in ms (default 1000; latency phase is half)
  --scenario NAME,...  uncontended, hot-key, zipf, million-keys, handoff, deadline (default all)
  --design NAME,...    holdline, std-map+std, dashmap+pl, dashmap+tokio, lockable,
                       std-1key, pl-1key (default all)
  --keys N             distinct keys in million-keys (default 1000000)
  --out DIR            output folder (default <workspace>/target/harness)
  --no-plots           skip the SVGs
  -h, --help           this text
";

pub struct Args {
    pub quick: bool,
    pub threads: Vec<usize>,
    pub duration: Option<u64>,
    pub scenarios: Vec<String>,
    pub designs: Vec<String>,
    pub keys: Option<usize>,
    pub out: Option<PathBuf>,
    pub plots: bool,
    pub flamegraph: bool,
}

fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        quick: false,
        threads: Vec::new(),
        duration: None,
        scenarios: Vec::new(),
        designs: Vec::new(),
        keys: None,
        out: None,
        plots: true,
        flamegraph: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut val = |name: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag.as_str() {
            "flamegraph" => a.flamegraph = true,
            "--quick" => a.quick = true,
            "--no-plots" => a.plots = false,
            "--threads" => {
                a.threads = list(&val("--threads")?)
                    .iter()
                    .map(|t| t.parse::<usize>().ok().filter(|&t| t > 0))
                    .collect::<Option<Vec<_>>>()
                    .ok_or("--threads takes positive integers, e.g. 1,2,4")?
            }
            "--duration" => {
                a.duration = Some(
                    val("--duration")?
                        .trim_end_matches("ms")
                        .parse()
                        .map_err(|_| "--duration takes milliseconds")?,
                )
            }
            "--scenario" | "--scenarios" => a.scenarios.extend(list(&val("--scenario")?)),
            "--design" | "--designs" => a.designs.extend(list(&val("--design")?)),
            "--keys" => {
                a.keys = Some(
                    val("--keys")?
                        .replace('_', "")
                        .parse()
                        .map_err(|_| "--keys takes a number")?,
                )
            }
            "--out" => a.out = Some(PathBuf::from(val("--out")?)),
            "-h" | "--help" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    for s in &a.scenarios {
        if !SCENARIOS.contains(&s.as_str()) {
            return Err(format!(
                "unknown scenario {s:?}; known: {}",
                SCENARIOS.join(", ")
            ));
        }
    }
    for d in &a.designs {
        if !designs::ALL.contains(&d.as_str()) {
            return Err(format!(
                "unknown design {d:?}; known: {}",
                designs::ALL.join(", ")
            ));
        }
    }
    Ok(a)
}

/// `<workspace>/<name>`: the workspace root is the harness package's parent.
pub fn workspace_path(name: &str) -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .map(|p| p.join(name))
        .unwrap_or_else(|| PathBuf::from(name))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("harness: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if args.flamegraph {
        return match flame::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("harness flamegraph: {e}");
                ExitCode::FAILURE
            }
        };
    }
    bench(args)
}

fn bench(args: Args) -> ExitCode {
    let ms = args.duration.unwrap_or(if args.quick { 120 } else { 1000 });
    let cfg = Cfg {
        duration: Duration::from_millis(ms),
        lat_duration: Duration::from_millis((ms / 2).max(1)),
        million: args
            .keys
            .unwrap_or(if args.quick { 200_000 } else { 1_000_000 }),
        dl_wait: Duration::from_millis(1),
        dl_hold: Duration::from_millis(5),
    };
    let threads = if args.threads.is_empty() {
        if args.quick {
            vec![1, 2]
        } else {
            vec![1, 2, 4]
        }
    } else {
        args.threads.clone()
    };
    let scen: Vec<&str> = SCENARIOS
        .iter()
        .copied()
        .filter(|s| args.scenarios.is_empty() || args.scenarios.iter().any(|x| x == s))
        .collect();
    let des: Vec<&str> = designs::ALL
        .iter()
        .copied()
        .filter(|d| args.designs.is_empty() || args.designs.iter().any(|x| x == d))
        .collect();

    let mut jobs: Vec<(&str, usize, &str)> = Vec::new();
    for &s in &scen {
        let ts = match scenarios::fixed_threads(s) {
            Some(t) => vec![t],
            None => threads.clone(),
        };
        for t in ts {
            for &d in &des {
                jobs.push((s, t, d));
            }
        }
    }

    let out_dir = args.out.clone().unwrap_or_else(|| {
        std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_path("target"))
            .join("harness")
    });

    eprintln!(
        "harness: {} rows ({} scenarios x threads {:?} x {} designs), {} ms + {} ms per row, {} keys in million-keys, {} CPUs",
        jobs.len(),
        scen.len(),
        threads,
        des.len(),
        cfg.duration.as_millis(),
        cfg.lat_duration.as_millis(),
        cfg.million,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
    );
    let bar = ProgressBar::with_draw_target(Some(jobs.len() as u64), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("template")
            .progress_chars("=> "),
    );
    let start = Instant::now();
    // A hung row (a lost wake-up, a deadlock) must not hang CI: a watchdog
    // ends the process when one row runs far past its budget.
    let limit = Duration::from_secs(60) + (cfg.duration + cfg.lat_duration) * 20;
    let current = std::sync::Arc::new(std::sync::Mutex::new((Instant::now(), String::new())));
    {
        let current = current.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            let (since, what) = current.lock().unwrap().clone();
            if since.elapsed() > limit {
                eprintln!(
                    "\nharness: {what} has run {:.0} s (limit {:.0} s): giving up, it looks hung",
                    since.elapsed().as_secs_f64(),
                    limit.as_secs_f64()
                );
                std::process::exit(3);
            }
        });
    }
    let mut rows: Vec<Row> = Vec::new();
    let mut failed = Vec::new();
    for (s, t, d) in jobs {
        bar.set_message(format!("{s} / {t} threads / {d}"));
        *current.lock().unwrap() = (Instant::now(), format!("{s} / {t} threads / {d}"));
        let res = std::panic::catch_unwind(|| {
            for_design!(d, D => scenarios::run::<D>(s, &cfg, t)).expect("known design")
        });
        match res {
            Ok(row) => rows.push(row),
            Err(_) => {
                failed.push(format!("{s} / {t} threads / {d}"));
                let s = SCENARIOS.iter().copied().find(|x| *x == s).unwrap_or("?");
                let row =
                    for_design!(d, D => scenarios::failed_row::<D>(s, t)).expect("known design");
                rows.push(row);
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let elapsed = start.elapsed();

    println!("{}", report::table(&rows));
    println!(
        "\n{} rows in {:.1} s; FIFO = grants in arrival order; deadline LACKS = no bounded wait; \
         ooo = grants out of arrival order / grants sampled (a ticket taken just before each hold, so FIFO locks can show a few from preemption between ticket and queueing); \
         vs hl = ratio to holdline's row (rate: higher is better for the design; p99: lower is better for the design)",
        rows.len(),
        elapsed.as_secs_f64()
    );

    let meta = [
        ("quick", args.quick.to_string()),
        ("threads", format!("{threads:?}")),
        ("duration_ms", cfg.duration.as_millis().to_string()),
        ("latency_ms", cfg.lat_duration.as_millis().to_string()),
        ("million_keys", cfg.million.to_string()),
        (
            "cpus",
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .to_string(),
        ),
        ("elapsed_s", format!("{:.1}", elapsed.as_secs_f64())),
    ];
    let mut io_ok = true;
    if let Err(e) = std::fs::create_dir_all(&out_dir) {
        eprintln!("harness: cannot create {}: {e}", out_dir.display());
        io_ok = false;
    } else {
        for (name, text) in [
            ("results.csv", report::csv(&rows)),
            ("results.json", report::json(&rows, &meta)),
            ("table.txt", report::table(&rows)),
        ] {
            let p = out_dir.join(name);
            if let Err(e) = std::fs::write(&p, text) {
                eprintln!("harness: cannot write {}: {e}", p.display());
                io_ok = false;
            }
        }
        let mut written = 0;
        if args.plots {
            // Plots of an earlier run with other scenarios would mislead: start clean.
            if let Ok(dir) = std::fs::read_dir(&out_dir) {
                for e in dir.flatten() {
                    if e.path().extension().is_some_and(|x| x == "svg") {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
            match report::plots(&out_dir, &rows) {
                Ok(files) => written = files.len(),
                Err(e) => {
                    eprintln!("harness: plots failed: {e}");
                    io_ok = false;
                }
            }
        }
        println!(
            "wrote results.csv, results.json, table.txt and {written} SVG plots under {}",
            out_dir.display()
        );
    }
    if !failed.is_empty() {
        eprintln!(
            "harness: {} rows panicked: {}",
            failed.len(),
            failed.join("; ")
        );
        return ExitCode::FAILURE;
    }
    if !io_ok {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
