//! The campaigner program `clients/testing/election.py` drives (see
//! `clients/testing/CAMPAIGNER.md`):
//!
//! ```text
//! campaigner --addr HOST:PORT --lock LOCK --name ELECTION --note NOTE --ttl-ms T
//! campaigner --addr HOST:PORT --lock LOCK --name ELECTION --observe
//! ```
//!
//! Campaigning: `campaign(NOTE)`; once elected prints `elected`, then every
//! 20 ms takes `t` from CLOCK_MONOTONIC and looks at the leadership's
//! signal, printing `leading` with that `t` while it is not lost, and
//! `lost` at the first look that finds it lost; then campaigns again. An
//! error is printed as `error` and the campaign tried again 100 ms later.
//! Observing: prints every item of `observe()` as `observed`. One JSON
//! object a line on stdout, flushed at once; forever, until killed.

use holdline_client::{Election, Error, Leader, Store};
use serde_json::{json, Value};
use std::io::Write;
use std::time::Duration;

const USAGE: &str = "usage: campaigner --addr HOST:PORT --lock LOCK --name ELECTION \
                     (--note NOTE [--ttl-ms T] | --observe)";

/// How often a leader looks at its leadership.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// The pause after an error before trying again.
const AFTER_ERROR: Duration = Duration::from_millis(100);

/// The command line, parsed.
struct Args {
    addr: String,
    lock: String,
    name: String,
    /// `None` with `--observe`.
    note: Option<String>,
    ttl: Option<Duration>,
}

fn parse(args: Vec<String>) -> Result<Args, String> {
    let (mut addr, mut lock, mut name, mut note) = (None, None, None, None);
    let (mut ttl, mut observe) = (None, false);
    let mut it = args.into_iter();
    while let Some(flag) = it.next() {
        if flag == "--observe" {
            observe = true;
            continue;
        }
        let value = it.next().ok_or(USAGE)?;
        match flag.as_str() {
            "--addr" => addr = Some(value),
            "--lock" => lock = Some(value),
            "--name" => name = Some(value),
            "--note" => note = Some(value),
            "--ttl-ms" => {
                let ms = value.parse().map_err(|_| USAGE)?;
                ttl = Some(Duration::from_millis(ms));
            }
            _ => return Err(USAGE.into()),
        }
    }
    if observe == note.is_some() {
        return Err(USAGE.into());
    }
    Ok(Args {
        addr: addr.ok_or(USAGE)?,
        lock: lock.ok_or(USAGE)?,
        name: name.ok_or(USAGE)?,
        note,
        ttl,
    })
}

/// CLOCK_MONOTONIC in nanoseconds: the one clock of every process of the
/// machine, as the checker compares them.
fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration,
    // and CLOCK_MONOTONIC is a clock every Linux has.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One line of JSON on stdout, flushed at once.
fn say(line: Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn error_line(e: &Error) -> Value {
    json!({"event": "error", "t": now_ns(), "kind": e.kind().as_str(), "text": e.to_string()})
}

/// The store, connecting again every 100 ms until the server answers.
async fn connect(addr: &str) -> Store {
    loop {
        match Store::connect(addr).await {
            Ok(store) => return store,
            Err(e) => say(error_line(&e)),
        }
        tokio::time::sleep(AFTER_ERROR).await;
    }
}

/// Campaigns, leads until lost, and campaigns again, forever.
async fn campaign(election: &Election, note: &str) -> ! {
    loop {
        let lead = match election.campaign(note).await {
            Ok(lead) => lead,
            Err(e) => {
                say(error_line(&e));
                tokio::time::sleep(AFTER_ERROR).await;
                continue;
            }
        };
        let fence = lead.fence();
        say(json!({"event": "elected", "t": now_ns(), "fence": fence}));
        let signal = lead.signal();
        loop {
            tokio::time::sleep(LOOK_EVERY).await;
            // The time first, then the look: a look that finds the
            // leadership alive proves it was alive at `t`.
            let t = now_ns();
            if signal.is_aborted() {
                say(json!({"event": "lost", "t": now_ns(), "fence": fence}));
                break;
            }
            say(json!({"event": "leading", "t": t, "fence": fence}));
        }
    }
}

/// Prints every item of `observe()`, forever (a new observer after one
/// that ended, 100 ms later).
async fn observe(election: &Election) -> ! {
    loop {
        let mut leaders = election.observe();
        while let Some(leader) = leaders.next().await {
            say(observed(leader.as_ref()));
        }
        if let Some(e) = leaders.error() {
            say(error_line(e));
        }
        tokio::time::sleep(AFTER_ERROR).await;
    }
}

fn observed(leader: Option<&Leader>) -> Value {
    let (fence, note) = match leader {
        Some(l) => (json!(l.fence), json!(l.note)),
        None => (Value::Null, Value::Null),
    };
    json!({"event": "observed", "t": now_ns(), "fence": fence, "note": note})
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = match parse(std::env::args().skip(1).collect()) {
        Ok(args) => args,
        Err(usage) => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let store = connect(&args.addr).await;
    let mut lock = store.lock(&args.lock);
    if let Some(ttl) = args.ttl {
        lock = lock.ttl(ttl);
    }
    let lock = lock.open().unwrap_or_else(|e| {
        say(error_line(&e));
        std::process::exit(1);
    });
    let election = lock.election(&args.name);
    say(json!({"event": "ready", "t": now_ns(), "pid": std::process::id()}));
    match &args.note {
        Some(note) => campaign(&election, note).await,
        None => observe(&election).await,
    }
}
