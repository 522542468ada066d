//! criterion micro-benchmarks: holdline beside `parking_lot::Mutex`,
//! `std::sync::Mutex` and the `DashMap<String, Arc<parking_lot::Mutex<()>>>`
//! keyed pattern.
//!
//! Groups: `uncontended` (hold and let go of one key, one thread),
//! `try-held` (a try on a key another thread holds), `fresh-key` (a key or
//! lock created, held once and reclaimed), `handoff` (two threads take turns
//! on one key; time per turn).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use dashmap::DashMap;

type Dash = DashMap<String, Arc<parking_lot::Mutex<()>>>;

fn dash_get(map: &Dash, key: &str) -> Arc<parking_lot::Mutex<()>> {
    if let Some(m) = map.get(key) {
        return m.value().clone();
    }
    map.entry(key.to_owned()).or_default().value().clone()
}

fn holdline_lock() -> (holdline::Store, holdline::Lock) {
    let store = holdline::Store::new();
    let lock = store.lock("bench").open().expect("open");
    (store, lock)
}

fn uncontended(c: &mut Criterion) {
    let mut g = c.benchmark_group("uncontended");
    let (_store, lock) = holdline_lock();
    g.bench_function("holdline hold", |b| {
        b.iter(|| lock.hold("k", |_| black_box(())).unwrap())
    });
    let pl = parking_lot::Mutex::new(());
    g.bench_function("parking_lot lock+unlock", |b| {
        b.iter(|| drop(black_box(&pl).lock()))
    });
    let sm = std::sync::Mutex::new(());
    g.bench_function("std lock+unlock", |b| {
        b.iter(|| drop(black_box(&sm).lock().unwrap()))
    });
    let map = Dash::default();
    g.bench_function("dashmap+pl hold", |b| {
        b.iter(|| {
            let m = dash_get(&map, black_box("k"));
            let _g = m.lock();
            black_box(());
        })
    });
    g.finish();
}

/// Runs `f` while another thread holds the key (via `hold_on`).
fn with_holder<H, F>(hold_on: H, f: F)
where
    H: FnOnce(&dyn Fn()) + Send,
    F: FnOnce(),
{
    let (held_tx, held_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            hold_on(&|| {
                held_tx.send(()).unwrap();
                done_rx.recv().unwrap();
            })
        });
        held_rx.recv().unwrap();
        f();
        done_tx.send(()).unwrap();
    });
}

fn try_held(c: &mut Criterion) {
    let mut g = c.benchmark_group("try-held");
    let (_store, lock) = holdline_lock();
    with_holder(
        |wait| {
            lock.hold("k", |_| wait()).unwrap();
        },
        || {
            g.bench_function("holdline try_hold", |b| {
                b.iter(|| assert!(lock.try_hold("k", |_| ()).unwrap().is_none()))
            });
        },
    );
    let pl = parking_lot::Mutex::new(());
    with_holder(
        |wait| {
            let _g = pl.lock();
            wait();
        },
        || {
            g.bench_function("parking_lot try_lock", |b| {
                b.iter(|| assert!(black_box(&pl).try_lock().is_none()))
            });
        },
    );
    let sm = std::sync::Mutex::new(());
    with_holder(
        |wait| {
            let _g = sm.lock().unwrap();
            wait();
        },
        || {
            g.bench_function("std try_lock", |b| {
                b.iter(|| assert!(black_box(&sm).try_lock().is_err()))
            });
        },
    );
    let map = Dash::default();
    with_holder(
        |wait| {
            let m = dash_get(&map, "k");
            let _g = m.lock();
            wait();
        },
        || {
            g.bench_function("dashmap+pl try", |b| {
                b.iter(|| {
                    let m = dash_get(&map, black_box("k"));
                    assert!(m.try_lock().is_none());
                })
            });
        },
    );
    g.finish();
}

fn fresh_key(c: &mut Criterion) {
    let mut g = c.benchmark_group("fresh-key");
    // Keys cycle through a large set: each is idle (reclaimed) by the time it comes round again.
    let keys: Vec<String> = (0..1 << 16).map(|i| format!("fresh-{i}")).collect();
    let mask = keys.len() - 1;
    let (store, lock) = holdline_lock();
    let mut i = 0usize;
    g.bench_function("holdline hold (create+reclaim)", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            lock.hold(&keys[i & mask], |_| black_box(())).unwrap()
        })
    });
    store.reclaim_idle();
    g.bench_function("parking_lot new+lock+drop", |b| {
        b.iter(|| {
            let m = Box::new(parking_lot::Mutex::new(()));
            drop(black_box(&m).lock());
        })
    });
    g.bench_function("std new+lock+drop", |b| {
        b.iter(|| {
            let m = Box::new(std::sync::Mutex::new(()));
            drop(black_box(&m).lock().unwrap());
        })
    });
    let map = Dash::default();
    g.bench_function("dashmap+pl insert+lock+remove", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            let k = &keys[i & mask];
            let m = dash_get(&map, k);
            drop(m.lock());
            drop(m);
            map.remove(k);
        })
    });
    g.finish();
}

/// Two threads take turns on one key: each hold checks whose turn it is and,
/// when it is its own, passes the turn. Answers the time for `iters` turns
/// of each thread.
fn ping_pong(iters: u64, hold: &(dyn Fn(&mut dyn FnMut()) + Sync)) -> Duration {
    let turn = AtomicUsize::new(0);
    let go = AtomicBool::new(false);
    let player = |me: usize| {
        while !go.load(Relaxed) {
            std::hint::spin_loop();
        }
        let mut done = 0;
        while done < iters {
            hold(&mut || {
                if turn.load(Relaxed) == me {
                    turn.store(1 - me, Relaxed);
                    done += 1;
                }
            });
        }
    };
    std::thread::scope(|s| {
        let other = s.spawn(|| player(1));
        let start = Instant::now();
        go.store(true, Relaxed);
        player(0);
        other.join().unwrap();
        start.elapsed()
    })
}

fn handoff(c: &mut Criterion) {
    let mut g = c.benchmark_group("handoff");
    g.measurement_time(Duration::from_secs(3));
    let (_store, lock) = holdline_lock();
    g.bench_function("holdline ping-pong", |b| {
        b.iter_custom(|n| ping_pong(n, &|f| lock.hold("k", |_| f()).unwrap()))
    });
    let pl = parking_lot::Mutex::new(());
    g.bench_function("parking_lot ping-pong", |b| {
        b.iter_custom(|n| {
            ping_pong(n, &|f| {
                let _g = pl.lock();
                f()
            })
        })
    });
    let sm = std::sync::Mutex::new(());
    g.bench_function("std ping-pong", |b| {
        b.iter_custom(|n| {
            ping_pong(n, &|f| {
                let _g = sm.lock().unwrap();
                f()
            })
        })
    });
    let map = Dash::default();
    g.bench_function("dashmap+pl ping-pong", |b| {
        b.iter_custom(|n| {
            ping_pong(n, &|f| {
                let m = dash_get(&map, "k");
                let _g = m.lock();
                f()
            })
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = uncontended, try_held, fresh_key, handoff
}
criterion_main!(benches);
