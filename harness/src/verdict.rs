//! The verdict: one screen, one line per question a user asks ("is it
//! faster than what I use today?"), each with holdline's figure, the best
//! other design's name and figure, and holdline's edge over it with the
//! spread of that edge over the rounds; a question that could not be
//! answered here says how to make it answerable.
//!
//! The edge reads one way on every line: above 1, holdline is better
//! (faster, fewer bytes, a shorter p99) by that factor.

use comfy_table::CellAlignment::{Left, Right};

use crate::designs::Design;
use crate::report::plain_table;
use crate::row::{Row, Spread};
use crate::scenario::Scenario;
use crate::units::{fmt_bytes, fmt_ns, fmt_rate};

/// The command that times the uncontended hold of one thread against the
/// map pattern and the plain mutexes (criterion measures that best: one
/// thread, nothing else running).
pub const HOT_PATH: &str = "cargo bench -p holdline-benches --bench hold";

/// The cluster row the routing question reads (the tour runs only it).
pub const CLUSTER: &str = "cluster-3";

/// Bytes left allocated that count as none: an allocator's slack.
const NOISE_BYTES: i64 = 64 << 10;

/// A question and the rows that answer it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Question {
    pub words: &'static str,
    pub scenario: Scenario,
    pub threads: usize,
    pub busy: usize,
    pub measure: Measure,
    /// holdline's design that answers, when not the scenario's reference.
    pub design: Option<&'static str>,
    /// The design it is held against, when not the best other that ran.
    pub against: Option<&'static str>,
}

/// What a question compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// Operations per second: more is better.
    Rate,
    /// Median p99 latency: less is better.
    P99,
    /// The longest single wait in any run: less is better. (With more
    /// threads than cores, what strict FIFO buys: no thread waits long.)
    Worst,
    /// Bytes left once the keys are idle: fewer is better.
    MemorySettled,
}

/// The questions the rows answer, in the order the verdict prints them
/// (memory per connection is measured on its own; the uncontended hold of
/// one thread against the map pattern is criterion's: [`HOT_PATH`]).
pub const QUESTIONS: [Question; 25] = [
    Question {
        words: "uncontended hold, 16 keys a thread, 1 thread",
        scenario: Scenario::Uncontended,
        threads: 1,
        busy: 0,
        measure: Measure::Rate,
        design: None,
        against: None,
    },
    Question {
        words: "README's hold, with maxHold 120 s, 1 thread",
        scenario: Scenario::Uncontended,
        threads: 1,
        busy: 0,
        measure: Measure::Rate,
        design: Some("holdline-maxhold"),
        against: None,
    },
    Question {
        words: "maxHold 120 s against holdline's plain hold",
        scenario: Scenario::Uncontended,
        threads: 1,
        busy: 0,
        measure: Measure::Rate,
        design: Some("holdline-maxhold"),
        against: Some("holdline"),
    },
    Question {
        words: "one hot key, 2 threads (holdline FIFO)",
        scenario: Scenario::HotKey,
        threads: 2,
        busy: 0,
        measure: Measure::Rate,
        design: None,
        against: None,
    },
    Question {
        words: "one hot key, 2 threads, beside a busy CPU",
        scenario: Scenario::HotKey,
        threads: 2,
        busy: 1,
        measure: Measure::Rate,
        design: None,
        against: None,
    },
    Question {
        words: "one hot key, 4 threads on 2 cores (FIFO)",
        scenario: Scenario::HotKey,
        threads: 4,
        busy: 0,
        measure: Measure::Rate,
        design: None,
        against: None,
    },
    Question {
        words: "one hot key, 4 threads: worst wait",
        scenario: Scenario::HotKey,
        threads: 4,
        busy: 0,
        measure: Measure::Worst,
        design: None,
        against: None,
    },
    Question {
        words: "one hot key, 8 threads on 2 cores (FIFO)",
        scenario: Scenario::HotKey,
        threads: 8,
        busy: 0,
        measure: Measure::Rate,
        design: None,
        against: None,
    },
    Question {
        words: "one hot key, 8 threads: worst wait",
        scenario: Scenario::HotKey,
        threads: 8,
        busy: 0,
        measure: Measure::Worst,
        design: None,
        against: None,
    },
    Question {
        words: "one hot key, 4 threads, bounded bypass (1 ms)",
        scenario: Scenario::HotKey,
        threads: 4,
        busy: 0,
        measure: Measure::Rate,
        design: Some("holdline-bounded"),
        against: None,
    },
    Question {
        words: "one hot key, 4 threads, bounded: worst wait",
        scenario: Scenario::HotKey,
        threads: 4,
        busy: 0,
        measure: Measure::Worst,
        design: Some("holdline-bounded"),
        against: None,
    },
    Question {
        words: "one hot key, 8 threads, bounded bypass (1 ms)",
        scenario: Scenario::HotKey,
        threads: 8,
        busy: 0,
        measure: Measure::Rate,
        design: Some("holdline-bounded"),
        against: None,
    },
    Question {
        words: "one hot key, 8 threads, bounded: worst wait",
        scenario: Scenario::HotKey,
        threads: 8,
        busy: 0,
        measure: Measure::Worst,
        design: Some("holdline-bounded"),
        against: None,
    },
    Question {
        words: "async tasks, one hot key, 4 tasks",
        scenario: Scenario::AsyncHotKey,
        threads: 4,
        busy: 0,
        measure: Measure::Rate,
        design: None,
        against: None,
    },
    Question {
        words: "semaphore of 4 permits, 64 tasks",
        scenario: Scenario::AsyncSemaphore,
        threads: 64,
        busy: 0,
        measure: Measure::Rate,
        design: None,
        against: None,
    },
    Question {
        words: "read-mostly key, 2 threads (1 in 10 exclusive)",
        scenario: Scenario::ReadMostly,
        threads: 2,
        busy: 0,
        measure: Measure::Rate,
        design: None,
        against: None,
    },
    Question {
        words: "read-mostly key, 4 threads on 2 cores",
        scenario: Scenario::ReadMostly,
        threads: 4,
        busy: 0,
        measure: Measure::Rate,
        design: None,
        against: None,
    },
    Question {
        words: "read-mostly key, 8 threads on 2 cores",
        scenario: Scenario::ReadMostly,
        threads: 8,
        busy: 0,
        measure: Measure::Rate,
        design: None,
        against: None,
    },
    Question {
        words: "read-mostly key, 4 threads, bounded bypass (1 ms)",
        scenario: Scenario::ReadMostly,
        threads: 4,
        busy: 0,
        measure: Measure::Rate,
        design: Some("holdline-bounded"),
        against: None,
    },
    Question {
        words: "read-mostly key, 8 threads, bounded bypass (1 ms)",
        scenario: Scenario::ReadMostly,
        threads: 8,
        busy: 0,
        measure: Measure::Rate,
        design: Some("holdline-bounded"),
        against: None,
    },
    Question {
        words: "a million fresh keys: memory once idle",
        scenario: Scenario::MillionKeys,
        threads: 1,
        busy: 0,
        measure: Measure::MemorySettled,
        design: None,
        against: None,
    },
    Question {
        words: "server round trip: hold + release, 1 conn",
        scenario: Scenario::ServerUncontended,
        threads: 1,
        busy: 0,
        measure: Measure::Rate,
        design: None,
        against: None,
    },
    Question {
        words: "server hot key: grants/s, 16 conns",
        scenario: Scenario::ServerHotKey,
        threads: 16,
        busy: 0,
        measure: Measure::Rate,
        design: None,
        against: None,
    },
    Question {
        words: "server hot key: p99 wait, 16 conns",
        scenario: Scenario::ServerHotKey,
        threads: 16,
        busy: 0,
        measure: Measure::P99,
        design: None,
        against: None,
    },
    Question {
        words: "cluster of 3 nodes vs 1 plain node",
        scenario: Scenario::Cluster,
        threads: 16,
        busy: 0,
        measure: Measure::Rate,
        design: None,
        against: None,
    },
];

/// One printed line: the question, holdline's figure, the other's name
/// and figure, and the edge with its spread (or why there is none).
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub question: String,
    pub holdline: String,
    pub other: String,
    pub edge: String,
}

impl Line {
    fn not_run(question: &str, how: String) -> Line {
        Line {
            question: question.into(),
            holdline: "n/a".into(),
            other: String::new(),
            edge: how,
        }
    }
}

/// `x` as an edge: `2.31x`.
fn edge(x: f64) -> String {
    format!("{x:.2}x")
}

/// The edge and its per-round spread, `2.31x (2.10-2.52)`.
fn edge_spread(s: Spread<f64>) -> String {
    format!("{} ({:.2}-{:.2})", edge(s.median), s.min, s.max)
}

/// What to do so that a row that was n/a runs.
fn how_to_run(row: &Row) -> String {
    let how = match row.na {
        Some("redis-server missing") => "apt-get install redis-server",
        Some("etcd missing") => "apt-get install etcd-server",
        Some("holdline binary missing") => "cargo build --release --bin holdline",
        Some(other) => other,
        None => "",
    };
    format!("n/a: {how}")
}

/// The row of `q` for `design`.
fn row_of<'a>(rows: &'a [Row], q: &Question, design: &str) -> Option<&'a Row> {
    rows.iter().find(|r| {
        (r.scenario, r.threads, r.busy) == (q.scenario, q.threads, q.busy) && r.design == design
    })
}

/// The best of the other designs' rows that ran, by `q`'s measure.
fn best_other<'a>(rows: &'a [Row], q: &Question) -> Option<&'a Row> {
    let reference = q.scenario.reference();
    let baseline = |name: &str| Design::ALL.iter().any(|d| d.single() && d.name() == name);
    let others = rows.iter().filter(|r| {
        (r.scenario, r.threads, r.busy) == (q.scenario, q.threads, q.busy)
            && r.design != reference
            && !(reference == "holdline" && Design::is_holdline(r.design))
            && r.na.is_none()
            && !baseline(r.design)
    });
    match q.measure {
        Measure::Rate => others.max_by(|a, b| a.rate.median.total_cmp(&b.rate.median)),
        Measure::P99 => others.min_by_key(|r| r.p99.median),
        Measure::Worst => others.min_by_key(|r| r.max),
        Measure::MemorySettled => others
            .filter(|r| r.mem_settled.is_some())
            .min_by_key(|r| r.mem_settled),
    }
}

/// The edge of `h` over `o` in rates: their medians' ratio (as the
/// table's), with the range of the rounds' ratios (runs made moments apart
/// pair up) when the runs pair.
fn rate_edge(h: &Row, o: &Row) -> String {
    let median = h.rate.median / o.rate.median;
    let paired = h.rates.len() == o.rates.len() && h.rates.len() > 1;
    if paired {
        let rounds = Spread::of(h.rates.iter().zip(&o.rates).map(|(h, o)| h / o));
        edge_spread(Spread { median, ..rounds })
    } else {
        edge(median)
    }
}

/// A figure of `r` by `measure`, as the table prints it.
fn figure(r: &Row, measure: Measure) -> String {
    match measure {
        Measure::Rate => {
            let rate = fmt_rate(r.rate.median);
            format!("{} {}/s", rate.trim_end_matches("/s"), r.unit)
        }
        Measure::P99 => fmt_ns(r.p99.median),
        Measure::Worst => format!("worst {}", fmt_ns(r.max)),
        // Less than nothing: it gave back more than the run took.
        Measure::MemorySettled => fmt_bytes(r.mem_settled.unwrap_or(0).max(0)),
    }
}

/// `q`'s line from the rows.
pub fn answer(rows: &[Row], q: &Question) -> Line {
    let reference = q.design.unwrap_or(q.scenario.reference());
    let Some(h) = row_of(rows, q, reference) else {
        return Line::not_run(q.words, "not run".into());
    };
    if h.na.is_some() {
        return Line::not_run(q.words, how_to_run(h));
    }
    // A cluster's other is the cluster, measured against the plain node.
    let o = match (q.scenario, q.against) {
        (Scenario::Cluster, _) => row_of(rows, q, CLUSTER).filter(|r| r.na.is_none()),
        (_, Some(against)) => row_of(rows, q, against).filter(|r| r.na.is_none()),
        _ => best_other(rows, q),
    };
    let Some(o) = o else {
        let how = rows
            .iter()
            .find(|r| {
                (r.scenario, r.threads, r.busy) == (q.scenario, q.threads, q.busy)
                    && r.design != reference
            })
            .map_or_else(|| "nothing else ran".into(), how_to_run);
        return Line {
            holdline: figure(h, q.measure),
            ..Line::not_run(q.words, how)
        };
    };
    let edge = match q.measure {
        // The plain node's rate over the cluster's: the cluster's time.
        Measure::Rate if q.scenario == Scenario::Cluster => {
            format!("costs {} the time", rate_edge(h, o))
        }
        // holdline against itself: what the option costs, as time.
        Measure::Rate if q.against.is_some() => {
            format!("costs {} the time", rate_edge(o, h))
        }
        Measure::Rate => rate_edge(h, o),
        Measure::P99 => edge(o.p99.median as f64 / h.p99.median.max(1) as f64),
        Measure::Worst => edge(o.max as f64 / h.max.max(1) as f64),
        Measure::MemorySettled => {
            let (hm, om) = (h.mem_settled.unwrap_or(0), o.mem_settled.unwrap_or(0));
            if hm.max(om) < NOISE_BYTES {
                "even: both give their memory back".into()
            } else {
                edge(om.max(NOISE_BYTES) as f64 / hm.max(NOISE_BYTES) as f64)
            }
        }
    };
    let holdline = if reference == "holdline" {
        figure(h, q.measure)
    } else {
        format!("{} {}", h.design, figure(h, q.measure))
    };
    let (holdline, other) = if q.scenario == Scenario::Cluster {
        // The reference is the plain node: the cluster is "the other".
        (format!("{} {}", o.design, figure(o, q.measure)), holdline)
    } else {
        (holdline, format!("{} {}", o.design, figure(o, q.measure)))
    };
    Line {
        question: q.words.into(),
        holdline,
        other,
        edge,
    }
}

/// Memory per connection holding a key: holdline's and Redis's bytes.
pub fn connection_memory_line(holdline: Result<f64, String>, redis: Result<f64, String>) -> Line {
    let words = "server memory per connection holding a key";
    match (holdline, redis) {
        (Err(how), _) => Line::not_run(words, format!("n/a: {how}")),
        (Ok(h), Err(how)) => Line {
            holdline: fmt_bytes(h as i64),
            ..Line::not_run(words, format!("n/a: {how}"))
        },
        (Ok(h), Ok(r)) => Line {
            question: words.into(),
            holdline: fmt_bytes(h as i64),
            other: format!("redis {}", fmt_bytes(r as i64)),
            edge: edge(r.max(1.0) / h.max(1.0)),
        },
    }
}

/// The verdict's screen: a heading, the lines in columns, and how to read them.
pub fn render(lines: &[Line], elapsed_s: f64) -> String {
    let mut table = plain_table(
        &["question", "holdline", "best other", "holdline's edge"],
        &[Left, Right, Left, Left],
    );
    table.add_rows(
        lines
            .iter()
            .map(|l| [&l.question, &l.holdline, &l.other, &l.edge]),
    );
    format!(
        "\n== verdict ({elapsed_s:.0} s)\n{}\n\
         edge: above 1, holdline is better by that factor (faster, fewer bytes, shorter p99 or worst wait); \
         (min-max) over rounds run moments apart.\n\
         Every row and its note: the table above, and results.csv under the output folder.\n\
         The uncontended hold of one thread against dashmap+pl (one key, 10,000 keys): {HOT_PATH}\n",
        table.trim_fmt()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::Run;

    /// A row of `q` for `design`: one run per rate, p99 = 1e6 / rate ns,
    /// `mem` bytes left idle.
    fn row(q: &Question, design: &'static str, rates: &[f64], na: Option<&'static str>) -> Row {
        let runs: Vec<Run> = rates
            .iter()
            .map(|&rate| {
                let mut r = Run::new(q.scenario, q.threads, design);
                r.set_rate(rate as u64, 1.0);
                r.p99 = 1_000_000 / rate as u64;
                r.mem_settled = Some(1_000_000_000 / rate as i64);
                r.na = na;
                r
            })
            .collect();
        Row::of_runs(&runs, q.busy)
    }

    fn question(scenario: Scenario, measure: Measure) -> &'static Question {
        QUESTIONS
            .iter()
            .find(|q| q.scenario == scenario && q.measure == measure)
            .unwrap()
    }

    /// The maxHold lines: README's hold against the best other design
    /// (never holdline's plain hold), and against the plain hold as the
    /// time the option costs; the plain hold's own line never counts the
    /// maxHold hold as "the other".
    #[test]
    fn the_max_hold_lines_read_against_the_map_and_the_plain_hold() {
        let [plain_q, readme_q, cost_q] = [0, 1, 2].map(|i| &QUESTIONS[i]);
        let rows = [
            row(plain_q, "holdline", &[40.0, 44.0], None),
            row(plain_q, "holdline-maxhold", &[30.0, 33.0], None),
            row(plain_q, "dashmap+pl", &[20.0, 22.0], None),
        ];
        let plain = answer(&rows, plain_q);
        assert!(plain.other.starts_with("dashmap+pl "), "{}", plain.other);
        assert_eq!(plain.edge, "2.00x (2.00-2.00)");
        let readme = answer(&rows, readme_q);
        assert!(readme.holdline.starts_with("holdline-maxhold "));
        assert!(readme.other.starts_with("dashmap+pl "), "{}", readme.other);
        assert_eq!(readme.edge, "1.50x (1.50-1.50)");
        let cost = answer(&rows, cost_q);
        assert!(cost.other.starts_with("holdline "), "{}", cost.other);
        assert_eq!(cost.edge, "costs 1.33x (1.33-1.33) the time");
    }

    #[test]
    fn the_best_other_is_the_fastest_keyed_design_and_the_edge_pairs_rounds() {
        let hot = question(Scenario::HotKey, Measure::Rate);
        let rows = [
            row(hot, "holdline", &[200.0, 100.0, 300.0], None),
            row(hot, "lockable", &[50.0, 50.0, 50.0], None),
            row(hot, "dashmap+pl", &[100.0, 100.0, 100.0], None),
            // A single mutex is a baseline, not a design one picks instead.
            row(hot, "pl-1key", &[1e9, 1e9, 1e9], None),
        ];
        let line = answer(&rows, hot);
        assert!(line.other.starts_with("dashmap+pl "), "{line:?}");
        // Round by round: 2, 1 and 3.
        assert_eq!(line.edge, "2.00x (1.00-3.00)");
        assert_eq!(line.holdline, "200 holds/s");
    }

    #[test]
    fn a_row_that_could_not_run_says_how() {
        let rt = question(Scenario::ServerUncontended, Measure::Rate);
        let rows = [
            row(rt, "holdline", &[10.0, 10.0, 10.0], None),
            row(rt, "redis", &[1.0], Some("redis-server missing")),
        ];
        let line = answer(&rows, rt);
        assert!(line.holdline.ends_with("/s"), "{line:?}");
        assert_eq!(line.edge, "n/a: apt-get install redis-server");
        let none = answer(&rows[1..], rt);
        assert_eq!(
            (none.holdline.as_str(), none.edge.as_str()),
            ("n/a", "not run")
        );
        let cluster = question(Scenario::Cluster, Measure::Rate);
        let rows = [
            row(cluster, "plain", &[10.0], None),
            row(cluster, CLUSTER, &[1.0], Some("etcd missing")),
        ];
        assert_eq!(
            answer(&rows, cluster).edge,
            "n/a: apt-get install etcd-server"
        );
    }

    #[test]
    fn p99_and_memory_edges_read_above_one_when_holdline_is_better() {
        let p99 = question(Scenario::ServerHotKey, Measure::P99);
        let rows = [
            row(p99, "holdline", &[100.0], None),
            row(p99, "redis", &[25.0], None),
        ];
        // p99 is 1e6/rate: 10 ms against 40 ms.
        assert_eq!(answer(&rows, p99).edge, "4.00x");
        let mem = question(Scenario::MillionKeys, Measure::MemorySettled);
        // 1e9/rate bytes: 1 MB against 4 MB, then both under the noise.
        let rows = [
            row(mem, "holdline", &[1000.0], None),
            row(mem, "lockable", &[250.0], None),
        ];
        assert_eq!(answer(&rows, mem).edge, "4.00x");
        let rows = [
            row(mem, "holdline", &[1e6], None),
            row(mem, "lockable", &[1e5], None),
        ];
        assert_eq!(answer(&rows, mem).edge, "even: both give their memory back");
        let line = connection_memory_line(Ok(1000.0), Ok(3000.0));
        assert_eq!(line.edge, "3.00x");
        let text = render(&[line], 1.0);
        assert!(text.contains("== verdict"), "{text}");
        assert!(text.contains("redis 2.9KiB"), "{text}");
        // The uncontended hold is criterion's: the screen names its command.
        assert!(text.contains(HOT_PATH), "{text}");
    }

    #[test]
    fn the_cluster_line_is_the_cost_of_three_nodes_against_one() {
        let q = question(Scenario::Cluster, Measure::Rate);
        let rows = [
            row(q, "plain", &[300.0, 200.0], None),
            row(q, CLUSTER, &[100.0, 100.0], None),
        ];
        let line = answer(&rows, q);
        assert!(line.holdline.starts_with("cluster-3 "), "{line:?}");
        assert!(line.other.starts_with("plain "), "{line:?}");
        assert_eq!(line.edge, "costs 2.00x (2.00-3.00) the time");
    }

    /// The worst-wait lines pick the other design whose longest wait is the
    /// shortest, and read its worst over holdline's (above 1: holdline's
    /// worst wait is shorter).
    #[test]
    fn the_worst_wait_lines_read_the_longest_single_wait() {
        let q = question(Scenario::HotKey, Measure::Worst);
        assert_eq!(q.threads, 4);
        let with_max = |design, max_ns: u64| {
            let mut r = row(q, design, &[100.0], None);
            r.max = max_ns;
            r
        };
        let rows = [
            with_max("holdline", 400_000),
            with_max("dashmap+pl", 6_000_000),
            with_max("tokio", 2_000_000),
        ];
        let line = answer(&rows, q);
        assert_eq!(line.edge, "5.00x");
        assert!(line.other.starts_with("tokio worst "), "{line:?}");
        assert!(line.holdline.starts_with("worst "), "{line:?}");
    }
}
