//! A holder in a process of its own, for the clients' cross-process tests:
//! `holder ADDRESS LOCK KEY [TTL_MS]` waits for the key (up to 60 s),
//! prints `held FENCE`, and holds it until a line other than `look`
//! arrives on stdin (or stdin closes); then it lets the key go and prints
//! `released`, or `lost TEXT` when the lease was lost meanwhile.
//!
//! A `look` line prints `look lost` or `look held` from the lease's first
//! look after the line arrived: a test that stopped this process past its
//! ttl sees whether the lease knows from the clock alone.

use holdline_client::Store;
use std::io::BufRead;
use std::time::Duration;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (address, lock, key, ttl) = match args.as_slice() {
        [a, l, k] => (a, l, k, None),
        [a, l, k, ttl] => (a, l, k, Some(Duration::from_millis(ttl.parse()?))),
        _ => return Err("usage: holder ADDRESS LOCK KEY [TTL_MS]".into()),
    };
    let store = Store::connect(address).await?;
    let mut lock = store.lock(lock);
    if let Some(ttl) = ttl {
        lock = lock.ttl(ttl);
    }
    let lock = lock.open()?;
    let held = lock
        .key(key.as_str())
        .wait(Duration::from_secs(60))
        .hold(async |lease| {
            println!("held {}", lease.fence());
            // stdin is read on a thread of its own, which answers `look`
            // itself: the runtime may not have run since the process resumed.
            let signal = lease.signal();
            let _ = tokio::task::spawn_blocking(move || {
                let stdin = std::io::stdin();
                for line in stdin.lock().lines() {
                    match line.as_deref() {
                        Ok("look") => {
                            let state = if signal.is_aborted() { "lost" } else { "held" };
                            println!("look {state}");
                        }
                        _ => break,
                    }
                }
            })
            .await;
        })
        .await;
    match held {
        Ok(()) => println!("released"),
        Err(e) => println!("lost {e}"),
    }
    Ok(())
}
