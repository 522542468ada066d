//! The keyed rows on threads: `uncontended` (each thread its own keys),
//! `hot-key` (everyone on one key, with grant order sampled) and `zipf`
//! (a skewed draw over many keys).

use crate::designs::KeyedLock;
use crate::measure::{base_run, throughput_and_latency, Padded};
use crate::row::Run;
use crate::scenario::{Cfg, Scenario, UNCONTENDED_KEYS};
use crate::zipf::{ranks, ZIPF_KEYS, ZIPF_S};

pub fn uncontended<D: KeyedLock>(cfg: &Cfg, threads: usize) -> Run {
    let mut run = base_run::<D>(Scenario::Uncontended, threads);
    let keys: Vec<Vec<String>> = (0..threads)
        .map(|t| (0..UNCONTENDED_KEYS).map(|j| format!("u{t}-{j}")).collect())
        .collect();
    let seqs: Vec<Vec<&str>> = keys
        .iter()
        .map(|ks| ks.iter().map(String::as_str).collect())
        .collect();
    // A single-key baseline gets one lock per thread (each thread its own lock).
    let n = if D::SINGLE { threads } else { 1 };
    let instances: Vec<Padded<D>> = (0..n).map(|_| Padded(D::default())).collect();
    throughput_and_latency(&mut run, cfg, &instances, &seqs, false);
    if D::SINGLE {
        run.note = "one lock per thread".into();
    } else {
        run.note = format!("{UNCONTENDED_KEYS} own keys per thread");
    }
    run
}

pub fn hot_key<D: KeyedLock>(cfg: &Cfg, threads: usize) -> Run {
    let mut run = base_run::<D>(Scenario::HotKey, threads);
    let seqs: Vec<Vec<&str>> = (0..threads).map(|_| vec!["hot"]).collect();
    let d = [Padded(D::default())];
    throughput_and_latency(&mut run, cfg, &d, &seqs, true);
    run
}

pub fn zipf<D: KeyedLock>(cfg: &Cfg, threads: usize) -> Run {
    let mut run = base_run::<D>(Scenario::Zipf, threads);
    if D::SINGLE {
        run.na = Some("single key");
        return run;
    }
    let keys: Vec<String> = (0..ZIPF_KEYS).map(|i| format!("z{i}")).collect();
    let seqs: Vec<Vec<&str>> = (0..threads)
        .map(|t| {
            let ranks = ranks(t as u64 + 1, 1 << 16).into_iter();
            ranks.map(|r| keys[r].as_str()).collect()
        })
        .collect();
    let d = [Padded(D::default())];
    throughput_and_latency(&mut run, cfg, &d, &seqs, false);
    run.note = format!("{ZIPF_KEYS} keys, s={ZIPF_S}");
    run
}
