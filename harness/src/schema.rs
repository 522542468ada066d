//! A row's schema, written once: every field with its CSV column and JSON
//! key, and, for the fields the table shows, its header and cell text.
//! The table, the CSV and the JSON are all read off [`FIELDS`].

use comfy_table::CellAlignment::{self, Left, Right};
use serde::{Serialize, Serializer};
use serde_json::{json, Value};

use crate::row::{p99_ratio, time_ratio, time_ratio_spread, Row};
use crate::units::{fmt_bytes, fmt_ns, fmt_rate, fmt_rate_range};

/// How the table shows a field.
pub struct Column {
    pub head: &'static str,
    pub align: CellAlignment,
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

impl Field {
    /// What the row is (its scenario, design, settings): there even for an n/a row.
    const fn given(name: &'static str, value: fn(&[Row], &Row) -> Value) -> Field {
        Field {
            name,
            measured: false,
            value,
            column: None,
        }
    }

    /// What a run measured.
    const fn measured(name: &'static str, value: fn(&[Row], &Row) -> Value) -> Field {
        Field {
            measured: true,
            ..Field::given(name, value)
        }
    }

    /// The field in the table too, under `head`.
    const fn shown(
        self,
        head: &'static str,
        align: CellAlignment,
        cell: fn(&[Row], &Row) -> String,
    ) -> Field {
        Field {
            column: Some(Column { head, align, cell }),
            ..self
        }
    }
}

fn text(s: &str) -> Value {
    Value::from(s)
}

fn int(n: impl TryInto<i64>) -> Value {
    n.try_into().map_or(Value::Null, Value::from)
}

/// `x` to `decimals` places (null when not finite).
fn num(x: f64, decimals: i32) -> Value {
    let scale = 10f64.powi(decimals);
    Value::from((x * scale).round() / scale)
}

fn opt<T>(x: Option<T>, f: impl FnOnce(T) -> Value) -> Value {
    x.map_or(Value::Null, f)
}

fn ratio_cell(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{x:.2}x"))
}

/// A min-max cell: `-` for a row of one run, which has no range.
fn range_cell(r: &Row, range: impl FnOnce() -> String) -> String {
    if r.runs > 1 {
        range()
    } else {
        "-".into()
    }
}

/// Every field of a row, in CSV order; the table shows those with a column, in the same order.
pub const FIELDS: &[Field] = &[
    Field::given("scenario", |_, r| text(r.scenario.name())),
    Field::given("threads", |_, r| int(r.threads))
        .shown("threads", Right, |_, r| r.threads.to_string()),
    Field::given("busy", |_, r| int(r.busy)).shown("busy", Right, |_, r| r.busy.to_string()),
    Field::given("design", |_, r| text(r.design)).shown("design", Left, |_, r| r.design.into()),
    Field::given("fifo", |_, r| Value::Bool(r.fifo)).shown("fifo", Left, |_, r| {
        if r.fifo { "yes" } else { "no" }.into()
    }),
    Field::given("deadline", |_, r| Value::Bool(r.deadline)).shown("deadline", Left, |_, r| {
        if r.deadline { "yes" } else { "LACKS" }.into()
    }),
    Field::given("na", |_, r| opt(r.na, text)),
    Field::given("runs", |_, r| int(r.runs)),
    Field::given("unit", |_, r| text(r.unit)),
    Field::measured("ops", |_, r| int(r.ops)),
    Field::measured("secs", |_, r| num(r.secs, 4)),
    Field::measured("per_sec", |_, r| num(r.rate.median, 1))
        .shown("rate", Right, |_, r| fmt_rate(r.rate.median)),
    Field::measured("per_sec_min", |_, r| num(r.rate.min, 1)).shown(
        "rate min-max",
        Right,
        |_, r| range_cell(r, || fmt_rate_range(r.rate.min, r.rate.max)),
    ),
    Field::measured("per_sec_max", |_, r| num(r.rate.max, 1)),
    Field::measured("time_vs_holdline", |rows, r| {
        opt(time_ratio(rows, r), |x| num(x, 4))
    })
    .shown("time vs hl", Right, |rows, r| {
        ratio_cell(time_ratio(rows, r))
    }),
    Field::measured("time_vs_holdline_min", |rows, r| {
        opt(time_ratio_spread(rows, r), |s| num(s.min, 4))
    })
    .shown("vs hl min-max", Right, |rows, r| {
        time_ratio_spread(rows, r)
            .map_or_else(|| "-".into(), |s| format!("{:.2}-{:.2}x", s.min, s.max))
    }),
    Field::measured("time_vs_holdline_max", |rows, r| {
        opt(time_ratio_spread(rows, r), |s| num(s.max, 4))
    }),
    Field::given("latency_of", |_, r| text(r.lat_of)),
    Field::measured("p50_ns", |_, r| int(r.p50)).shown("p50", Right, |_, r| fmt_ns(r.p50)),
    Field::measured("p99_ns", |_, r| int(r.p99.median))
        .shown("p99", Right, |_, r| fmt_ns(r.p99.median)),
    Field::measured("p99_min_ns", |_, r| int(r.p99.min)).shown("p99 min-max", Right, |_, r| {
        range_cell(r, || format!("{}-{}", fmt_ns(r.p99.min), fmt_ns(r.p99.max)))
    }),
    Field::measured("p99_max_ns", |_, r| int(r.p99.max)),
    Field::measured("p999_ns", |_, r| int(r.p999)).shown("p999", Right, |_, r| fmt_ns(r.p999)),
    Field::measured("max_ns", |_, r| int(r.max)).shown("max", Right, |_, r| fmt_ns(r.max)),
    Field::measured("p99_vs_holdline", |rows, r| {
        opt(p99_ratio(rows, r), |x| num(x, 4))
    })
    .shown("p99 vs hl", Right, |rows, r| ratio_cell(p99_ratio(rows, r))),
    Field::measured("quantiles_ns", |_, r| json!(r.quantiles)),
    Field::measured("out_of_order", |_, r| opt(r.out_of_order, |x| int(x.0))).shown(
        "ooo",
        Right,
        |_, r| {
            r.out_of_order
                .map_or_else(|| "-".into(), |(o, g)| format!("{o}/{g}"))
        },
    ),
    Field::measured("grants_sampled", |_, r| opt(r.out_of_order, |x| int(x.1))),
    Field::measured("mem_live_bytes", |_, r| opt(r.mem_live, int)),
    Field::measured("mem_idle_bytes", |_, r| opt(r.mem_idle, int)).shown(
        "mem idle",
        Right,
        |_, r| r.mem_idle.map_or_else(|| "-".into(), fmt_bytes),
    ),
    Field::measured("mem_settled_bytes", |_, r| opt(r.mem_settled, int)),
    Field::measured("server_cpu_ns_per_op", |_, r| {
        opt(r.cpu_per_op, |c| num(c.median, 1))
    })
    .shown("cpu/op", Right, |_, r| {
        r.cpu_per_op
            .map_or_else(|| "-".into(), |c| fmt_ns(c.median.round() as u64))
    }),
    Field::measured("server_cpu_ns_per_op_min", |_, r| {
        opt(r.cpu_per_op, |c| num(c.min, 1))
    })
    .shown("cpu/op min-max", Right, |_, r| match r.cpu_per_op {
        Some(c) if r.runs > 1 => format!(
            "{}-{}",
            fmt_ns(c.min.round() as u64),
            fmt_ns(c.max.round() as u64)
        ),
        _ => "-".into(),
    }),
    Field::measured("server_cpu_ns_per_op_max", |_, r| {
        opt(r.cpu_per_op, |c| num(c.max, 1))
    }),
    Field::measured("server_cpu_ticks", |_, r| opt(r.cpu_ticks, int)),
    Field::given("note", |_, r| text(&r.note)).shown("note", Left, |_, r| r.note.clone()),
];

/// A field's value in `r`, null where `r` measured nothing.
fn value_of(f: &Field, rows: &[Row], r: &Row) -> Value {
    if f.measured && r.na.is_some() {
        Value::Null
    } else {
        (f.value)(rows, r)
    }
}

/// A value as a CSV cell: null is empty, a list of pairs is `q:v;q:v`.
fn csv_cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(pairs) => {
            let pair = |p: &Value| match p {
                Value::Array(qv) => qv.iter().map(csv_cell).collect::<Vec<_>>().join(":"),
                other => csv_cell(other),
            };
            pairs.iter().map(pair).collect::<Vec<_>>().join(";")
        }
        // Numbers and booleans as the JSON writes them.
        other => other.to_string(),
    }
}

pub fn csv(rows: &[Row]) -> String {
    let mut out = csv::Writer::from_writer(Vec::new());
    let to_memory = "writing to memory";
    out.write_record(FIELDS.iter().map(|f| f.name))
        .expect(to_memory);
    for r in rows {
        let cells = FIELDS.iter().map(|f| csv_cell(&value_of(f, rows, r)));
        out.write_record(cells).expect(to_memory);
    }
    String::from_utf8(out.into_inner().expect(to_memory)).expect("UTF-8 cells")
}

/// A row as a JSON object, its keys in [`FIELDS`]' order.
struct JsonRow<'a> {
    rows: &'a [Row],
    row: &'a Row,
}

impl Serialize for JsonRow<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(
            FIELDS
                .iter()
                .map(|f| (f.name, value_of(f, self.rows, self.row))),
        )
    }
}

/// The run's settings, in the order given.
struct Meta<'a>(&'a [(&'a str, String)]);

impl Serialize for Meta<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

#[derive(Serialize)]
struct Document<'a> {
    meta: Meta<'a>,
    rows: Vec<JsonRow<'a>>,
}

/// `{"meta": {...}, "rows": [{...}, ...]}`.
pub fn json(rows: &[Row], meta: &[(&str, String)]) -> String {
    let doc = Document {
        meta: Meta(meta),
        rows: rows.iter().map(|row| JsonRow { rows, row }).collect(),
    };
    serde_json::to_string_pretty(&doc).expect("JSON of plain values") + "\n"
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
        let mut reader = csv::Reader::from_reader(text.as_bytes());
        let names: Vec<&str> = FIELDS.iter().map(|f| f.name).collect();
        assert_eq!(reader.headers().unwrap(), names);
        let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
        assert_eq!(records.len(), 2);
        let cell = |r: &csv::StringRecord, name: &str| {
            r[names.iter().position(|n| *n == name).unwrap()].to_string()
        };
        assert_eq!(cell(&records[0], "quantiles_ns"), "0.5:10;1.0:100");
        assert_eq!(cell(&records[0], "note"), "a, \"quoted\" note");
        assert_eq!(cell(&records[0], "per_sec"), "10.0");
        assert_eq!(cell(&records[1], "na"), "single key");
        assert_eq!(cell(&records[1], "per_sec"), "");
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
