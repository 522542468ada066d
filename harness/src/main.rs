//! `cargo run --release -p harness [-- OPTIONS]`: holdline against the keyed
//! mutex designs people use instead, scenario by scenario.
//! `cargo run --release -p harness -- flamegraph`: flamegraphs of holdline's
//! uncontended and hot-key paths (pprof).
//!
//! Modules: `cli` (the command line), `bench` (plans and runs the rows),
//! `scenarios` and `designs` (what is measured, on what), `async_scenarios`
//! (tasks on a tokio runtime), `server_scenarios` and `servers` (holdline
//! serve against redis-server over loopback), `row` (a run and
//! the median of a row's runs), `busy` (CPU-bound threads beside a row),
//! `schema` (a row's fields, once, for the table, CSV and JSON), `report`
//! (the table and ratios), `plots` (SVGs), `flame` (flamegraphs), `alloc`
//! (the allocation-counting allocator), `zipf` (key sequences).

mod alloc;
mod async_scenarios;
mod bench;
mod busy;
mod cli;
mod designs;
mod flame;
mod plots;
mod report;
mod row;
mod scenarios;
mod schema;
mod server_scenarios;
mod servers;
mod zipf;

use std::path::PathBuf;
use std::process::ExitCode;

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
