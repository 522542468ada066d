//! `handoff`: two threads ping-pong one key; how long a release takes to
//! reach the other thread's closure.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use crate::designs::KeyedLock;
use crate::measure::{base_run, fill_lat, hist, merged, run_for};
use crate::row::Run;
use crate::scenario::{Cfg, Scenario};

/// Two threads ping-pong one key: each, once it holds the key, waits until
/// the other has announced it is about to wait for the key, lingers
/// [`Cfg::handoff_linger`] so the other is in line, and lets go. Latency: from
/// the holder's last instant inside its closure to the other's closure
/// starting. Every hold is a handoff unless a design lets the releasing
/// thread take the key straight back (barging); the note says how many
/// holds changed thread.
pub fn handoff<D: KeyedLock>(cfg: &Cfg) -> Run {
    let threads = 2;
    let mut run = base_run::<D>(Scenario::Handoff, threads);
    run.unit = "handoffs";
    run.lat_of = "release->next";
    let d = D::default();
    let base = Instant::now();
    let now = || base.elapsed().as_nanos() as u64;
    let last_release = AtomicU64::new(0);
    let last_holder = AtomicUsize::new(usize::MAX);
    let waiting = [AtomicBool::new(false), AtomicBool::new(false)];
    let total = cfg.duration + cfg.lat_duration;
    let linger_for = cfg.handoff_linger;
    let (outs, secs) = run_for(threads, total, |t, stop| {
        let mut h = hist();
        let (mut holds, mut handoffs) = (0u64, 0u64);
        while !stop.load(Relaxed) {
            waiting[t].store(true, std::sync::atomic::Ordering::SeqCst);
            d.hold("ping", || {
                let start = now();
                waiting[t].store(false, std::sync::atomic::Ordering::SeqCst);
                let prev = last_holder.load(Relaxed);
                if prev != t && prev != usize::MAX {
                    let _ = h.record(start.saturating_sub(last_release.load(Relaxed)).max(1));
                    handoffs += 1;
                }
                // Wait for the other thread to come for the key.
                let mut spins = 0u32;
                while !waiting[1 - t].load(std::sync::atomic::Ordering::SeqCst)
                    && !stop.load(Relaxed)
                {
                    spins += 1;
                    if spins < 1_000 {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
                let linger = Instant::now();
                while linger.elapsed() < linger_for {
                    std::hint::spin_loop();
                }
                last_holder.store(t, Relaxed);
                last_release.store(now(), Relaxed);
            });
            holds += 1;
        }
        (h, [holds, handoffs])
    });
    let (all, [holds, handoffs]) = merged(outs);
    fill_lat(&mut run, &all);
    run.set_rate(handoffs, secs);
    run.note = format!(
        "{handoffs} of {holds} holds changed thread ({:.0}%)",
        100.0 * handoffs as f64 / holds.max(1) as f64
    );
    run
}
