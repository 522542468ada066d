//! The stdout table, number formats, and the ratios against holdline.

use std::fmt::Write as _;

use crate::row::Row;
use crate::scenarios::{Cfg, Scenario};
use crate::schema::{self, Align};

pub fn fmt_ns(ns: u64) -> String {
    let f = ns as f64;
    if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        format!("{:.1}us", f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2}ms", f / 1e6)
    } else {
        format!("{:.2}s", f / 1e9)
    }
}

/// A rate without its `/s`.
fn fmt_count(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2}M", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.1}k", r / 1e3)
    } else {
        format!("{r:.0}")
    }
}

pub fn fmt_rate(r: f64) -> String {
    format!("{}/s", fmt_count(r))
}

/// `1.20M-2.40M/s`.
pub fn fmt_rate_range(min: f64, max: f64) -> String {
    format!("{}-{}/s", fmt_count(min), fmt_count(max))
}

pub fn fmt_bytes(b: i64) -> String {
    let a = b.unsigned_abs() as f64;
    let sign = if b < 0 { "-" } else { "" };
    if a < 1024.0 {
        format!("{b}B")
    } else if a < 1024.0 * 1024.0 {
        format!("{sign}{:.1}KiB", a / 1024.0)
    } else {
        format!("{sign}{:.1}MiB", a / 1024.0 / 1024.0)
    }
}

/// The (scenario, busy) groups of `rows`, each once, in the order they first appear.
pub fn groups(rows: &[Row]) -> Vec<(Scenario, usize)> {
    let mut groups = Vec::new();
    for r in rows {
        if !groups.contains(&(r.scenario, r.busy)) {
            groups.push((r.scenario, r.busy));
        }
    }
    groups
}

/// The holdline row of the same scenario, thread count and busy level.
fn holdline_of<'a>(rows: &'a [Row], r: &Row) -> Option<&'a Row> {
    rows.iter().find(|h| {
        h.design == crate::designs::Design::Holdline.name()
            && (h.scenario, h.threads, h.busy) == (r.scenario, r.threads, r.busy)
            && h.na.is_none()
    })
}

/// The design's time per operation relative to holdline's (holdline's
/// median rate over the design's): above 1, slower than holdline.
pub fn time_ratio(rows: &[Row], r: &Row) -> Option<f64> {
    let h = holdline_of(rows, r)?;
    (r.na.is_none() && r.rate.median > 0.0).then(|| h.rate.median / r.rate.median)
}

/// The design's median p99 relative to holdline's: above 1, worse than holdline.
pub fn p99_ratio(rows: &[Row], r: &Row) -> Option<f64> {
    let h = holdline_of(rows, r)?;
    (r.na.is_none() && h.p99.median > 0 && r.p99.median > 0)
        .then(|| r.p99.median as f64 / h.p99.median as f64)
}

/// What the busy level of a group means, for its heading.
fn busy_words(busy: usize) -> String {
    match busy {
        0 => String::new(),
        1 => ", busy 1 (one CPU-bound thread spinning beside each run)".into(),
        n => format!(", busy {n} ({n} CPU-bound threads spinning beside each run)"),
    }
}

/// One section per (scenario, busy) group, headed by what the scenario measures.
pub fn table(rows: &[Row], cfg: &Cfg) -> String {
    let columns: Vec<_> = schema::columns().map(|(_, c)| c).collect();
    let mut out = String::new();
    for (s, busy) in groups(rows) {
        let mut cells: Vec<Vec<String>> =
            vec![columns.iter().map(|c| c.head.to_string()).collect()];
        for r in rows.iter().filter(|r| (r.scenario, r.busy) == (s, busy)) {
            cells.push(schema::cells(rows, r));
        }
        let widths: Vec<usize> = (0..columns.len())
            .map(|i| {
                cells
                    .iter()
                    .map(|c| c[i].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let _ = writeln!(
            out,
            "\n== {}{}: {}",
            s.name(),
            busy_words(busy),
            s.legend(cfg)
        );
        for (n, c) in cells.iter().enumerate() {
            let mut line = String::new();
            for (i, cell) in c.iter().enumerate() {
                let w = widths[i];
                match columns[i].align {
                    _ if i == columns.len() - 1 => line.push_str(cell),
                    Align::Left => {
                        let _ = write!(line, "{cell:<w$}  ");
                    }
                    Align::Right => {
                        let _ = write!(line, "{cell:>w$}  ");
                    }
                }
            }
            let _ = writeln!(out, "{}", line.trim_end());
            if n == 0 {
                let total: usize = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
                let _ = writeln!(out, "{}", "-".repeat(total.min(180)));
            }
        }
    }
    out
}

/// What the table's columns mean, one line each, for below it.
pub fn legend(runs: usize) -> String {
    let of = if runs > 1 {
        format!(
            "rate, p99: the median of {runs} runs, their min-max beside; p50, p999: the median; max: the largest of any run"
        )
    } else {
        "one run per row".into()
    };
    [
        of.as_str(),
        "time vs hl: the design's time per operation relative to holdline's (holdline's rate / the design's): above 1 = slower than holdline",
        "p99 vs hl: the design's p99 / holdline's: above 1 = worse than holdline",
        "busy: CPU-bound threads spinning beside the row",
        "fifo: grants in arrival order; deadline LACKS: no bounded wait",
        "ooo: grants out of arrival order / grants sampled (a ticket taken just before each hold, \
         so FIFO locks can show a few from preemption between ticket and queueing)",
    ]
    .iter()
    .map(|l| format!("  {l}\n"))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::Run;

    #[test]
    fn formats() {
        assert_eq!(fmt_ns(999), "999ns");
        assert_eq!(fmt_ns(1_500), "1.5us");
        assert_eq!(fmt_ns(2_500_000), "2.50ms");
        assert_eq!(fmt_rate(12_340_000.0), "12.34M/s");
        assert_eq!(fmt_rate_range(900.0, 2_500.0), "900-2.5k/s");
        assert_eq!(fmt_bytes(-2048), "-2.0KiB");
    }

    fn row(d: &'static str, threads: usize, busy: usize, rate: f64, p99: u64) -> Row {
        let mut run = Run::new(Scenario::HotKey, threads, d);
        run.set_rate(rate as u64, 1.0);
        run.p99 = p99;
        Row::of_runs(&[run], busy)
    }

    #[test]
    fn ratios_read_as_time_against_holdline_of_the_same_group() {
        let rows = vec![
            row("holdline", 2, 0, 10.0, 100),
            row("dashmap+pl", 2, 0, 20.0, 50),
            row("dashmap+pl", 4, 0, 5.0, 5),
            row("holdline", 2, 1, 40.0, 400),
            row("dashmap+pl", 2, 1, 10.0, 800),
        ];
        // Twice holdline's rate: half its time per hold.
        assert_eq!(time_ratio(&rows, &rows[1]), Some(0.5));
        assert_eq!(p99_ratio(&rows, &rows[1]), Some(0.5));
        assert_eq!(time_ratio(&rows, &rows[2]), None);
        // Busy rows compare with holdline's busy row.
        assert_eq!(time_ratio(&rows, &rows[4]), Some(4.0));
        assert_eq!(p99_ratio(&rows, &rows[4]), Some(2.0));
        let t = table(&rows, &Cfg::new(std::time::Duration::from_millis(1), 10));
        assert!(t.contains("0.50x") && t.contains("4.00x"), "{t}");
        assert!(
            t.contains("== hot-key: ") && t.contains("== hot-key, busy 1 ("),
            "{t}"
        );
        assert!(t.contains("time vs hl") && t.contains("p99 vs hl"), "{t}");
    }
}
