//! The stdout table, CSV, JSON and SVG plots.

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use crate::scenarios::Row;

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

fn fmt_rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2}M/s", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.1}k/s", r / 1e3)
    } else {
        format!("{r:.0}/s")
    }
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

/// The holdline row of the same scenario and thread count.
/// The rows' scenarios, each once, in the order they first appear.
fn scenarios_in_order(rows: &[Row]) -> Vec<&'static str> {
    let mut scenarios: Vec<&'static str> = Vec::new();
    for r in rows {
        if !scenarios.contains(&r.scenario) {
            scenarios.push(r.scenario);
        }
    }
    scenarios
}

fn holdline_of<'a>(rows: &'a [Row], r: &Row) -> Option<&'a Row> {
    rows.iter().find(|h| {
        h.design == "holdline"
            && h.scenario == r.scenario
            && h.threads == r.threads
            && h.na.is_none()
    })
}

/// Rate relative to holdline's (higher is better for the design).
pub fn rate_ratio(rows: &[Row], r: &Row) -> Option<f64> {
    let h = holdline_of(rows, r)?;
    (r.na.is_none() && h.per_sec > 0.0).then(|| r.per_sec / h.per_sec)
}

/// p99 relative to holdline's (lower is better for the design).
pub fn p99_ratio(rows: &[Row], r: &Row) -> Option<f64> {
    let h = holdline_of(rows, r)?;
    (r.na.is_none() && h.p99 > 0 && r.p99 > 0).then(|| r.p99 as f64 / h.p99 as f64)
}

fn scenario_legend(s: &str) -> &'static str {
    match s {
        "uncontended" => "each thread its own 64 keys; rate = holds/s; latency = one hold (lock+unlock)",
        "hot-key" => "all threads on one key; rate = holds/s; latency = one hold incl. waiting; ooo = grants out of arrival order (approx.)",
        "zipf" => "zipf(s=1) over 10,000 keys; rate = holds/s; latency = one hold incl. waiting",
        "million-keys" => "distinct fresh keys, each held once; rate = holds/s; mem = bytes still allocated once all keys are idle (holdline after reclaim_idle)",
        "handoff" => "two threads ping-pong one key (holder lets go 5 us after the other announced it is coming); rate = handoffs/s; latency = release -> other thread's closure running",
        "deadline" => "1 holder (5 ms holds) + waiters with a 1 ms deadline; rate = timeouts/s; latency = how late a timeout returned",
        _ => "",
    }
}

pub fn table(rows: &[Row]) -> String {
    let head = [
        "threads",
        "design",
        "fifo",
        "deadline",
        "rate",
        "vs hl",
        "p50",
        "p99",
        "p999",
        "max",
        "p99 vs hl",
        "ooo",
        "mem idle",
        "note",
    ];
    let mut out = String::new();
    let scenarios = scenarios_in_order(rows);
    for s in scenarios {
        let mut cells: Vec<Vec<String>> = vec![head.iter().map(|h| h.to_string()).collect()];
        for r in rows.iter().filter(|r| r.scenario == s) {
            let yn = |b: bool| if b { "yes" } else { "no" }.to_string();
            let mut c = vec![
                r.threads.to_string(),
                r.design.to_string(),
                yn(r.fifo),
                if r.deadline {
                    "yes".into()
                } else {
                    "LACKS".into()
                },
            ];
            if let Some(why) = r.na {
                c.push(format!("n/a ({why})"));
                c.extend(std::iter::repeat_n(String::new(), head.len() - 5));
                cells.push(c);
                continue;
            }
            let ratio =
                |x: Option<f64>| x.map(|x| format!("{x:.2}x")).unwrap_or_else(|| "-".into());
            c.push(fmt_rate(r.per_sec));
            c.push(ratio(rate_ratio(rows, r)));
            c.push(fmt_ns(r.p50));
            c.push(fmt_ns(r.p99));
            c.push(fmt_ns(r.p999));
            c.push(fmt_ns(r.max));
            c.push(ratio(p99_ratio(rows, r)));
            c.push(match r.out_of_order {
                Some((o, g)) => format!("{o}/{g}"),
                None => "-".into(),
            });
            c.push(r.mem_idle.map(fmt_bytes).unwrap_or_else(|| "-".into()));
            c.push(r.note.clone());
            cells.push(c);
        }
        let widths: Vec<usize> = (0..head.len())
            .map(|i| {
                cells
                    .iter()
                    .map(|c| c[i].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let _ = writeln!(out, "\n== {s}: {}", scenario_legend(s));
        for (n, c) in cells.iter().enumerate() {
            let mut line = String::new();
            for (i, cell) in c.iter().enumerate() {
                if i == head.len() - 1 {
                    line.push_str(cell);
                } else if i == 1 || i == 2 || i == 3 {
                    let _ = write!(line, "{:<w$}  ", cell, w = widths[i]);
                } else {
                    let _ = write!(line, "{:>w$}  ", cell, w = widths[i]);
                }
            }
            let _ = writeln!(out, "{}", line.trim_end());
            if n == 0 {
                let total: usize = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
                let _ = writeln!(out, "{}", "-".repeat(total.min(160)));
            }
        }
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn opt<T: ToString>(x: Option<T>) -> String {
    x.map(|x| x.to_string()).unwrap_or_default()
}

pub fn csv(rows: &[Row]) -> String {
    let mut out = String::from(
        "scenario,threads,design,fifo,deadline,na,unit,ops,secs,per_sec,rate_vs_holdline,latency_of,p50_ns,p99_ns,p999_ns,max_ns,p99_vs_holdline,out_of_order,grants_sampled,mem_live_bytes,mem_idle_bytes,mem_settled_bytes,note\n",
    );
    for r in rows {
        let f = [
            r.scenario.to_string(),
            r.threads.to_string(),
            r.design.to_string(),
            r.fifo.to_string(),
            r.deadline.to_string(),
            r.na.unwrap_or("").to_string(),
            r.unit.to_string(),
            r.ops.to_string(),
            format!("{:.4}", r.secs),
            format!("{:.1}", r.per_sec),
            opt(rate_ratio(rows, r).map(|x| format!("{x:.4}"))),
            r.lat_of.to_string(),
            r.p50.to_string(),
            r.p99.to_string(),
            r.p999.to_string(),
            r.max.to_string(),
            opt(p99_ratio(rows, r).map(|x| format!("{x:.4}"))),
            opt(r.out_of_order.map(|x| x.0)),
            opt(r.out_of_order.map(|x| x.1)),
            opt(r.mem_live),
            opt(r.mem_idle),
            opt(r.mem_settled),
            r.note.clone(),
        ];
        let line: Vec<String> = f.iter().map(|x| csv_field(x)).collect();
        let _ = writeln!(out, "{}", line.join(","));
    }
    out
}

fn js(s: &str) -> String {
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

fn jopt<T: ToString>(x: Option<T>) -> String {
    x.map(|x| x.to_string()).unwrap_or_else(|| "null".into())
}

pub fn json(rows: &[Row], meta: &[(&str, String)]) -> String {
    let mut out = String::from("{\n  \"meta\": {");
    let m: Vec<String> = meta
        .iter()
        .map(|(k, v)| format!("{}: {}", js(k), js(v)))
        .collect();
    out.push_str(&m.join(", "));
    out.push_str("},\n  \"rows\": [\n");
    let items: Vec<String> = rows
        .iter()
        .map(|r| {
            let q: Vec<String> = r
                .quantiles
                .iter()
                .map(|(q, v)| format!("[{q}, {v}]"))
                .collect();
            format!(
                "    {{\"scenario\": {}, \"threads\": {}, \"design\": {}, \"fifo\": {}, \"deadline\": {}, \"na\": {}, \"unit\": {}, \"ops\": {}, \"secs\": {:.4}, \"per_sec\": {:.1}, \"rate_vs_holdline\": {}, \"latency_of\": {}, \"p50_ns\": {}, \"p99_ns\": {}, \"p999_ns\": {}, \"max_ns\": {}, \"p99_vs_holdline\": {}, \"quantiles_ns\": [{}], \"out_of_order\": {}, \"grants_sampled\": {}, \"mem_live_bytes\": {}, \"mem_idle_bytes\": {}, \"mem_settled_bytes\": {}, \"note\": {}}}",
                js(r.scenario),
                r.threads,
                js(r.design),
                r.fifo,
                r.deadline,
                r.na.map(js).unwrap_or_else(|| "null".into()),
                js(r.unit),
                r.ops,
                r.secs,
                r.per_sec,
                jopt(rate_ratio(rows, r).map(|x| format!("{x:.4}"))),
                js(r.lat_of),
                r.p50,
                r.p99,
                r.p999,
                r.max,
                jopt(p99_ratio(rows, r).map(|x| format!("{x:.4}"))),
                q.join(", "),
                jopt(r.out_of_order.map(|x| x.0)),
                jopt(r.out_of_order.map(|x| x.1)),
                jopt(r.mem_live),
                jopt(r.mem_idle),
                jopt(r.mem_settled),
                js(&r.note),
            )
        })
        .collect();
    out.push_str(&items.join(",\n"));
    out.push_str("\n  ]\n}\n");
    out
}

type PlotResult = Result<(), Box<dyn std::error::Error>>;

fn color(i: usize) -> RGBColor {
    const C: [RGBColor; 8] = [
        RGBColor(214, 39, 40),
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
        RGBColor(255, 127, 14),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(127, 127, 127),
        RGBColor(23, 190, 207),
    ];
    C[i % C.len()]
}

/// A log-axis range from the decade below the smallest positive value to the
/// decade above the largest (plotters labels a log axis at decades).
fn decades(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::MAX, 0f64);
    for v in values.filter(|v| *v > 0.0) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if hi == 0.0 {
        return (1.0, 10.0);
    }
    let lo = 10f64.powf(lo.log10().floor());
    let hi = 10f64.powf((hi.log10() + 1e-9).ceil()).max(lo * 10.0);
    (lo, hi)
}

/// Rate against thread count, one line per design.
fn plot_rate(path: &Path, s: &str, rows: &[&Row]) -> PlotResult {
    let mut designs: Vec<&str> = Vec::new();
    for r in rows {
        if !designs.contains(&r.design) {
            designs.push(r.design);
        }
    }
    let tmax = rows.iter().map(|r| r.threads).max().unwrap_or(1) as f64;
    let (ymin, ymax) = decades(rows.iter().map(|r| r.per_sec));
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{s}: {}/s by threads", rows[0].unit),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0.5f64..tmax + 0.5, (ymin..ymax).log_scale())?;
    chart
        .configure_mesh()
        .x_labels(tmax as usize * 2 + 2)
        .x_label_formatter(&|x| {
            if (x - x.round()).abs() < 1e-9 {
                format!("{x:.0}")
            } else {
                String::new()
            }
        })
        .x_desc("threads")
        .y_desc(format!("{}/s", rows[0].unit))
        .y_label_formatter(&|y| fmt_rate(*y))
        .draw()?;
    for (i, d) in designs.iter().enumerate() {
        let pts: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.design == *d)
            .map(|r| (r.threads as f64, r.per_sec.max(ymin)))
            .collect();
        let c = color(i);
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))?
            .label(*d)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Latency by quantile ("nines" on x, log ns on y), one line per design.
fn plot_latency(path: &Path, s: &str, rows: &[&Row]) -> PlotResult {
    let nines = |q: f64| if q >= 1.0 { 5.0 } else { -(1.0 - q).log10() };
    let (ymin, ymax) = decades(
        rows.iter()
            .flat_map(|r| r.quantiles.iter().map(|q| q.1 as f64)),
    );
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{s}: {} latency by quantile ({} threads)",
                rows[0].lat_of, rows[0].threads
            ),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..5.2, (ymin..ymax).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("quantile (0.3=p50, 2=p99, 3=p99.9, 4=p99.99, 5=max)")
        .y_desc("latency")
        .y_label_formatter(&|y| fmt_ns(*y as u64))
        .draw()?;
    for (i, r) in rows.iter().enumerate() {
        let pts: Vec<(f64, f64)> = r
            .quantiles
            .iter()
            .map(|(q, v)| (nines(*q), (*v).max(1) as f64))
            .collect();
        let c = color(i);
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))?
            .label(r.design)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Writes the SVGs; answers the files written.
pub fn plots(dir: &Path, rows: &[Row]) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let mut written = Vec::new();
    let scenarios = scenarios_in_order(rows);
    for s in scenarios {
        let ok: Vec<&Row> = rows
            .iter()
            .filter(|r| r.scenario == s && r.na.is_none())
            .collect();
        if ok.is_empty() {
            continue;
        }
        let mut threads: Vec<usize> = ok.iter().map(|r| r.threads).collect();
        threads.sort_unstable();
        threads.dedup();
        if threads.len() > 1 {
            let p = dir.join(format!("{s}-rate.svg"));
            plot_rate(&p, s, &ok)?;
            written.push(p.display().to_string());
        }
        let tmax = *threads.last().unwrap();
        let at: Vec<&Row> = ok
            .iter()
            .copied()
            .filter(|r| r.threads == tmax && !r.quantiles.is_empty())
            .collect();
        if !at.is_empty() {
            let p = dir.join(format!("{s}-latency.svg"));
            plot_latency(&p, s, &at)?;
            written.push(p.display().to_string());
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_ns(999), "999ns");
        assert_eq!(fmt_ns(1_500), "1.5us");
        assert_eq!(fmt_ns(2_500_000), "2.50ms");
        assert_eq!(fmt_rate(12_340_000.0), "12.34M/s");
        assert_eq!(fmt_bytes(-2048), "-2.0KiB");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(js("x\"y\n"), "\"x\\\"y\\n\"");
    }

    #[test]
    fn ratios_are_against_holdline_of_the_same_row_group() {
        let mk = |d: &'static str, t, r: f64, p99| Row {
            scenario: "hot-key",
            threads: t,
            design: d,
            per_sec: r,
            p99,
            ..Row::default()
        };
        let rows = vec![
            mk("holdline", 2, 10.0, 100),
            mk("dashmap+pl", 2, 20.0, 50),
            mk("dashmap+pl", 4, 5.0, 5),
        ];
        assert_eq!(rate_ratio(&rows, &rows[1]), Some(2.0));
        assert_eq!(p99_ratio(&rows, &rows[1]), Some(0.5));
        assert_eq!(rate_ratio(&rows, &rows[2]), None);
        let t = table(&rows);
        assert!(t.contains("2.00x") && t.contains("0.50x"), "{t}");
        assert!(csv(&rows).lines().count() == 4);
    }
}
