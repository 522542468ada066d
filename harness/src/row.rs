//! What a row holds: one run's measurements ([`Run`]) and the row the table
//! shows ([`Row`]), the median of its runs with their min-max range; and
//! how a row compares with holdline's row of its group.

use crate::scenario::Scenario;

/// Quantiles kept for the latency plots.
pub const QUANTILES: [f64; 9] = [0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9999, 1.0];

/// One run of one scenario, with one design, at one thread count.
#[derive(Clone, Debug)]
pub struct Run {
    pub scenario: Scenario,
    pub threads: usize,
    pub design: &'static str,
    pub fifo: bool,
    pub deadline: bool,
    /// `Some(reason)` when the design cannot run the scenario.
    pub na: Option<&'static str>,
    /// What `ops` counts (holds, handoffs, timeouts).
    pub unit: &'static str,
    pub ops: u64,
    pub secs: f64,
    pub per_sec: f64,
    /// What the latency columns measure.
    pub lat_of: &'static str,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub quantiles: Vec<(f64, u64)>,
    /// Grants out of arrival order, and grants sampled (hot-key only).
    pub out_of_order: Option<(u64, u64)>,
    /// Bytes allocated after the run while keys are idle, before and after reclaim.
    pub mem_live: Option<i64>,
    pub mem_idle: Option<i64>,
    /// The same after five more reclaims 20 ms apart.
    pub mem_settled: Option<i64>,
    /// A server row: the server's user + system CPU over the run, in
    /// clock ticks, and in nanoseconds per operation.
    pub cpu_ticks: Option<u64>,
    pub cpu_per_op: Option<f64>,
    pub note: String,
}

impl Run {
    /// A run with identity filled in and nothing measured yet.
    pub fn new(scenario: Scenario, threads: usize, design: &'static str) -> Self {
        Run {
            scenario,
            threads,
            design,
            fifo: false,
            deadline: false,
            na: None,
            unit: "holds",
            ops: 0,
            secs: 0.0,
            per_sec: 0.0,
            lat_of: "hold",
            p50: 0,
            p99: 0,
            p999: 0,
            max: 0,
            quantiles: Vec::new(),
            out_of_order: None,
            mem_live: None,
            mem_idle: None,
            mem_settled: None,
            cpu_ticks: None,
            cpu_per_op: None,
            note: String::new(),
        }
    }

    /// Records the server's CPU over the run: `ticks` of a clock of `hz`
    /// ticks a second, shared among the run's operations (`ops`: call
    /// after [`set_rate`](Run::set_rate)).
    pub fn set_cpu(&mut self, ticks: u64, hz: u64) {
        self.cpu_ticks = Some(ticks);
        self.cpu_per_op =
            (self.ops > 0).then(|| ticks as f64 * 1e9 / hz.max(1) as f64 / self.ops as f64);
    }

    /// Records `ops` done in `secs`, and the rate they make.
    pub fn set_rate(&mut self, ops: u64, secs: f64) {
        self.ops = ops;
        self.secs = secs;
        self.per_sec = ops as f64 / secs;
    }
}

/// A measure over a row's runs: the median (the lower middle one for an even
/// count, so it is always a value some run had) and the extremes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Spread<T> {
    pub median: T,
    pub min: T,
    pub max: T,
}

impl<T: Copy + PartialOrd + Default> Spread<T> {
    pub fn of(values: impl IntoIterator<Item = T>) -> Self {
        let mut v: Vec<T> = values.into_iter().collect();
        if v.is_empty() {
            return Spread::default();
        }
        v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        Spread {
            median: v[(v.len() - 1) / 2],
            min: v[0],
            max: v[v.len() - 1],
        }
    }
}

/// A row of the table: one scenario, design, thread count and busy level,
/// summarised over its runs.
#[derive(Clone, Debug)]
pub struct Row {
    pub scenario: Scenario,
    pub threads: usize,
    /// CPU-bound threads that spun beside every run of the row.
    pub busy: usize,
    pub design: &'static str,
    pub fifo: bool,
    pub deadline: bool,
    pub na: Option<&'static str>,
    pub unit: &'static str,
    pub lat_of: &'static str,
    /// Runs summarised (1 for an n/a row: it has nothing to repeat).
    pub runs: usize,
    pub rate: Spread<f64>,
    /// Each run's rate, in the order the runs were made (round by round).
    pub rates: Vec<f64>,
    /// Operations and seconds of the median-rate run.
    pub ops: u64,
    pub secs: f64,
    pub p50: u64,
    pub p99: Spread<u64>,
    pub p999: u64,
    /// The longest single operation in any run.
    pub max: u64,
    /// Median over runs, quantile by quantile.
    pub quantiles: Vec<(f64, u64)>,
    /// Summed over runs.
    pub out_of_order: Option<(u64, u64)>,
    pub mem_live: Option<i64>,
    pub mem_idle: Option<i64>,
    pub mem_settled: Option<i64>,
    /// The server's CPU per operation over the runs (median and
    /// extremes), and the clock ticks of the median-rate run.
    pub cpu_per_op: Option<Spread<f64>>,
    pub cpu_ticks: Option<u64>,
    /// The median-rate run's note.
    pub note: String,
}

fn median_of<T: Copy + PartialOrd + Default>(v: impl IntoIterator<Item = T>) -> T {
    Spread::of(v).median
}

fn median_opt(runs: &[Run], f: impl Fn(&Run) -> Option<i64>) -> Option<i64> {
    let v: Vec<i64> = runs.iter().filter_map(f).collect();
    (!v.is_empty()).then(|| median_of(v))
}

impl Row {
    /// Summarises `runs` (at least one, all of the same scenario, threads and design).
    pub fn of_runs(runs: &[Run], busy: usize) -> Row {
        let first = runs.first().expect("a row has at least one run");
        let rate = Spread::of(runs.iter().map(|r| r.per_sec));
        let mid = runs
            .iter()
            .find(|r| r.per_sec == rate.median)
            .unwrap_or(first);
        let quantiles = first
            .quantiles
            .iter()
            .enumerate()
            .map(|(i, &(q, _))| {
                let at = runs.iter().filter_map(|r| r.quantiles.get(i).map(|x| x.1));
                (q, median_of(at))
            })
            .collect();
        let out_of_order = runs
            .iter()
            .filter_map(|r| r.out_of_order)
            .reduce(|a, b| (a.0 + b.0, a.1 + b.1));
        Row {
            scenario: first.scenario,
            threads: first.threads,
            busy,
            design: first.design,
            fifo: first.fifo,
            deadline: first.deadline,
            na: runs.iter().find_map(|r| r.na),
            unit: first.unit,
            lat_of: first.lat_of,
            runs: runs.len(),
            rate,
            rates: runs.iter().map(|r| r.per_sec).collect(),
            ops: mid.ops,
            secs: mid.secs,
            p50: median_of(runs.iter().map(|r| r.p50)),
            p99: Spread::of(runs.iter().map(|r| r.p99)),
            p999: median_of(runs.iter().map(|r| r.p999)),
            max: runs.iter().map(|r| r.max).max().unwrap_or(0),
            quantiles,
            out_of_order,
            mem_live: median_opt(runs, |r| r.mem_live),
            mem_idle: median_opt(runs, |r| r.mem_idle),
            mem_settled: median_opt(runs, |r| r.mem_settled),
            cpu_per_op: {
                let cpu: Vec<f64> = runs.iter().filter_map(|r| r.cpu_per_op).collect();
                (!cpu.is_empty()).then(|| Spread::of(cpu))
            },
            cpu_ticks: mid.cpu_ticks,
            note: mid.note.clone(),
        }
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

/// The holdline row (the scenario's [reference](Scenario::reference)) of
/// the same scenario, thread count and busy level.
fn holdline_of<'a>(rows: &'a [Row], r: &Row) -> Option<&'a Row> {
    rows.iter().find(|h| {
        h.design == r.scenario.reference()
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

/// The lowest and highest of the per-round time ratios (each run's rate
/// against holdline's run of the same round, made moments apart) and their
/// median; `None` unless both rows have the same runs, at least two.
pub fn time_ratio_spread(rows: &[Row], r: &Row) -> Option<Spread<f64>> {
    let h = holdline_of(rows, r)?;
    let paired = r.na.is_none() && r.rates.len() == h.rates.len() && r.rates.len() > 1;
    let ratios: Vec<f64> = h.rates.iter().zip(&r.rates).map(|(h, r)| h / r).collect();
    (paired && ratios.iter().all(|x| x.is_finite())).then(|| Spread::of(ratios))
}

/// The design's median p99 relative to holdline's: above 1, worse than holdline.
pub fn p99_ratio(rows: &[Row], r: &Row) -> Option<f64> {
    let h = holdline_of(rows, r)?;
    (r.na.is_none() && h.p99.median > 0 && r.p99.median > 0)
        .then(|| r.p99.median as f64 / h.p99.median as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_median_and_extremes() {
        let s = Spread::of([3.0, 1.0, 2.0]);
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        // An even count takes the lower middle: a value some run had.
        assert_eq!(Spread::of([4u64, 1, 3, 2]).median, 2);
        assert_eq!(
            Spread::of([7u64]),
            Spread {
                median: 7,
                min: 7,
                max: 7
            }
        );
    }

    #[test]
    fn a_row_summarises_its_runs() {
        let run = |rate: f64, p99: u64, max: u64, ooo: (u64, u64), note: &str| {
            let mut r = Run::new(Scenario::HotKey, 2, "holdline");
            r.set_rate((rate * 2.0) as u64, 2.0);
            r.p99 = p99;
            r.max = max;
            r.out_of_order = Some(ooo);
            r.quantiles = vec![(0.5, p99 / 2), (0.99, p99)];
            r.note = note.into();
            r
        };
        let runs = [
            run(30.0, 100, 900, (1, 10), "fast"),
            run(10.0, 300, 5000, (0, 10), "slow"),
            run(20.0, 200, 800, (2, 10), "middle"),
        ];
        let row = Row::of_runs(&runs, 1);
        assert_eq!(row.busy, 1);
        assert_eq!(row.runs, 3);
        assert_eq!(
            row.rate,
            Spread {
                median: 20.0,
                min: 10.0,
                max: 30.0
            }
        );
        assert_eq!((row.ops, row.secs), (40, 2.0));
        assert_eq!(row.note, "middle");
        assert_eq!(
            row.p99,
            Spread {
                median: 200,
                min: 100,
                max: 300
            }
        );
        assert_eq!(row.max, 5000);
        assert_eq!(row.out_of_order, Some((3, 30)));
        assert_eq!(row.quantiles, [(0.5, 100), (0.99, 200)]);
        assert_eq!(row.mem_idle, None);
        assert_eq!(row.rates, [30.0, 10.0, 20.0]);
        assert_eq!(row.cpu_per_op, None);
    }

    #[test]
    fn cpu_is_shared_among_a_runs_operations() {
        let mut runs: Vec<Run> = [(1000, 5), (1000, 3), (2000, 20)]
            .iter()
            .map(|&(ops, ticks)| {
                let mut r = Run::new(Scenario::ServerUncontended, 16, "etcd");
                r.set_rate(ops, 1.0);
                r.set_cpu(ticks, 100);
                r
            })
            .collect();
        // 5 ticks of 10 ms over 1000 pairs: 50 us a pair.
        assert_eq!(runs[0].cpu_per_op, Some(50_000.0));
        let row = Row::of_runs(&runs, 0);
        let cpu = row.cpu_per_op.unwrap();
        assert_eq!(
            (cpu.min, cpu.median, cpu.max),
            (30_000.0, 50_000.0, 100_000.0)
        );
        // The ticks of the median-rate run (the lower middle of 1000, 1000, 2000).
        assert_eq!(row.cpu_ticks, Some(5));
        runs[0].ops = 0;
        runs[0].set_cpu(5, 100);
        assert_eq!(runs[0].cpu_per_op, None);
    }

    #[test]
    fn ratio_spread_pairs_runs_of_the_same_round() {
        let row = |design: &'static str, scenario: Scenario, rates: &[f64]| {
            let runs: Vec<Run> = rates
                .iter()
                .map(|&rate| {
                    let mut r = Run::new(scenario, 16, design);
                    r.set_rate(rate as u64, 1.0);
                    r
                })
                .collect();
            Row::of_runs(&runs, 0)
        };
        let rows = [
            row("plain", Scenario::Cluster, &[100.0, 50.0, 80.0]),
            row("cluster-2", Scenario::Cluster, &[50.0, 50.0, 40.0]),
            row("holdline", Scenario::Cluster, &[10.0, 10.0, 10.0]),
            row("cluster-3", Scenario::Cluster, &[50.0]),
        ];
        // Against plain, not holdline: 2, 1 and 2 round by round.
        let s = time_ratio_spread(&rows, &rows[1]).unwrap();
        assert_eq!((s.min, s.median, s.max), (1.0, 2.0, 2.0));
        assert_eq!(time_ratio(&rows, &rows[1]), Some(80.0 / 50.0));
        // Runs that do not pair up (or a single run) have no spread.
        assert_eq!(time_ratio_spread(&rows, &rows[3]), None);
    }
}
