//! How the harness writes numbers: durations, rates, byte counts.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_ns(999), "999ns");
        assert_eq!(fmt_ns(1_500), "1.5us");
        assert_eq!(fmt_ns(2_500_000), "2.50ms");
        assert_eq!(fmt_rate(12_340_000.0), "12.34M/s");
        assert_eq!(fmt_rate_range(900.0, 2_500.0), "900-2.5k/s");
        assert_eq!(fmt_bytes(-2048), "-2.0KiB");
    }
}
