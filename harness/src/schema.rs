//! A row's schema, written once: every field with its CSV column and JSON
//! key, and, for the fields the table shows, its header and cell text.
//! The table, the CSV and the JSON are all read off [`FIELDS`].

use std::fmt::Write as _;

use crate::row::{p99_ratio, time_ratio, time_ratio_spread, Row};
use crate::units::{fmt_bytes, fmt_ns, fmt_rate, fmt_rate_range};

/// A field's value in the CSV and the JSON.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Text(String),
    Int(i64),
    /// A number and the decimals it is written with.
    Num(f64, usize),
    Bool(bool),
    /// (quantile, nanoseconds) pairs: a JSON array of pairs, `q:v;q:v` in the CSV.
    Pairs(Vec<(f64, u64)>),
    Null,
}

impl Value {
    fn csv(&self) -> String {
        match self {
            Value::Text(s) => csv_quoted(s),
            Value::Int(n) => n.to_string(),
            Value::Num(x, d) => format!("{x:.d$}"),
            Value::Bool(b) => b.to_string(),
            Value::Pairs(p) => p
                .iter()
                .map(|(q, v)| format!("{q}:{v}"))
                .collect::<Vec<_>>()
                .join(";"),
            Value::Null => String::new(),
        }
    }

    fn json(&self) -> String {
        match self {
            Value::Text(s) => json_string(s),
            Value::Num(x, _) if !x.is_finite() => "null".into(),
            Value::Pairs(p) => {
                let items: Vec<String> = p.iter().map(|(q, v)| format!("[{q}, {v}]")).collect();
                format!("[{}]", items.join(", "))
            }
            Value::Null => "null".into(),
            other => other.csv(),
        }
    }
}

fn int(n: impl TryInto<i64>) -> Value {
    n.try_into().map(Value::Int).unwrap_or(Value::Null)
}

fn opt<T>(x: Option<T>, f: impl FnOnce(T) -> Value) -> Value {
    x.map(f).unwrap_or(Value::Null)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Align {
    Left,
    Right,
}

/// How the table shows a field.
pub struct Column {
    pub head: &'static str,
    pub align: Align,
    pub cell: fn(&[Row], &Row) -> String,
}

pub struct Field {
    /// The CSV column and the JSON key.
    pub name: &'static str,
    /// A measurement: null in the CSV and JSON, blank in the table, for a
    /// row the design cannot run (`na`).
    pub measured: bool,
    /// The value; `rows` is the whole run, for ratios against holdline's row.
    pub value: fn(&[Row], &Row) -> Value,
    /// Where the table shows the field; `None`: CSV and JSON only.
    pub column: Option<Column>,
}

const fn col(head: &'static str, align: Align, cell: fn(&[Row], &Row) -> String) -> Option<Column> {
    Some(Column { head, align, cell })
}

fn ratio_cell(x: Option<f64>) -> String {
    x.map(|x| format!("{x:.2}x")).unwrap_or_else(|| "-".into())
}

/// Every field of a row, in CSV order; the table shows those with a column, in the same order.
pub const FIELDS: &[Field] = &[
    Field {
        name: "scenario",
        measured: false,
        value: |_, r| Value::Text(r.scenario.name().into()),
        column: None,
    },
    Field {
        name: "threads",
        measured: false,
        value: |_, r| int(r.threads),
        column: col("threads", Align::Right, |_, r| r.threads.to_string()),
    },
    Field {
        name: "busy",
        measured: false,
        value: |_, r| int(r.busy),
        column: col("busy", Align::Right, |_, r| r.busy.to_string()),
    },
    Field {
        name: "design",
        measured: false,
        value: |_, r| Value::Text(r.design.into()),
        column: col("design", Align::Left, |_, r| r.design.into()),
    },
    Field {
        name: "fifo",
        measured: false,
        value: |_, r| Value::Bool(r.fifo),
        column: col("fifo", Align::Left, |_, r| {
            if r.fifo { "yes" } else { "no" }.into()
        }),
    },
    Field {
        name: "deadline",
        measured: false,
        value: |_, r| Value::Bool(r.deadline),
        column: col("deadline", Align::Left, |_, r| {
            if r.deadline { "yes" } else { "LACKS" }.into()
        }),
    },
    Field {
        name: "na",
        measured: false,
        value: |_, r| opt(r.na, |s| Value::Text(s.into())),
        column: None,
    },
    Field {
        name: "runs",
        measured: false,
        value: |_, r| int(r.runs),
        column: None,
    },
    Field {
        name: "unit",
        measured: false,
        value: |_, r| Value::Text(r.unit.into()),
        column: None,
    },
    Field {
        name: "ops",
        measured: true,
        value: |_, r| int(r.ops),
        column: None,
    },
    Field {
        name: "secs",
        measured: true,
        value: |_, r| Value::Num(r.secs, 4),
        column: None,
    },
    Field {
        name: "per_sec",
        measured: true,
        value: |_, r| Value::Num(r.rate.median, 1),
        column: col("rate", Align::Right, |_, r| fmt_rate(r.rate.median)),
    },
    Field {
        name: "per_sec_min",
        measured: true,
        value: |_, r| Value::Num(r.rate.min, 1),
        column: col("rate min-max", Align::Right, |_, r| {
            if r.runs > 1 {
                fmt_rate_range(r.rate.min, r.rate.max)
            } else {
                "-".into()
            }
        }),
    },
    Field {
        name: "per_sec_max",
        measured: true,
        value: |_, r| Value::Num(r.rate.max, 1),
        column: None,
    },
    Field {
        name: "time_vs_holdline",
        measured: true,
        value: |rows, r| opt(time_ratio(rows, r), |x| Value::Num(x, 4)),
        column: col("time vs hl", Align::Right, |rows, r| {
            ratio_cell(time_ratio(rows, r))
        }),
    },
    Field {
        name: "time_vs_holdline_min",
        measured: true,
        value: |rows, r| opt(time_ratio_spread(rows, r), |s| Value::Num(s.min, 4)),
        column: col(
            "vs hl min-max",
            Align::Right,
            |rows, r| match time_ratio_spread(rows, r) {
                Some(s) => format!("{:.2}-{:.2}x", s.min, s.max),
                None => "-".into(),
            },
        ),
    },
    Field {
        name: "time_vs_holdline_max",
        measured: true,
        value: |rows, r| opt(time_ratio_spread(rows, r), |s| Value::Num(s.max, 4)),
        column: None,
    },
    Field {
        name: "latency_of",
        measured: false,
        value: |_, r| Value::Text(r.lat_of.into()),
        column: None,
    },
    Field {
        name: "p50_ns",
        measured: true,
        value: |_, r| int(r.p50),
        column: col("p50", Align::Right, |_, r| fmt_ns(r.p50)),
    },
    Field {
        name: "p99_ns",
        measured: true,
        value: |_, r| int(r.p99.median),
        column: col("p99", Align::Right, |_, r| fmt_ns(r.p99.median)),
    },
    Field {
        name: "p99_min_ns",
        measured: true,
        value: |_, r| int(r.p99.min),
        column: col("p99 min-max", Align::Right, |_, r| {
            if r.runs > 1 {
                format!("{}-{}", fmt_ns(r.p99.min), fmt_ns(r.p99.max))
            } else {
                "-".into()
            }
        }),
    },
    Field {
        name: "p99_max_ns",
        measured: true,
        value: |_, r| int(r.p99.max),
        column: None,
    },
    Field {
        name: "p999_ns",
        measured: true,
        value: |_, r| int(r.p999),
        column: col("p999", Align::Right, |_, r| fmt_ns(r.p999)),
    },
    Field {
        name: "max_ns",
        measured: true,
        value: |_, r| int(r.max),
        column: col("max", Align::Right, |_, r| fmt_ns(r.max)),
    },
    Field {
        name: "p99_vs_holdline",
        measured: true,
        value: |rows, r| opt(p99_ratio(rows, r), |x| Value::Num(x, 4)),
        column: col("p99 vs hl", Align::Right, |rows, r| {
            ratio_cell(p99_ratio(rows, r))
        }),
    },
    Field {
        name: "quantiles_ns",
        measured: true,
        value: |_, r| Value::Pairs(r.quantiles.clone()),
        column: None,
    },
    Field {
        name: "out_of_order",
        measured: true,
        value: |_, r| opt(r.out_of_order, |x| int(x.0)),
        column: col("ooo", Align::Right, |_, r| match r.out_of_order {
            Some((o, g)) => format!("{o}/{g}"),
            None => "-".into(),
        }),
    },
    Field {
        name: "grants_sampled",
        measured: true,
        value: |_, r| opt(r.out_of_order, |x| int(x.1)),
        column: None,
    },
    Field {
        name: "mem_live_bytes",
        measured: true,
        value: |_, r| opt(r.mem_live, int),
        column: None,
    },
    Field {
        name: "mem_idle_bytes",
        measured: true,
        value: |_, r| opt(r.mem_idle, int),
        column: col("mem idle", Align::Right, |_, r| {
            r.mem_idle.map(fmt_bytes).unwrap_or_else(|| "-".into())
        }),
    },
    Field {
        name: "mem_settled_bytes",
        measured: true,
        value: |_, r| opt(r.mem_settled, int),
        column: None,
    },
    Field {
        name: "note",
        measured: false,
        value: |_, r| Value::Text(r.note.clone()),
        column: col("note", Align::Left, |_, r| r.note.clone()),
    },
];

/// A field's value in `r`, null where `r` measured nothing.
fn value_of(f: &Field, rows: &[Row], r: &Row) -> Value {
    if f.measured && r.na.is_some() {
        Value::Null
    } else {
        (f.value)(rows, r)
    }
}

fn csv_quoted(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn json_string(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

pub fn csv(rows: &[Row]) -> String {
    let names: Vec<&str> = FIELDS.iter().map(|f| f.name).collect();
    let mut out = names.join(",") + "\n";
    for r in rows {
        let line: Vec<String> = FIELDS.iter().map(|f| value_of(f, rows, r).csv()).collect();
        let _ = writeln!(out, "{}", line.join(","));
    }
    out
}

/// `{"meta": {...}, "rows": [{...}, ...]}`.
pub fn json(rows: &[Row], meta: &[(&str, String)]) -> String {
    let m: Vec<String> = meta
        .iter()
        .map(|(k, v)| format!("{}: {}", json_string(k), json_string(v)))
        .collect();
    let items: Vec<String> = rows
        .iter()
        .map(|r| {
            let kv: Vec<String> = FIELDS
                .iter()
                .map(|f| format!("{}: {}", json_string(f.name), value_of(f, rows, r).json()))
                .collect();
            format!("    {{{}}}", kv.join(", "))
        })
        .collect();
    format!(
        "{{\n  \"meta\": {{{}}},\n  \"rows\": [\n{}\n  ]\n}}\n",
        m.join(", "),
        items.join(",\n")
    )
}

/// The table's columns, in order.
pub fn columns() -> impl Iterator<Item = (&'static Field, &'static Column)> {
    FIELDS
        .iter()
        .filter_map(|f| f.column.as_ref().map(|c| (f, c)))
}

/// A row's table cells: for an n/a row, the first measured cell says why
/// and the other measured cells are blank.
pub fn cells(rows: &[Row], r: &Row) -> Vec<String> {
    let mut said_why = false;
    columns()
        .map(|(f, c)| match r.na {
            Some(why) if f.measured => {
                if said_why {
                    String::new()
                } else {
                    said_why = true;
                    format!("n/a ({why})")
                }
            }
            _ => (c.cell)(rows, r),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::Run;
    use crate::scenario::Scenario;

    fn row(design: &'static str, rate: f64, p99: u64, na: Option<&'static str>) -> Row {
        let mut run = Run::new(Scenario::HotKey, 2, design);
        run.set_rate(rate as u64, 1.0);
        run.p99 = p99;
        run.na = na;
        run.note = "a, \"quoted\" note".into();
        run.quantiles = vec![(0.5, 10), (1.0, p99)];
        Row::of_runs(&[run], 0)
    }

    #[test]
    fn field_names_are_unique() {
        let mut names: Vec<&str> = FIELDS.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FIELDS.len());
    }

    #[test]
    fn csv_rows_have_one_cell_per_field() {
        let rows = [
            row("holdline", 10.0, 100, None),
            row("std-1key", 0.0, 0, Some("single key")),
        ];
        let text = csv(&rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(
            lines[0].starts_with("scenario,threads,busy,design,"),
            "{}",
            lines[0]
        );
        // The note is quoted (it has a comma), so count cells outside quotes.
        for l in &lines {
            let mut quoted = false;
            let commas = l
                .chars()
                .filter(|&c| {
                    if c == '"' {
                        quoted = !quoted;
                    }
                    c == ',' && !quoted
                })
                .count();
            assert_eq!(commas + 1, FIELDS.len(), "{l}");
        }
        assert!(lines[1].contains("0.5:10;1:100"), "{}", lines[1]);
        assert!(lines[2].contains(",single key,"), "{}", lines[2]);
    }

    #[test]
    fn json_parses_and_carries_every_field() {
        let rows = [
            row("holdline", 10.0, 100, None),
            row("dashmap+pl", 20.0, 50, None),
            row("std-1key", 0.0, 0, Some("single key")),
        ];
        let text = json(&rows, &[("runs", "1".into())]);
        let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(v["meta"]["runs"], "1");
        let r = &v["rows"][1];
        for f in FIELDS {
            assert!(r.get(f.name).is_some(), "{} missing", f.name);
        }
        assert_eq!(r["time_vs_holdline"], 0.5);
        assert_eq!(r["p99_vs_holdline"], 0.5);
        assert_eq!(r["quantiles_ns"][1][1], 50);
        assert_eq!(r["note"], "a, \"quoted\" note");
        let na = &v["rows"][2];
        assert!(na["per_sec"].is_null() && na["p99_ns"].is_null());
        assert_eq!(na["na"], "single key");
    }

    #[test]
    fn an_na_row_says_why_once() {
        let rows = [row("std-1key", 0.0, 0, Some("single key"))];
        let c = cells(&rows, &rows[0]);
        assert_eq!(c.iter().filter(|c| c.starts_with("n/a")).count(), 1);
        assert!(c.contains(&"n/a (single key)".to_string()));
        assert!(!c.iter().any(|c| c.ends_with("/s")), "{c:?}");
    }
}
