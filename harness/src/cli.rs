//! The command line: what `harness` and `harness flamegraph` accept.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::designs::Design;
use crate::scenario::Scenario;

/// holdline against the keyed-mutex designs people use instead, scenario by
/// scenario: a table (time and p99 relative to holdline per row), and CSV,
/// JSON and SVG plots under the output folder.
#[derive(Parser, Debug)]
#[command(
    name = "harness",
    version,
    after_help = AFTER_HELP,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub bench: BenchArgs,
}

const AFTER_HELP: &str = "\
Default run: the tour, about 2 to 3 minutes on 2 cores: the rows that
answer the questions a user asks (uncontended holds, one hot key quiet,
beside a busy CPU and at 4 and 8 threads with the worst wait, async
tasks, a read-mostly key at 2, 4 and 8 threads, a million fresh keys, the server's
round trip and hot key against Redis, memory per connection, the
cluster's routing cost), each 3 times, ending with the verdict: one line
per question, holdline against the best other design.

--full: every scenario at threads 1,2,4 on a quiet machine, plus the
hot-key rows again with one CPU-bound thread beside them (--busy 0 with
hot-key also at 1); every row 3 times, reported as the median with the
min-max range (README's numbers, about 19 minutes); the verdict too.
--scenario, --design, --threads or --busy pick rows as --full would.

--scenario server: holdline against Redis, etcd (its Lock RPC) and
PostgreSQL (advisory locks), each started here on loopback when
installed (else n/a with the install command; HOLDLINE_REQUIRE_TOOLS=1
fails instead), with the server's CPU per operation, a paced light load,
memory per client, and holdline's history off, on and with an audit log.

Exit status: 0; 1 when a row panicked or an output could not be written;
2 on bad arguments; 3 when a row ran far past its time budget (a hang).";

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Flamegraphs of holdline's uncontended, hot-key and fresh-key paths (pprof).
    Flamegraph(FlameArgs),
}

#[derive(Args, Debug, Default)]
pub struct BenchArgs {
    /// CI smoke run: short rows, threads 1,2, 200k keys, each row once.
    #[arg(long, conflicts_with = "full")]
    pub quick: bool,
    /// Every scenario, thread count and design (README's numbers).
    #[arg(long)]
    pub full: bool,
    /// Thread counts [default: 1,2,4; --quick: 1,2].
    #[arg(long, value_delimiter = ',', value_parser = positive)]
    pub threads: Vec<usize>,
    /// Throughput phase per row in ms; the latency phase is half as long
    /// [default: 600; --full: 1000; --quick: 120].
    #[arg(long, value_parser = millis)]
    pub duration: Option<u64>,
    /// Scenarios to run: uncontended, hot-key, zipf, million-keys, handoff,
    /// deadline, async-uncontended, async-hot-key, async-fresh-keys,
    /// async-deadline, semaphore, async-semaphore, read-mostly,
    /// server-uncontended, server-pipelined, server-hot-key, server-paced,
    /// server-memory, server-connections, server-history, cluster; or a
    /// group: blocking, async, server, permits [default: the tour's;
    /// --full: all; --quick: all but the server ones, plus
    /// server-uncontended and server-hot-key at 16 connections].
    #[arg(
        long = "scenario",
        alias = "scenarios",
        value_delimiter = ',',
        value_parser = scenarios
    )]
    pub scenarios: Vec<Scenarios>,
    /// Designs to run [default: all].
    #[arg(long = "design", alias = "designs", value_delimiter = ',', value_enum)]
    pub designs: Vec<Design>,
    /// CPU-bound threads spinning beside each row, one pass over the rows
    /// per value: `--busy 0,1,2` [default: 0, and 1 for hot-key too].
    #[arg(long, value_delimiter = ',')]
    pub busy: Vec<usize>,
    /// Runs of each row; a row reports their median and min-max range
    /// [default: 3; --quick: 1].
    #[arg(long, value_parser = positive)]
    pub runs: Option<usize>,
    /// Distinct keys in million-keys [default: 1000000; --quick: 200000].
    #[arg(long, value_parser = count)]
    pub keys: Option<usize>,
    /// Output folder [default: $CARGO_TARGET_DIR/harness, else <workspace>/target/harness].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Skip the SVG plots.
    #[arg(long)]
    pub no_plots: bool,
}

#[derive(Args, Debug)]
pub struct FlameArgs {
    /// Profile each workload this long, in ms [default: 6000; --quick: 1000].
    #[arg(long, value_parser = millis)]
    pub duration: Option<u64>,
    /// Shorter profiles.
    #[arg(long)]
    pub quick: bool,
    /// The design to profile.
    #[arg(long, value_enum, default_value = "holdline")]
    pub design: Design,
    /// Output folder [default: <workspace>/flamegraphs].
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One `--scenario` value: a scenario, or the scenarios of a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenarios(pub Vec<Scenario>);

fn scenarios(s: &str) -> Result<Scenarios, String> {
    use clap::ValueEnum;
    let s = s.trim();
    if let Some((_, kind)) = Scenario::GROUPS.iter().find(|(name, _)| *name == s) {
        let of_kind = Scenario::ALL.into_iter().filter(|x| x.kind() == *kind);
        return Ok(Scenarios(of_kind.collect()));
    }
    Scenario::from_str(s, false)
        .map(|x| Scenarios(vec![x]))
        .map_err(|_| {
            let names: Vec<&str> = Scenario::ALL.iter().map(|x| x.name()).collect();
            let groups: Vec<&str> = Scenario::GROUPS.iter().map(|g| g.0).collect();
            format!(
                "{s:?} is not a scenario: one of {}, or a group: {}",
                names.join(", "),
                groups.join(", ")
            )
        })
}

fn positive(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{s:?} is not a positive integer")),
    }
}

/// Milliseconds, with or without an `ms` suffix.
fn millis(s: &str) -> Result<u64, String> {
    s.trim()
        .trim_end_matches("ms")
        .parse()
        .map_err(|_| format!("{s:?} is not a number of milliseconds"))
}

/// A count, with `_` separators allowed (`1_000_000`).
fn count(s: &str) -> Result<usize, String> {
    s.trim()
        .replace('_', "")
        .parse()
        .map_err(|_| format!("{s:?} is not a number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("harness").chain(args.iter().copied()))
    }

    #[test]
    fn lists_and_units_parse() {
        let cli = parse(&[
            "--threads",
            "2,4",
            "--scenario",
            "hot-key,million-keys",
            "--design=holdline,std-map+std",
            "--busy",
            "0,1,2",
            "--duration",
            "250ms",
            "--keys",
            "1_000",
            "--runs",
            "5",
        ])
        .unwrap();
        let b = cli.bench;
        assert_eq!(b.threads, [2, 4]);
        assert_eq!(
            b.scenarios,
            [
                Scenarios(vec![Scenario::HotKey]),
                Scenarios(vec![Scenario::MillionKeys])
            ]
        );
        assert_eq!(b.designs, [Design::Holdline, Design::NaiveStd]);
        assert_eq!(b.busy, [0, 1, 2]);
        assert_eq!(
            (b.duration, b.keys, b.runs),
            (Some(250), Some(1000), Some(5))
        );
        assert!(cli.command.is_none());
    }

    #[test]
    fn groups_stand_for_their_scenarios() {
        let b = parse(&["--scenario", "async,server-memory"]).unwrap().bench;
        assert_eq!(
            b.scenarios,
            [
                Scenarios(vec![
                    Scenario::AsyncUncontended,
                    Scenario::AsyncHotKey,
                    Scenario::AsyncFreshKeys,
                    Scenario::AsyncDeadline
                ]),
                Scenarios(vec![Scenario::ServerMemory])
            ]
        );
        let server = parse(&["--scenario", "server"]).unwrap().bench.scenarios;
        assert_eq!(server[0].0.len(), 7);
    }

    #[test]
    fn bad_values_are_refused() {
        for bad in [
            &["--threads", "0"][..],
            &["--runs", "0"],
            &["--scenario", "hotkey"],
            &["--scenario", "servers"],
            &["--design", "mutex"],
            &["--busy", "-1"],
            &["--frobnicate"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn flamegraph_takes_its_own_options() {
        let cli = parse(&["flamegraph", "--design", "dashmap+pl", "--duration", "10"]).unwrap();
        match cli.command {
            Some(Command::Flamegraph(f)) => {
                assert_eq!(f.design, Design::DashPl);
                assert_eq!(f.duration, Some(10));
            }
            None => panic!("no subcommand"),
        }
    }
}
