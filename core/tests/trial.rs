//! What a user's trial found (issue: "a panic that keeps a key, an abort at
//! thread exit"): each test failed before its fix.

mod common;

use common::{revoking_lock, store_with};
use holdline::{ErrorKind, Store};
use std::process::Command;
use std::time::Duration;

#[test]
fn far_deadlines_are_representable_and_never_strand_a_key() {
    let store = Store::new();
    // An earlier timed lease moves the wheel off zero; that is what made
    // a deadline past its range index a seventh level.
    let short = revoking_lock(&store, "far", 5);
    short
        .hold("k", |_| std::thread::sleep(Duration::from_millis(20)))
        .unwrap_err();
    for d in [Duration::MAX, Duration::from_secs(800 * 86_400)] {
        let far = store.lock("far").ttl(d).max_hold(d).open().unwrap();
        assert_eq!(far.hold("k", |lease| lease.key().to_owned()).unwrap(), "k");
        let lease = far.acquire("k").unwrap();
        lease.renew().unwrap();
        assert!(!lease.is_lost());
        lease.release().unwrap();
        assert_eq!(far.stats().held_keys, 0);
    }
    assert!(short.try_hold("k", |_| ()).unwrap().is_some());
}

/// Runs this test binary again as a child that holds `depth` nested keys
/// from a thread-local's destructor, and answers whether it exited cleanly.
fn nested_holds_in_a_tls_destructor(depth: usize) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_holds_keys_in_a_tls_destructor",
            "--nocapture",
        ])
        .env("HOLDLINE_TLS_DEPTH", depth.to_string())
        .output()
        .unwrap()
}

#[test]
fn holds_nested_in_a_thread_local_destructor_do_not_abort() {
    for depth in [1, 6] {
        let out = nested_holds_in_a_tls_destructor(depth);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "depth {depth}: {:?}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains(&format!("held {depth} nested")),
            "depth {depth}: {stdout}"
        );
    }
}

/// The child's half (does nothing unless run by the test above).
#[test]
fn child_holds_keys_in_a_tls_destructor() {
    let Ok(depth) = std::env::var("HOLDLINE_TLS_DEPTH") else {
        return;
    };
    let depth: usize = depth.parse().unwrap();
    struct HoldsOnDrop(usize);
    impl Drop for HoldsOnDrop {
        fn drop(&mut self) {
            let (_store, lock) = store_with("tls");
            fn nest(lock: &holdline::Lock, level: usize, depth: usize) -> usize {
                if level == depth {
                    return level;
                }
                lock.hold(level, |_| nest(lock, level + 1, depth)).unwrap()
            }
            let held = nest(&lock, 0, self.0);
            println!("held {held} nested");
            assert_eq!(lock.stats().held_keys, 0);
        }
    }
    thread_local! {
        static GUARD: std::cell::RefCell<Option<HoldsOnDrop>> = const { std::cell::RefCell::new(None) };
    }
    std::thread::spawn(move || {
        // Ours first, then holdline's: destructors run in reverse order of
        // registration, so holdline's per-thread state is already gone
        // when ours runs, as at a real thread's exit.
        GUARD.with(|g| *g.borrow_mut() = Some(HoldsOnDrop(depth)));
        let (_store, lock) = store_with("warm");
        fn nest(lock: &holdline::Lock, level: usize) {
            if level < 6 {
                lock.hold(level, |_| nest(lock, level + 1)).unwrap();
            }
        }
        nest(&lock, 0);
    })
    .join()
    .unwrap();
}

#[test]
fn the_name_rule_reads_apart_from_its_kind() {
    let store = Store::new();
    let err = store.lock("bad name").open().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert_eq!(
        err.to_string(),
        r#"lock "bad name": a lock name is 1 to 128 ASCII letters, digits and "_-.:": invalid"#
    );
}

#[test]
fn a_panicking_async_closure_lets_the_key_go() {
    let (_store, lock) = store_with("p");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let l = lock.clone();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(l.hold_async("k", async |_| panic!("inside")))
    }));
    assert!(r.is_err());
    assert_eq!(lock.stats().held_keys, 0);
    assert!(lock.try_hold("k", |_| ()).unwrap().is_some());
}
