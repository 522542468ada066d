//! The stdout table and its legend.

use std::fmt::Write as _;

use comfy_table::{CellAlignment, ColumnConstraint, Table, Width};

use crate::row::{groups, Row};
use crate::scenario::Cfg;
use crate::schema;

/// The widest a note's lines get; a longer note wraps.
const NOTE_WIDTH: u16 = 64;

/// A table as the harness prints them: no borders, two spaces between
/// columns, a dashed line under the header row.
pub fn plain_table(heads: &[&str], aligns: &[CellAlignment]) -> Table {
    let mut table = Table::new();
    // Header line and its crossings only (comfy-table's preset order).
    table.load_preset("     --            ");
    table.set_header(heads.to_vec());
    for (column, &align) in table.column_iter_mut().zip(aligns) {
        column.set_cell_alignment(align);
        column.set_padding((0, 1));
    }
    table
}

/// What the busy level of a group means, for its heading.
fn busy_words(busy: usize) -> String {
    match busy {
        0 => String::new(),
        1 => ", busy 1 (one CPU-bound thread spinning beside each run)".into(),
        n => format!(", busy {n} ({n} CPU-bound threads spinning beside each run)"),
    }
}

/// One section per (scenario, busy) group, headed by what the scenario
/// measures. A column with nothing in a section (`-` or blank in every
/// row: one run has no min-max, most scenarios no `ooo`) is left out of it.
pub fn table(rows: &[Row], cfg: &Cfg) -> String {
    let (heads, aligns): (Vec<&str>, Vec<CellAlignment>) =
        schema::columns().map(|(_, c)| (c.head, c.align)).unzip();
    let mut out = String::new();
    for (s, busy) in groups(rows) {
        let cells: Vec<Vec<String>> = rows
            .iter()
            .filter(|r| (r.scenario, r.busy) == (s, busy))
            .map(|r| schema::cells(rows, r))
            .collect();
        let mut t = plain_table(&heads, &aligns);
        for (i, column) in t.column_iter_mut().enumerate() {
            if cells.iter().all(|c| c[i].is_empty() || c[i] == "-") {
                column.set_constraint(ColumnConstraint::Hidden);
            } else if heads[i] == "note" {
                column.set_constraint(ColumnConstraint::UpperBoundary(Width::Fixed(NOTE_WIDTH)));
            }
        }
        t.add_rows(cells);
        let _ = writeln!(
            out,
            "\n== {}{}: {}\n{}",
            s.name(),
            busy_words(busy),
            s.legend(cfg),
            t.trim_fmt()
        );
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
        // One run each and no memory measured: nothing to show there.
        assert!(
            !t.contains("rate min-max") && !t.contains("mem idle"),
            "{t}"
        );
    }
}
