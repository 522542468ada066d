//! A holder in a process of its own, for the clients' cross-process tests:
//! `holder ADDRESS LOCK KEY [TTL_MS] [--permits N] [--take M|all]` waits for
//! the key (up to 60 s), prints `held FENCE`, and holds it until a line
//! other than `look` arrives on stdin (or stdin closes); then it lets the
//! key go and prints `released`, or `lost TEXT` when the lease was lost
//! meanwhile.
//!
//! `--permits N` opens the lock with N permits per key (default 1);
//! `--take M` takes M of them, `--take all` all of them (exclusive). Without
//! either, the hold is a plain one, as before permits existed. A bad count
//! prints `error TEXT` (the server's or the client's text) and exits 1.
//!
//! A `look` line prints `look lost` or `look held` from the lease's first
//! look after the line arrived: a test that stopped this process past its
//! ttl sees whether the lease knows from the clock alone.

use holdline_client::{KeyHold, Store};
use std::io::BufRead;
use std::time::Duration;

const USAGE: &str = "usage: holder ADDRESS LOCK KEY [TTL_MS] [--permits N] [--take M|all]";

/// How many permits the hold takes.
enum Take {
    One,
    Permits(u32),
    All,
}

/// The command line, parsed.
struct Args {
    address: String,
    lock: String,
    key: String,
    ttl: Option<Duration>,
    permits: u32,
    take: Take,
}

fn parse(args: Vec<String>) -> Result<Args, Box<dyn std::error::Error>> {
    let mut positional = Vec::new();
    let (mut permits, mut take) = (1, Take::One);
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--permits" => permits = it.next().ok_or(USAGE)?.parse()?,
            "--take" => {
                take = match it.next().ok_or(USAGE)?.as_str() {
                    "all" | "ALL" => Take::All,
                    m => Take::Permits(m.parse()?),
                }
            }
            _ => positional.push(arg),
        }
    }
    let mut positional = positional.into_iter();
    let mut next = || positional.next().ok_or(USAGE);
    let (address, lock, key) = (next()?, next()?, next()?);
    let ttl = match positional.next() {
        Some(ms) => Some(Duration::from_millis(ms.parse()?)),
        None => None,
    };
    if positional.next().is_some() {
        return Err(USAGE.into());
    }
    Ok(Args {
        address,
        lock,
        key,
        ttl,
        permits,
        take,
    })
}

/// `hold` with the permits asked for.
fn taking<'a>(hold: KeyHold<'a>, take: &Take) -> KeyHold<'a> {
    match take {
        Take::One => hold,
        Take::Permits(m) => hold.permits(*m),
        Take::All => hold.exclusive(),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse(std::env::args().skip(1).collect())?;
    let store = Store::connect(&args.address).await?;
    let mut lock = store.lock(&args.lock).permits(args.permits);
    if let Some(ttl) = args.ttl {
        lock = lock.ttl(ttl);
    }
    let lock = match lock.open() {
        Ok(lock) => lock,
        Err(e) => {
            println!("error {e}");
            std::process::exit(1);
        }
    };
    let key = lock.key(args.key.as_str()).wait(Duration::from_secs(60));
    let mut granted = false;
    let held = taking(key, &args.take)
        .hold(async |lease| {
            granted = true;
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
        Err(e) if granted => println!("lost {e}"),
        // Never held: a refused hold (a bad count, `in use`), not a loss.
        Err(e) => {
            println!("error {e}");
            std::process::exit(1);
        }
    }
    Ok(())
}
