//! `deadline`: waiters with a short deadline behind a slow holder; how late
//! each timeout comes back (never early).

use std::hint::black_box;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use crate::designs::{Deadline, KeyedLock};
use crate::measure::{base_run, fill_lat, hist, run_for};
use crate::row::Run;
use crate::scenario::{Cfg, Scenario, DEADLINE_WAITERS};

/// One thread holds a key for `dl_hold` at a time, again and again; the other
/// threads wait on it with a `dl_wait` deadline. Latency is how late each
/// timeout came back (elapsed minus the deadline); a timeout before the
/// deadline counts as early (incorrect).
pub fn deadline<D: KeyedLock>(cfg: &Cfg) -> Run {
    let waiters = DEADLINE_WAITERS;
    let mut run = base_run::<D>(Scenario::Deadline, waiters + 1);
    run.unit = "timeouts";
    run.lat_of = "lateness";
    if D::DEADLINE == Deadline::Lacks {
        run.na = Some("no bounded wait");
        return run;
    }
    let d = D::new();
    let wait = cfg.dl_wait;
    let hold_for = cfg.dl_hold;
    let total = (cfg.duration + cfg.lat_duration).max(hold_for * 60);
    let (outs, secs) = run_for(waiters + 1, total, |t, stop| {
        let mut h = hist();
        let (mut timeouts, mut early, mut grants) = (0u64, 0u64, 0u64);
        if t == 0 {
            while !stop.load(Relaxed) {
                d.hold("dl", || std::thread::sleep(hold_for));
            }
            return (h, 0, 0, 0);
        }
        while !stop.load(Relaxed) {
            let t0 = Instant::now();
            match d.hold_within("dl", wait, || black_box(())) {
                Some(()) => grants += 1,
                None => {
                    let el = t0.elapsed();
                    timeouts += 1;
                    if el < wait {
                        early += 1;
                    } else {
                        let _ = h.record(((el - wait).as_nanos() as u64).max(1));
                    }
                }
            }
        }
        (h, timeouts, early, grants)
    });
    let mut all = hist();
    let (mut timeouts, mut early, mut grants) = (0, 0, 0);
    for (h, a, b, c) in outs {
        all.add(h).expect("merge");
        timeouts += a;
        early += b;
        grants += c;
    }
    fill_lat(&mut run, &all);
    run.set_rate(timeouts, secs);
    run.note = format!(
        "{waiters} waiters, wait {:?}, holder {:?}: {timeouts} timed out ({early} early), {grants} granted",
        wait, hold_for
    );
    run
}
