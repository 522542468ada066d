//! `million-keys`: a million distinct keys, each held once, and the memory
//! a design keeps once they are idle.

use std::hint::black_box;
use std::time::Instant;

use hdrhistogram::Histogram;

use crate::alloc::live_bytes;
use crate::designs::KeyedLock;
use crate::measure::{base_run, hist, settle_fresh_keys};
use crate::row::Run;
use crate::scenario::{Cfg, Scenario, MILLION_TIMED_EVERY};

pub fn million_keys<D: KeyedLock>(cfg: &Cfg, threads: usize) -> Run {
    let mut run = base_run::<D>(Scenario::MillionKeys, threads);
    if D::SINGLE {
        run.na = Some("single key");
        return run;
    }
    let n = cfg.million;
    let keys: Vec<String> = (0..n).map(|i| format!("m{i:07}")).collect();
    let d = D::default();
    let base = live_bytes();
    let chunk = n.div_ceil(threads);
    let start = Instant::now();
    let hs: Vec<Histogram<u64>> = std::thread::scope(|s| {
        let hs: Vec<_> = keys
            .chunks(chunk)
            .map(|ks| {
                let d = &d;
                s.spawn(move || {
                    let mut h = hist();
                    for (i, k) in ks.iter().enumerate() {
                        if i % MILLION_TIMED_EVERY == 0 {
                            let t0 = Instant::now();
                            d.hold(k, || black_box(()));
                            let _ = h.record(t0.elapsed().as_nanos() as u64);
                        } else {
                            d.hold(k, || black_box(()));
                        }
                    }
                    h
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("worker")).collect()
    });
    run.set_rate(n as u64, start.elapsed().as_secs_f64());
    settle_fresh_keys(&mut run, hs, base, D::IDLE, "held once", || d.reclaim());
    drop(d);
    run
}
