//! `deadline`: waiters with a short deadline behind a slow holder; how late
//! each timeout comes back (never early).

use std::hint::black_box;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::designs::{Deadline, KeyedLock};
use crate::measure::{base_run, fill_lat, hist, merged, run_for};
use crate::row::Run;
use crate::scenario::{Cfg, Scenario, DEADLINE_WAITERS};

/// One waiter's tally behind the slow holder (threads or tasks alike).
pub struct Waits {
    /// How late each timeout came back, past its deadline.
    lateness: Histogram<u64>,
    timeouts: u64,
    /// Timeouts that came back before their deadline: incorrect.
    early: u64,
    grants: u64,
}

impl Default for Waits {
    fn default() -> Self {
        Waits {
            lateness: hist(),
            timeouts: 0,
            early: 0,
            grants: 0,
        }
    }
}

impl Waits {
    /// Counts one wait with deadline `wait` that took `waited`.
    pub fn count(&mut self, granted: bool, waited: Duration, wait: Duration) {
        if granted {
            self.grants += 1;
            return;
        }
        self.timeouts += 1;
        if waited < wait {
            self.early += 1;
        } else {
            let _ = self
                .lateness
                .record(((waited - wait).as_nanos() as u64).max(1));
        }
    }

    /// The lateness and `[timeouts, early, grants]`.
    pub fn into_parts(self) -> (Histogram<u64>, [u64; 3]) {
        (self.lateness, [self.timeouts, self.early, self.grants])
    }
}

/// The run's figures from every waiter's [`Waits`]: timeouts per second and
/// their lateness; answers `[timeouts, early, grants]` for the note.
pub fn record_waits(run: &mut Run, outs: Vec<(Histogram<u64>, [u64; 3])>, secs: f64) -> [u64; 3] {
    let (lateness, counts) = merged(outs);
    fill_lat(run, &lateness);
    run.set_rate(counts[0], secs);
    counts
}

/// A deadline row (threads or tasks) before it runs: the holder and
/// [`DEADLINE_WAITERS`] waiters, counting timeouts and their lateness.
pub fn deadline_run<D: KeyedLock>(scenario: Scenario) -> Run {
    let mut run = base_run::<D>(scenario, DEADLINE_WAITERS + 1);
    run.unit = "timeouts";
    run.lat_of = "lateness";
    run
}

/// How long a deadline row runs: its phases, and at least 60 of the
/// holder's holds, so that timeouts are many.
pub fn deadline_duration(cfg: &Cfg) -> Duration {
    (cfg.duration + cfg.lat_duration).max(cfg.dl_hold * 60)
}

/// One thread holds a key for `dl_hold` at a time, again and again; the other
/// threads wait on it with a `dl_wait` deadline. Latency is how late each
/// timeout came back (elapsed minus the deadline); a timeout before the
/// deadline counts as early (incorrect).
pub fn deadline<D: KeyedLock>(cfg: &Cfg) -> Run {
    let waiters = DEADLINE_WAITERS;
    let mut run = deadline_run::<D>(Scenario::Deadline);
    if D::DEADLINE == Deadline::Lacks {
        run.na = Some("no bounded wait");
        return run;
    }
    let d = D::default();
    let (wait, hold_for) = (cfg.dl_wait, cfg.dl_hold);
    let (outs, secs) = run_for(waiters + 1, deadline_duration(cfg), |t, stop| {
        let mut waits = Waits::default();
        if t == 0 {
            while !stop.load(Relaxed) {
                d.hold("dl", || std::thread::sleep(hold_for));
            }
            return waits.into_parts();
        }
        while !stop.load(Relaxed) {
            let t0 = Instant::now();
            let granted = d.hold_within("dl", wait, || black_box(())).is_some();
            waits.count(granted, t0.elapsed(), wait);
        }
        waits.into_parts()
    });
    let [timeouts, early, grants] = record_waits(&mut run, outs, secs);
    run.note = format!(
        "{waiters} waiters, wait {:?}, holder {:?}: {timeouts} timed out ({early} early), {grants} granted",
        wait, hold_for
    );
    run
}
