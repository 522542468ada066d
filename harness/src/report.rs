//! The stdout table and its legend.

use std::fmt::Write as _;

use crate::row::{groups, Row};
use crate::scenario::Cfg;
use crate::schema::{self, Align};

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
        "time vs hl: the design's time per operation relative to holdline's (holdline's rate / the design's): above 1 = slower than holdline \
         (cluster: relative to the plain node's)",
        "vs hl min-max: the lowest and highest of the same ratio taken round by round (each run against holdline's run of the same round)",
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
    use crate::row::{p99_ratio, time_ratio, Run};
    use crate::scenario::Scenario;

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
