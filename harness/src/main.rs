//! `cargo run --release -p harness [-- OPTIONS]`: holdline against the keyed
//! mutex designs people use instead, scenario by scenario.
//! `cargo run --release -p harness -- flamegraph`: flamegraphs of holdline's
//! uncontended and hot-key paths (pprof).
//!
//! What criterion measures well is criterion's (`benches/`): the
//! uncontended hold of one thread. The harness keeps what it cannot do:
//! contention, a busy machine, servers, clusters, memory.
//!
//! Modules, bottom-up (each uses only those before it;
//! `tests/module_graph.rs` checks there is no import cycle and that this
//! map names every module). The processes it starts come from the tests'
//! starters (`holdline_testing::spawn`, as `crate::spawn`, and
//! `holdline_testing::cluster`):
//! - leaves: `alloc` (the allocation-counting allocator), `busy` (CPU-bound
//!   threads beside a row), `zipf` (key sequences), `procs` (a process
//!   tree's CPU time and memory from `/proc`), `pg` (a private PostgreSQL
//!   cluster), `servers` (starting `holdline serve`, `redis-server`, etcd
//!   and PostgreSQL), `peers` (etcd's and PostgreSQL's lock clients; uses
//!   `servers`), `cluster` (the scenario's setups and cluster nodes, on
//!   `holdline_testing::cluster`; uses `servers`), `designs`
//!   (what is measured), `permit_designs` (what the permits scenarios
//!   measure; uses `designs` for the `--design` names), `units` (number
//!   formats);
//! - `scenario` (the scenarios' names, legends, constants and [`Cfg`]),
//!   `row` (a run, a row as the median of its runs, ratios to holdline),
//!   `measure` (what every runner shares);
//! - one file per family of runners: `rates`, `fresh_keys`, `handoff`,
//!   `deadline`, `async_scenarios` (tasks on a tokio runtime),
//!   `permit_scenarios` (keys of several permits: semaphores and
//!   read-write locks, on threads and tasks),
//!   `server_scenarios` (holdline serve against redis-server on loopback),
//!   `cluster_scenarios` (a plain node against clusters of 1-3 nodes);
//!   `scenarios` sends a scenario to its runner;
//! - `schema` (a row's fields, once, for the table, CSV and JSON), `report`
//!   (the tables), `verdict` (one line per question a user asks), `plots`
//!   (SVGs), `cli` (the command line), `flame` (flamegraphs), `bench`
//!   (plans the tour, the full run or the smoke run, and runs the rows).
//!
//! [`Cfg`]: scenario::Cfg

mod alloc;
mod async_scenarios;
mod bench;
mod busy;
mod cli;
mod cluster;
mod cluster_scenarios;
mod deadline;
mod designs;
mod flame;
mod fresh_keys;
mod handoff;
mod measure;
mod peers;
mod permit_designs;
mod permit_scenarios;
mod pg;
mod plots;
mod procs;
mod rates;
mod report;
mod row;
mod scenario;
mod scenarios;
mod schema;
mod server_scenarios;
mod servers;
mod units;
mod verdict;
mod zipf;

use std::path::PathBuf;
use std::process::ExitCode;

/// The tests' process starter (`holdline_testing::spawn`), as `crate::spawn`.
use holdline_testing::spawn;

use clap::Parser;

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

/// `<workspace>/<name>`: the workspace root is the harness package's parent.
pub fn workspace_path(name: &str) -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .map(|p| p.join(name))
        .unwrap_or_else(|| PathBuf::from(name))
}

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cli.command {
        Some(cli::Command::Flamegraph(args)) => match flame::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("harness flamegraph: {e}");
                ExitCode::FAILURE
            }
        },
        None => bench::bench(&cli.bench),
    }
}
