//! Bounded load: 64 connections x 2,000 holds over 16 keys. The clients
//! check mutual exclusion and that fences rise per key; afterwards every
//! grant is counted, no key is left in memory, and the server's resident
//! memory is back near where it started.

mod common;

use common::{Server, PATIENCE};
use holdline_resp::Value;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CONNECTIONS: usize = 64;
const HOLDS_EACH: usize = 2_000;
const KEYS: usize = 16;

/// What the clients share to check the server: who holds each key now,
/// and the last fence each key was granted with.
struct Witness {
    held: Vec<AtomicBool>,
    last_fence: Vec<AtomicI64>,
}

/// `connections` clients each hold and release `holds` keys of `lock`;
/// answers the grants they got.
fn round(server: &Server, lock: &str, connections: usize, holds: usize) -> usize {
    let witness = Arc::new(Witness {
        held: (0..KEYS).map(|_| AtomicBool::new(false)).collect(),
        last_fence: (0..KEYS).map(|_| AtomicI64::new(0)).collect(),
    });
    let threads: Vec<_> = (0..connections)
        .map(|t| {
            let witness = witness.clone();
            let addr = server.addr;
            let lock = lock.to_owned();
            std::thread::spawn(move || {
                let mut c = common::Client::connect(addr);
                let mut rng = 0x2545_f491_4f6c_dd1d_u64 ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9);
                let mut granted = 0;
                for _ in 0..holds {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let k = (rng % KEYS as u64) as usize;
                    let key = k.to_string();
                    let (lease, fence) = c.grant(&["HOLD", &lock, &key, "WAIT", "60000"]);
                    assert!(
                        !witness.held[k].swap(true, Ordering::SeqCst),
                        "key {k} granted while held"
                    );
                    let last = witness.last_fence[k].swap(fence, Ordering::SeqCst);
                    assert!(fence > last, "key {k}: fence {fence} after {last}");
                    granted += 1;
                    // Let go in the witness before the server can hand it on.
                    witness.held[k].store(false, Ordering::SeqCst);
                    assert_eq!(c.call(&["RELEASE", &lease.to_string()]), Value::ok());
                }
                granted
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).sum()
}

/// Waits until `lock` keeps no key in memory, nudging the store (other
/// holds) so its deferred reclamation gets to run.
fn await_no_live_keys(server: &Server, lock: &str) {
    let mut c = server.connect();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let live = c.stat(lock, "live_keys");
        if live == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "{lock} kept {live} live keys");
        for i in 0..64 {
            let (lease, _) = c.grant(&["TRYHOLD", "nudge", &i.to_string()]);
            c.call(&["RELEASE", &lease.to_string()]);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sixty_four_connections_hold_two_thousand_times_each_over_sixteen_keys() {
    let server = Server::start(&[]);
    // A first, smaller round brings up what stays (worker threads, the
    // allocator's arenas, connection buffers) before memory is measured.
    assert_eq!(
        round(&server, "warmup", CONNECTIONS, 100),
        CONNECTIONS * 100
    );
    await_no_live_keys(&server, "warmup");
    let start_kib = server.rss_kib();

    // A lock nobody has a handle of, with no key left in memory, is
    // forgotten with its counters: a key held throughout keeps "load" known
    // (between two holds every connection may be without one).
    let mut c = server.connect();
    let (kept, _) = c.grant(&["HOLD", "load", "kept", "WAIT", "0"]);
    let started = Instant::now();
    let granted = round(&server, "load", CONNECTIONS, HOLDS_EACH);
    let took = started.elapsed();
    assert_eq!(granted, CONNECTIONS * HOLDS_EACH);
    assert_eq!(
        c.stat("load", "grants"),
        (CONNECTIONS * HOLDS_EACH) as i64 + 1,
        "no grant lost"
    );
    assert_eq!(c.stat("load", "held_keys"), 1);
    assert_eq!(c.stat("load", "waiters"), 0);
    assert_eq!(c.stat("load", "timeouts"), 0);
    assert_eq!(c.call(&["RELEASE", &kept.to_string()]), Value::ok());
    await_no_live_keys(&server, "load");

    let end_kib = server.rss_kib();
    eprintln!(
        "load: {granted} holds in {took:?} ({:.0}/s); server RSS {start_kib} KiB before, {end_kib} KiB after",
        granted as f64 / took.as_secs_f64()
    );
    // 128,000 grants: a leak of even 64 bytes each would show as 8 MiB.
    assert!(
        end_kib < start_kib + 6 * 1024,
        "server RSS grew from {start_kib} KiB to {end_kib} KiB"
    );
}
