//! The SVG plots: per scenario and busy level, rate by thread count (the
//! median, with the min-max range of the runs as error bars) and latency by
//! quantile at the largest thread count.

use std::path::Path;

use plotters::prelude::*;

use crate::row::{groups, Row};
use crate::units::{fmt_ns, fmt_rate};

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
fn plot_rate(path: &Path, title: &str, rows: &[&Row]) -> PlotResult {
    let mut designs: Vec<&str> = Vec::new();
    for r in rows {
        if !designs.contains(&r.design) {
            designs.push(r.design);
        }
    }
    let tmax = rows.iter().map(|r| r.threads).max().unwrap_or(1) as f64;
    let (ymin, ymax) = decades(rows.iter().flat_map(|r| [r.rate.min, r.rate.max]));
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{title}: {}/s by threads", rows[0].unit),
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
        let mine: Vec<&&Row> = rows.iter().filter(|r| r.design == *d).collect();
        let pts: Vec<(f64, f64)> = mine
            .iter()
            .map(|r| (r.threads as f64, r.rate.median.max(ymin)))
            .collect();
        let c = color(i);
        chart.draw_series(mine.iter().filter(|r| r.runs > 1).map(|r| {
            ErrorBar::new_vertical(
                r.threads as f64,
                r.rate.min.max(ymin),
                r.rate.median.max(ymin),
                r.rate.max.max(ymin),
                c.stroke_width(1),
                8,
            )
        }))?;
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
fn plot_latency(path: &Path, title: &str, rows: &[&Row]) -> PlotResult {
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
                "{title}: {} latency by quantile ({} threads)",
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

/// Writes the SVGs; answers the files written. A busy group's files carry
/// its level (`hot-key-busy1-rate.svg`); a quiet group's do not.
pub fn plots(dir: &Path, rows: &[Row]) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let mut written = Vec::new();
    for (s, busy) in groups(rows) {
        let ok: Vec<&Row> = rows
            .iter()
            .filter(|r| (r.scenario, r.busy) == (s, busy) && r.na.is_none())
            .collect();
        if ok.is_empty() {
            continue;
        }
        let (stem, title) = match busy {
            0 => (s.name().to_string(), s.name().to_string()),
            b => (
                format!("{}-busy{b}", s.name()),
                format!("{}, busy {b}", s.name()),
            ),
        };
        let mut threads: Vec<usize> = ok.iter().map(|r| r.threads).collect();
        threads.sort_unstable();
        threads.dedup();
        if threads.len() > 1 {
            let p = dir.join(format!("{stem}-rate.svg"));
            plot_rate(&p, &title, &ok)?;
            written.push(p.display().to_string());
        }
        let tmax = *threads.last().expect("at least one row");
        let at: Vec<&Row> = ok
            .iter()
            .copied()
            .filter(|r| r.threads == tmax && !r.quantiles.is_empty())
            .collect();
        if !at.is_empty() {
            let p = dir.join(format!("{stem}-latency.svg"));
            plot_latency(&p, &title, &at)?;
            written.push(p.display().to_string());
        }
    }
    Ok(written)
}
