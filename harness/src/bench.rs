//! `harness` without a subcommand: plans the rows, runs each row its number
//! of times beside its busy threads, and prints and writes the results.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::busy::Spinners;
use crate::cli::BenchArgs;
use crate::cluster::{etcd_binary, tools_required, Setup};
use crate::designs::Design;
use crate::permit_designs::PermitDesign;
use crate::row::{Row, Run};
use crate::scenario::{Cfg, Kind, Scenario};
use crate::servers::ServerKind;
use crate::{for_async_design, for_design, plots, report, schema, workspace_path};

/// What a row measures: an in-process design, a server over loopback, a
/// plain node or cluster (the `cluster` scenario), or a design of the
/// permits scenarios.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subject {
    Design(Design),
    Server(ServerKind),
    Cluster(Setup),
    Permits(PermitDesign),
}

impl Subject {
    pub fn name(self) -> &'static str {
        match self {
            Subject::Design(d) => d.name(),
            Subject::Server(s) => s.name(),
            Subject::Cluster(s) => s.name(),
            Subject::Permits(d) => d.name(),
        }
    }
}

/// One row to run: a scenario with a design (or server) at a thread
/// (task, connection) count and busy level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    pub scenario: Scenario,
    pub threads: usize,
    pub design: Subject,
    pub busy: usize,
}

impl Job {
    fn label(&self) -> String {
        format!(
            "{} / {} threads / busy {} / {}",
            self.scenario.name(),
            self.threads,
            self.busy,
            self.design.name()
        )
    }

    /// One run of the job; panics as the scenario does.
    fn run(&self, cfg: &Cfg) -> Run {
        let (s, t) = (self.scenario, self.threads);
        match self.design {
            Subject::Server(kind) => crate::server_scenarios::run(s, kind, cfg, t),
            Subject::Cluster(setup) => crate::cluster_scenarios::run(setup, cfg, t),
            Subject::Permits(d) => crate::permit_scenarios::run(s, d, cfg, t),
            Subject::Design(d) if s.kind() == Kind::Async => for_async_design!(d,
                D => s.run_async::<D>(cfg, t),
                else for_design!(d, D => s.run::<D>(cfg, t))),
            Subject::Design(d) => for_design!(d, D => s.run::<D>(cfg, t)),
        }
    }

    /// The run of a job whose run panicked.
    fn failed(&self) -> Run {
        match self.design {
            Subject::Design(d) => {
                for_design!(d, D => self.scenario.failed::<D>(self.threads))
            }
            Subject::Server(_) | Subject::Cluster(_) | Subject::Permits(_) => {
                let mut run = Run::new(self.scenario, self.threads, self.design.name());
                run.fifo = match self.design {
                    Subject::Permits(d) => d.fifo(),
                    Subject::Server(kind) => kind.fifo(),
                    _ => true,
                };
                // Every server has a bounded wait, as its rows say.
                run.deadline = matches!(self.design, Subject::Server(_));
                run.na = Some("PANICKED");
                run.note = "the run panicked (see stderr)".into();
                run
            }
        }
    }
}

/// Which run: the tour (the default), every row (`--full`, or rows
/// picked by flags), or CI's smoke run (`--quick`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Tour,
    Full,
    Quick,
}

/// The tour's rows: the scenario, thread count and busy level of each
/// verdict question (every design, or both servers; the cluster question
/// the plain node and three nodes).
const TOUR: [(Scenario, usize, usize); 14] = [
    (Scenario::Uncontended, 1, 0),
    (Scenario::HotKey, 2, 0),
    (Scenario::HotKey, 2, 1),
    (Scenario::HotKey, 4, 0),
    (Scenario::HotKey, 8, 0),
    (Scenario::AsyncHotKey, 4, 0),
    (Scenario::AsyncSemaphore, 64, 0),
    (Scenario::ReadMostly, 2, 0),
    (Scenario::ReadMostly, 4, 0),
    (Scenario::ReadMostly, 8, 0),
    (Scenario::MillionKeys, 1, 0),
    (Scenario::ServerUncontended, 1, 0),
    (Scenario::ServerHotKey, 16, 0),
    (Scenario::Cluster, 16, 0),
];

/// The server rows of the smoke run (`--quick`): every lock server at 16
/// connections, its own key each and all on one key, so that CI starts
/// and drives each peer (a few seconds each).
const QUICK_SERVERS: [(Scenario, usize); 2] = [
    (Scenario::ServerUncontended, 16),
    (Scenario::ServerHotKey, 16),
];

/// The smoke run's server jobs.
fn quick_server_jobs() -> Vec<Job> {
    let mut jobs = Vec::new();
    for (scenario, threads) in QUICK_SERVERS {
        for &kind in &ServerKind::ALL {
            jobs.push(Job {
                scenario,
                threads,
                design: Subject::Server(kind),
                busy: 0,
            });
        }
    }
    jobs
}

/// The tour's jobs, in [`TOUR`]'s order.
fn tour_jobs(designs: &[Design]) -> Vec<Job> {
    let mut jobs = Vec::new();
    // The single-key baselines answer no question of the verdict.
    let keyed: Vec<Design> = designs.iter().copied().filter(|d| !d.single()).collect();
    for (scenario, threads, busy) in TOUR {
        for design in subjects(scenario, &keyed) {
            let routed = matches!(design, Subject::Cluster(Setup::Nodes(n)) if n != 3);
            // The peers' rows take seconds each: `--scenario server` runs them.
            let peer = matches!(
                design,
                Subject::Server(ServerKind::Etcd | ServerKind::Postgres)
            );
            // The maxHold hold answers the uncontended questions only.
            let max_hold_elsewhere = design == Subject::Design(Design::HoldlineMaxHold)
                && scenario != Scenario::Uncontended;
            if !routed && !peer && !max_hold_elsewhere {
                jobs.push(Job {
                    scenario,
                    threads,
                    design,
                    busy,
                });
            }
        }
    }
    jobs
}

/// What a run of the harness will do, settled from the command line.
pub struct Plan {
    pub cfg: Cfg,
    pub mode: Mode,
    pub quick: bool,
    pub threads: Vec<usize>,
    pub runs: usize,
    pub jobs: Vec<Job>,
    pub out_dir: PathBuf,
    pub plots: bool,
}

/// The busy levels `scenario` runs at: those asked for, else 0, and 1 as
/// well for hot-key (where a busy machine hurts a lock most).
fn busy_levels(asked: &[usize], scenario: Scenario) -> Vec<usize> {
    if !asked.is_empty() {
        let mut levels = asked.to_vec();
        levels.dedup();
        levels
    } else if scenario == Scenario::HotKey {
        vec![0, 1]
    } else {
        vec![0]
    }
}

/// What runs `scenario`: every design for a blocking one, the designs
/// with an async hold for an async one, both servers for a server one, the
/// plain node and the clusters for `cluster` (`--design` picks the designs,
/// not the servers), holdline and its peers for a permits one (`--design`
/// picks a peer by the design whose map and crate it uses).
fn subjects(scenario: Scenario, designs: &[Design]) -> Vec<Subject> {
    match scenario.kind() {
        Kind::Blocking => designs.iter().map(|&d| Subject::Design(d)).collect(),
        Kind::Async => designs
            .iter()
            .filter(|d| d.has_async())
            .map(|&d| Subject::Design(d))
            .collect(),
        Kind::Server => crate::server_scenarios::subjects(scenario)
            .iter()
            .map(|&kind| Subject::Server(kind))
            .collect(),
        Kind::Cluster => Setup::ALL.map(Subject::Cluster).to_vec(),
        Kind::Permits => crate::permit_scenarios::subjects(scenario)
            .iter()
            .filter(|d| designs.contains(&d.family()))
            .map(|&d| Subject::Permits(d))
            .collect(),
    }
}

/// Every row, grouped by scenario, then busy level, then threads, designs in table order.
fn jobs(scenarios: &[Scenario], designs: &[Design], threads: &[usize], busy: &[usize]) -> Vec<Job> {
    let mut jobs = Vec::new();
    for &scenario in scenarios {
        let ts = scenario
            .fixed_threads()
            .map_or_else(|| threads.to_vec(), <[usize]>::to_vec);
        let subjects = subjects(scenario, designs);
        for b in busy_levels(busy, scenario) {
            for &t in &ts {
                for &design in &subjects {
                    jobs.push(Job {
                        scenario,
                        threads: t,
                        design,
                        busy: b,
                    });
                }
            }
        }
    }
    jobs
}

/// Everything in `all` that `asked` names (all of it when `asked` is empty), in `all`'s order.
fn chosen<T: Copy + PartialEq>(all: &[T], asked: &[T]) -> Vec<T> {
    all.iter()
        .copied()
        .filter(|x| asked.is_empty() || asked.contains(x))
        .collect()
}

impl Plan {
    pub fn new(args: &BenchArgs) -> Plan {
        let picked = !(args.scenarios.is_empty()
            && args.designs.is_empty()
            && args.threads.is_empty()
            && args.busy.is_empty());
        let mode = match (args.quick, args.full || picked) {
            (true, _) => Mode::Quick,
            (false, true) => Mode::Full,
            (false, false) => Mode::Tour,
        };
        let ms = args.duration.unwrap_or(match mode {
            Mode::Quick => 120,
            Mode::Tour => 600,
            Mode::Full => 1000,
        });
        let million = args
            .keys
            .unwrap_or(if args.quick { 200_000 } else { 1_000_000 });
        let threads = match (&args.threads[..], args.quick) {
            ([], true) => vec![1, 2],
            ([], false) => vec![1, 2, 4],
            (t, _) => t.to_vec(),
        };
        let asked: Vec<Scenario> = args.scenarios.iter().flat_map(|s| s.0.clone()).collect();
        let mut scenarios = chosen(&Scenario::ALL, &asked);
        if args.quick && asked.is_empty() {
            scenarios.retain(|s| s.in_quick());
        }
        let designs = chosen(&Design::ALL, &args.designs);
        let out_dir = args.out.clone().unwrap_or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| workspace_path("target"))
                .join("harness")
        });
        let mut jobs = match mode {
            Mode::Tour => tour_jobs(&designs),
            _ => jobs(&scenarios, &designs, &threads, &args.busy),
        };
        if args.quick && asked.is_empty() {
            jobs.extend(quick_server_jobs());
        }
        Plan {
            cfg: Cfg::new(Duration::from_millis(ms), million),
            mode,
            quick: args.quick,
            jobs,
            threads,
            runs: args.runs.unwrap_or(if args.quick { 1 } else { 3 }),
            out_dir,
            plots: !args.no_plots,
        }
    }
}

fn cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Ends the process when one run goes on far past its budget (a lost
/// wake-up, a deadlock), so that a hang cannot hang CI.
struct Watchdog {
    current: Arc<Mutex<(Instant, String)>>,
}

impl Watchdog {
    fn start(limit: Duration) -> Self {
        let current = Arc::new(Mutex::new((Instant::now(), String::from("setup"))));
        let watched = current.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            let (since, what) = watched.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if since.elapsed() > limit {
                eprintln!(
                    "\nharness: {what} has run {:.0} s (limit {:.0} s): giving up, it looks hung",
                    since.elapsed().as_secs_f64(),
                    limit.as_secs_f64()
                );
                std::process::exit(3);
            }
        });
        Watchdog { current }
    }

    fn now_running(&self, what: String) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = (Instant::now(), what);
    }
}

/// One run of `job` beside its busy threads; `None` when the run panicked.
fn run_job(job: &Job, cfg: &Cfg) -> Option<Run> {
    let busy = Spinners::start(job.busy);
    let run = std::panic::catch_unwind(|| job.run(cfg));
    if job.busy > 0 && busy.rounds() == 0 {
        eprintln!(
            "harness: {}: the busy threads got no CPU during the run",
            job.label()
        );
    }
    run.ok()
}

/// Runs every job `plan.runs` times, in rounds that each run every job
/// once, so that a noisy moment of the machine touches one run of many rows
/// rather than every run of one. A row its design cannot run (n/a), or one
/// that panicked, is not run again. Answers the rows and the jobs that panicked.
fn run_all(plan: &Plan) -> (Vec<Row>, Vec<String>) {
    let bar = ProgressBar::with_draw_target(
        Some((plan.jobs.len() * plan.runs) as u64),
        ProgressDrawTarget::stderr(),
    );
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("template")
            .progress_chars("=> "),
    );
    let watchdog =
        Watchdog::start(Duration::from_secs(60) + (plan.cfg.duration + plan.cfg.lat_duration) * 20);
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); plan.jobs.len()];
    let mut failed = Vec::new();
    for round in 0..plan.runs {
        for (job, done) in plan.jobs.iter().zip(&mut runs) {
            bar.inc(1);
            if done.first().is_some_and(|r| r.na.is_some()) {
                continue;
            }
            let what = format!("{} (run {} of {})", job.label(), round + 1, plan.runs);
            bar.set_message(what.clone());
            watchdog.now_running(what);
            match run_job(job, &plan.cfg) {
                Some(run) => done.push(run),
                None => {
                    failed.push(job.label());
                    *done = vec![job.failed()];
                }
            }
        }
    }
    bar.finish_and_clear();
    let rows = plan
        .jobs
        .iter()
        .zip(&runs)
        .map(|(job, runs)| Row::of_runs(runs, job.busy))
        .collect();
    (rows, failed)
}

/// The run's settings, for the JSON.
fn meta(plan: &Plan, elapsed: Duration) -> Vec<(&'static str, String)> {
    let busy: Vec<String> = {
        let mut seen: Vec<(Scenario, usize)> =
            plan.jobs.iter().map(|j| (j.scenario, j.busy)).collect();
        seen.dedup();
        seen.iter()
            .map(|(s, b)| format!("{} {b}", s.name()))
            .collect()
    };
    vec![
        ("quick", plan.quick.to_string()),
        ("mode", format!("{:?}", plan.mode).to_lowercase()),
        ("threads", format!("{:?}", plan.threads)),
        ("busy", busy.join(", ")),
        ("runs", plan.runs.to_string()),
        ("duration_ms", plan.cfg.duration.as_millis().to_string()),
        ("latency_ms", plan.cfg.lat_duration.as_millis().to_string()),
        ("million_keys", plan.cfg.million.to_string()),
        ("cpus", cpus().to_string()),
        ("elapsed_s", format!("{:.1}", elapsed.as_secs_f64())),
    ]
}

/// Removes the SVGs of an earlier run: plots of other scenarios would mislead.
fn remove_old_plots(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.path().extension().is_some_and(|x| x == "svg") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Writes the CSV, JSON, table and plots under `plan.out_dir`; false when one could not be written.
fn write_outputs(plan: &Plan, rows: &[Row], table: &str, elapsed: Duration) -> bool {
    let dir = &plan.out_dir;
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!("harness: cannot create {}: {e}", dir.display());
        return false;
    }
    let mut ok = true;
    for (name, text) in [
        ("results.csv", schema::csv(rows)),
        ("results.json", schema::json(rows, &meta(plan, elapsed))),
        ("table.txt", table.to_string()),
    ] {
        let p = dir.join(name);
        if let Err(e) = std::fs::write(&p, text) {
            eprintln!("harness: cannot write {}: {e}", p.display());
            ok = false;
        }
    }
    let mut written = 0;
    if plan.plots {
        remove_old_plots(dir);
        match plots::plots(dir, rows) {
            Ok(files) => written = files.len(),
            Err(e) => {
                eprintln!("harness: plots failed: {e}");
                ok = false;
            }
        }
    }
    println!(
        "wrote results.csv, results.json, table.txt and {written} SVG plots under {}",
        dir.display()
    );
    ok
}

/// Says, once, which planned servers (and etcd) cannot start here and how
/// to get them.
fn say_missing_servers(plan: &Plan) {
    let clusters = plan
        .jobs
        .iter()
        .any(|j| matches!(j.design, Subject::Cluster(Setup::Nodes(_))));
    if clusters {
        if let Err(m) = etcd_binary() {
            let then = if tools_required() {
                "HOLDLINE_REQUIRE_TOOLS=1: the cluster rows fail"
            } else {
                "the cluster rows are n/a (HOLDLINE_REQUIRE_TOOLS=1 makes them fail)"
            };
            eprintln!("harness: {}; {then}", m.how);
        }
    }
    for kind in ServerKind::ALL {
        let cluster = kind == ServerKind::Holdline
            && plan
                .jobs
                .iter()
                .any(|j| matches!(j.design, Subject::Cluster(_)));
        let planned = plan.jobs.iter().any(|j| match j.design {
            Subject::Server(k) => k == kind || (kind == ServerKind::Holdline && k.is_holdline()),
            _ => false,
        });
        if cluster || planned {
            match kind.binary() {
                Err(m) if kind.is_peer() && tools_required() => eprintln!(
                    "harness: {}; HOLDLINE_REQUIRE_TOOLS=1: its rows fail",
                    m.how
                ),
                Err(m) if kind.is_peer() => eprintln!(
                    "harness: {}; its rows are n/a (HOLDLINE_REQUIRE_TOOLS=1 makes them fail)",
                    m.how
                ),
                Err(m) => eprintln!("harness: {}", m.how),
                Ok(p) if crate::servers::is_debug_build(&p) => eprintln!(
                    "harness: only a debug build of holdline at {}: its rows mean little; \
                     `cargo build --release --bin holdline`",
                    p.display()
                ),
                Ok(_) => {}
            }
        }
    }
}

/// Builds `holdline serve` (a no-op when it is current) when a planned row
/// starts it and no `HOLDLINE_BIN` names one, so that `cargo run -p
/// harness` needs no build step first; says so. Run outside cargo (no
/// `CARGO` in the environment), it leaves the binary as it finds it.
fn build_holdline(plan: &Plan) {
    let starts_holdline = plan.jobs.iter().any(|j| match j.design {
        Subject::Server(kind) => kind.is_holdline(),
        Subject::Cluster(_) => true,
        _ => false,
    });
    let Some(cargo) = std::env::var_os("CARGO") else {
        return;
    };
    if !starts_holdline || std::env::var_os("HOLDLINE_BIN").is_some() {
        return;
    }
    eprintln!(
        "harness: building holdline serve for the server rows \
         (cargo build --release --bin holdline; seconds when it is current)"
    );
    let mut build = std::process::Command::new(cargo);
    build.current_dir(workspace_path("")).args([
        "build",
        "--release",
        "--quiet",
        "--bin",
        "holdline",
    ]);
    // What `cargo run` set for this process is not the build's: ring's
    // build script watches it, and passing it on rebuilt ring, rustls and
    // all above them at every run (and again at the next `cargo run`).
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let of_this_run = [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_BIN_",
            "CARGO_CRATE_",
        ]
        .iter()
        .any(|p| name.starts_with(p))
            || name == "CARGO_PRIMARY_PACKAGE"
            || name == "CARGO_RUSTC_CURRENT_DIR";
        if of_this_run {
            build.env_remove(name.as_ref());
        }
    }
    let built = build.status();
    if !built.is_ok_and(|s| s.success()) {
        eprintln!("harness: building holdline failed: its rows say how to build it");
    }
}

/// The verdict's lines: each question's, with memory per connection before
/// the cluster's.
fn verdict(rows: &[Row], start: Instant) -> String {
    use crate::server_scenarios::connection_memory;
    use crate::verdict::{answer, connection_memory_line, render, QUESTIONS};
    let (last, rest) = QUESTIONS.split_last().expect("questions");
    let mut lines: Vec<_> = rest.iter().map(|q| answer(rows, q)).collect();
    lines.push(connection_memory_line(
        connection_memory(ServerKind::Holdline),
        connection_memory(ServerKind::Redis),
    ));
    lines.push(answer(rows, last));
    render(&lines, start.elapsed().as_secs_f64())
}

pub fn bench(args: &BenchArgs) -> ExitCode {
    let plan = Plan::new(args);
    build_holdline(&plan);
    say_missing_servers(&plan);
    eprintln!(
        "harness: {} rows x {} runs (threads {:?}), {} ms + {} ms per run, {} keys in million-keys, {} CPUs",
        plan.jobs.len(),
        plan.runs,
        plan.threads,
        plan.cfg.duration.as_millis(),
        plan.cfg.lat_duration.as_millis(),
        plan.cfg.million,
        cpus(),
    );
    let start = Instant::now();
    let (rows, failed) = run_all(&plan);
    let elapsed = start.elapsed();
    // The legend goes into table.txt too: the file must say which way the ratios read.
    let mut table = format!(
        "{}\n{} rows in {:.1} s\n{}",
        report::table(&rows, &plan.cfg),
        rows.len(),
        elapsed.as_secs_f64(),
        report::legend(plan.runs)
    );
    if plan.mode != Mode::Quick {
        table.push_str(&verdict(&rows, start));
    }
    print!("{table}");
    let written = write_outputs(&plan, &rows, &table, elapsed);
    if !failed.is_empty() {
        eprintln!(
            "harness: {} rows panicked: {}",
            failed.len(),
            failed.join("; ")
        );
        return ExitCode::FAILURE;
    }
    if !written {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn plan(args: &[&str]) -> Plan {
        let cli =
            crate::cli::Cli::try_parse_from(std::iter::once("harness").chain(args.iter().copied()))
                .unwrap();
        Plan::new(&cli.bench)
    }

    #[test]
    fn the_full_run_adds_busy_hot_key_rows_and_repeats_three_times() {
        let p = plan(&["--full"]);
        assert_eq!(p.runs, 3);
        assert_eq!(p.threads, [1, 2, 4]);
        let busy: Vec<&Job> = p.jobs.iter().filter(|j| j.busy > 0).collect();
        assert!(busy
            .iter()
            .all(|j| j.scenario == Scenario::HotKey && j.busy == 1));
        assert_eq!(busy.len(), 3 * Design::ALL.len());
        let blocking = |j: &&Job| j.scenario.kind() == Kind::Blocking;
        let quiet_hot = p
            .jobs
            .iter()
            .filter(|j| j.scenario == Scenario::HotKey && j.busy == 0)
            .count();
        assert_eq!(quiet_hot, 3 * Design::ALL.len());
        // Fixed-thread scenarios run once per design.
        let handoff: Vec<&Job> = p
            .jobs
            .iter()
            .filter(|j| j.scenario == Scenario::Handoff)
            .collect();
        assert_eq!(handoff.len(), Design::ALL.len());
        assert!(handoff.iter().all(|j| j.threads == 2));
        // Per design: uncontended, hot-key twice (busy 0 and 1), zipf and
        // million-keys at 3 thread counts; handoff and deadline once.
        assert_eq!(
            p.jobs.iter().filter(blocking).count(),
            (5 * 3 + 2) * Design::ALL.len()
        );
        // Async: holdline and dashmap+tokio; uncontended and fresh keys at
        // 3 task counts, hot key at 2, 4 and 64 tasks, deadline once.
        let asyncs: Vec<&Job> = p
            .jobs
            .iter()
            .filter(|j| j.scenario.kind() == Kind::Async)
            .collect();
        assert_eq!(asyncs.len(), (3 + 3 + 3 + 1) * 2);
        assert!(asyncs.iter().all(|j| matches!(
            j.design,
            Subject::Design(Design::Holdline | Design::DashTokio)
        )));
        let hot: Vec<usize> = asyncs
            .iter()
            .filter(|j| j.scenario == Scenario::AsyncHotKey && j.design.name() == "holdline")
            .map(|j| j.threads)
            .collect();
        assert_eq!(hot, [2, 4, 64]);
        // Server: every lock server at 1, 16, 64 connections uncontended,
        // 16 on the hot key, paced and (400) holding a key each; the RESP
        // servers pipelined and in the memory row; holdline's history
        // settings at 16.
        let servers: Vec<(Scenario, usize, &str)> = p
            .jobs
            .iter()
            .filter(|j| j.scenario.kind() == Kind::Server)
            .map(|j| (j.scenario, j.threads, j.design.name()))
            .collect();
        let all = ["holdline", "redis", "etcd", "postgres"];
        let mut want: Vec<(Scenario, usize, &str)> = Vec::new();
        for t in [1, 16, 64] {
            want.extend(all.map(|d| (Scenario::ServerUncontended, t, d)));
        }
        for t in [1, 16, 64] {
            want.extend(["holdline", "redis"].map(|d| (Scenario::ServerPipelined, t, d)));
        }
        want.extend(all.map(|d| (Scenario::ServerHotKey, 16, d)));
        want.extend(all.map(|d| (Scenario::ServerPaced, 16, d)));
        want.extend(["holdline", "redis"].map(|d| (Scenario::ServerMemory, 16, d)));
        want.extend(all.map(|d| (Scenario::ServerConnections, 400, d)));
        want.extend(
            ["history-off", "holdline", "audit-log"].map(|d| (Scenario::ServerHistory, 16, d)),
        );
        assert_eq!(servers, want);
        // Cluster: the plain node, then 1, 2 and 3 nodes, at 16 clients.
        let clusters: Vec<(usize, &str)> = p
            .jobs
            .iter()
            .filter(|j| j.scenario.kind() == Kind::Cluster)
            .map(|j| (j.threads, j.design.name()))
            .collect();
        assert_eq!(
            clusters,
            [
                (16, "plain"),
                (16, "cluster-1"),
                (16, "cluster-2"),
                (16, "cluster-3")
            ]
        );
    }

    #[test]
    fn the_default_run_is_the_tour_of_the_verdicts_rows() {
        let p = plan(&[]);
        assert_eq!((p.mode, p.runs), (Mode::Tour, 3));
        assert_eq!(p.cfg.duration, Duration::from_millis(600));
        // Every question's rows are planned, holdline's and the others'.
        for q in crate::verdict::QUESTIONS {
            let of_q: Vec<&Job> = p
                .jobs
                .iter()
                .filter(|j| (j.scenario, j.threads, j.busy) == (q.scenario, q.threads, q.busy))
                .collect();
            assert!(of_q.len() >= 2, "{q:?}");
            assert!(
                of_q.iter()
                    .any(|j| j.design.name() == q.scenario.reference()),
                "{q:?}"
            );
        }
        let clusters: Vec<&str> = p
            .jobs
            .iter()
            .filter(|j| j.scenario == Scenario::Cluster)
            .map(|j| j.design.name())
            .collect();
        assert_eq!(clusters, ["plain", crate::verdict::CLUSTER]);
        // A flag that picks rows runs them as --full would.
        assert_eq!(plan(&["--scenario", "zipf"]).mode, Mode::Full);
        assert_eq!(plan(&["--quick"]).mode, Mode::Quick);
    }

    #[test]
    fn quick_runs_the_async_and_cluster_scenarios_and_two_rows_of_each_server() {
        let p = plan(&["--quick"]);
        assert!(p.jobs.iter().any(|j| j.scenario == Scenario::AsyncHotKey));
        let servers: Vec<(&str, usize, &str)> = p
            .jobs
            .iter()
            .filter(|j| j.scenario.kind() == Kind::Server)
            .map(|j| (j.scenario.name(), j.threads, j.design.name()))
            .collect();
        let mut want = Vec::new();
        for s in ["server-uncontended", "server-hot-key"] {
            want.extend(["holdline", "redis", "etcd", "postgres"].map(|d| (s, 16, d)));
        }
        assert_eq!(servers, want);
        // The cluster rows are quick enough (about 4 s) to stay in.
        let clusters = p.jobs.iter().filter(|j| j.scenario == Scenario::Cluster);
        assert_eq!(clusters.count(), 4);
        let p = plan(&["--quick", "--scenario", "server-hot-key"]);
        assert_eq!(p.jobs.len(), 4);
    }

    #[test]
    fn permits_scenarios_run_holdline_and_its_peers_at_their_own_counts() {
        let p = plan(&["--scenario", "permits"]);
        let got: Vec<(&str, usize, &str)> = p
            .jobs
            .iter()
            .filter(|j| j.design.name() == "holdline")
            .map(|j| (j.scenario.name(), j.threads, j.design.name()))
            .collect();
        assert_eq!(
            got,
            [
                ("semaphore", 2, "holdline"),
                ("semaphore", 4, "holdline"),
                ("semaphore", 8, "holdline"),
                ("async-semaphore", 64, "holdline"),
                ("read-mostly", 2, "holdline"),
                ("read-mostly", 4, "holdline"),
                ("read-mostly", 8, "holdline"),
            ]
        );
        // Two designs a semaphore row; four a read-mostly row (holdline
        // FIFO and bounded, and two peers).
        assert_eq!(p.jobs.len(), 3 * 2 + 2 + 3 * 4);
        // --quick keeps them, at the same counts (about 3 s on 2 cores).
        let quick = plan(&["--quick"]);
        let permits = quick
            .jobs
            .iter()
            .filter(|j| j.scenario.kind() == Kind::Permits);
        assert_eq!(permits.count(), p.jobs.len());
        // --design picks a peer by its map and crate.
        let p = plan(&["--scenario", "read-mostly", "--design", "dashmap+pl"]);
        let names: Vec<&str> = p.jobs.iter().map(|j| j.design.name()).collect();
        assert_eq!(names, ["dashmap+pl-rw"; 3]);
    }

    #[test]
    fn a_group_name_picks_its_scenarios() {
        let p = plan(&["--scenario", "server,deadline", "--design", "holdline"]);
        let mut got: Vec<&str> = p.jobs.iter().map(|j| j.scenario.name()).collect();
        got.dedup();
        assert_eq!(
            got,
            [
                "deadline",
                "server-uncontended",
                "server-pipelined",
                "server-hot-key",
                "server-paced",
                "server-memory",
                "server-connections",
                "server-history"
            ]
        );
        let p = plan(&["--scenario", "async", "--design", "dashmap+pl"]);
        assert!(p.jobs.is_empty(), "dashmap+pl has no async hold");
    }

    #[test]
    fn busy_asked_for_applies_to_every_scenario() {
        let p = plan(&[
            "--scenario",
            "zipf,hot-key",
            "--busy",
            "0,2",
            "--threads",
            "2",
            "--design",
            "holdline",
        ]);
        let got: Vec<(Scenario, usize)> = p.jobs.iter().map(|j| (j.scenario, j.busy)).collect();
        assert_eq!(
            got,
            [
                (Scenario::HotKey, 0),
                (Scenario::HotKey, 2),
                (Scenario::Zipf, 0),
                (Scenario::Zipf, 2)
            ]
        );
    }

    #[test]
    fn quick_is_one_short_run_per_row_unless_told() {
        let p = plan(&["--quick"]);
        assert_eq!((p.runs, p.threads.as_slice()), (1, &[1, 2][..]));
        assert_eq!(p.cfg.duration, Duration::from_millis(120));
        assert_eq!(plan(&["--quick", "--runs", "2"]).runs, 2);
    }

    #[test]
    fn rows_repeat_and_na_rows_run_once() {
        let mut p = plan(&[
            "--scenario",
            "zipf",
            "--threads",
            "1",
            "--design",
            "holdline,std-1key",
            "--runs",
            "2",
            "--no-plots",
        ]);
        p.cfg = Cfg::new(Duration::from_millis(5), 100);
        let (rows, failed) = run_all(&p);
        assert!(failed.is_empty());
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].design, rows[0].runs, rows[0].na),
            ("holdline", 2, None)
        );
        assert_eq!(
            (rows[1].design, rows[1].runs, rows[1].na),
            ("std-1key", 1, Some("single key"))
        );
    }
}
