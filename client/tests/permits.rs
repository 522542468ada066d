//! Permits against a real `holdline serve`: a semaphore of three, a
//! read-write lock (readers share, a writer waits and is not overtaken,
//! its release grants every head reader at once), `try_hold`'s rule, the
//! bad counts' texts byte for byte, `INSPECT`'s holders, permits returned
//! by a dropped connection, and the exact wire (`PERMITS` and `TAKE` only
//! when not 1) against a scripted server.
//!
//! "Waits" is always the server's word: a hold counts as waiting once
//! `INSPECT` shows it in the key's line; nothing here is proved by a sleep.

mod common;

use bytes::BytesMut;
use common::{holder_binary, Server, PATIENCE};
use holdline_client::{Connection, Error, ErrorKind, HeldLease, KeyInfo, Lock, Store, Value};
use holdline_resp::{encode, Decoder, Proto};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::TcpListener;
use tokio::process::ChildStdout;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};

/// A store of `server` with its lock `name` of `permits` permits open.
async fn permit_lock(server: &Server, name: &str, permits: u32) -> (Store, Lock) {
    let store = server.store().await;
    let lock = store.lock(name).permits(permits).open().unwrap();
    (store, lock)
}

/// Two stores of `server`, each with lock `name` of `permits` permits
/// open: the stores (kept alive) and the two handles.
async fn two_handles(server: &Server, name: &str, permits: u32) -> ((Store, Store), Lock, Lock) {
    let (a, first) = permit_lock(server, name, permits).await;
    let (b, second) = permit_lock(server, name, permits).await;
    ((a, b), first, second)
}

/// How many permits a hold takes.
#[derive(Clone, Copy)]
enum Take {
    One,
    Permits(u32),
    All,
}

/// `key`'s lease taking `take`, waiting up to `PATIENCE`.
async fn acquire(lock: &Lock, key: &str, take: Take) -> Result<HeldLease, Error> {
    let hold = lock.key(key).wait(PATIENCE);
    match take {
        Take::One => hold.acquire().await,
        Take::Permits(m) => hold.permits(m).acquire().await,
        Take::All => hold.exclusive().acquire().await,
    }
}

/// The same in a task of its own (a connection of its own): it answers
/// once granted.
fn spawn_acquire(lock: &Lock, key: &'static str, take: Take) -> JoinHandle<HeldLease> {
    let lock = lock.clone();
    tokio::spawn(async move { acquire(&lock, key, take).await.expect("granted") })
}

/// `key`'s state once `ok` holds for it, as the server reports it
/// (polled; the proof is the state itself, never the time it took).
async fn until(lock: &Lock, key: &str, what: &str, ok: impl Fn(&KeyInfo) -> bool) -> KeyInfo {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(info) = lock.inspect(key).await.unwrap() {
            if ok(&info) {
                return info;
            }
            assert!(Instant::now() < deadline, "never {what}: {info:?}");
        }
        assert!(Instant::now() < deadline, "never {what}: no state");
        sleep(Duration::from_millis(5)).await;
    }
}

/// The lease a waiting task was granted.
async fn granted(task: JoinHandle<HeldLease>) -> HeldLease {
    timeout(PATIENCE, task)
        .await
        .expect("granted in time")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_of_three_holds_three_and_the_fourth_waits() {
    let server = Server::start();
    let ((_a, _b), providers, others) = two_handles(&server, "providers", 3).await;
    assert_eq!(providers.permits(), 3);

    let mut held = Vec::new();
    for lock in [&providers, &others, &providers] {
        held.push(acquire(lock, "stripe", Take::One).await.unwrap());
    }
    assert!(held.iter().all(|l| l.permits() == 1 && !l.is_lost()));
    let mut fences: Vec<u64> = held.iter().map(|l| l.fence()).collect();
    let info = until(&providers, "stripe", "three holders", |i| i.holders == 3).await;
    assert_eq!((info.permits_held, info.waiters), (3, 0));

    let fourth = spawn_acquire(&others, "stripe", Take::One);
    let info = until(&providers, "stripe", "the fourth in line", |i| {
        i.waiters == 1
    })
    .await;
    assert_eq!((info.holders, info.permits_held), (3, 3));
    assert!(!fourth.is_finished(), "granted past three permits");

    // One lets go (the middle one): the fourth is granted its permit.
    held.remove(1).release().await.unwrap();
    held.push(granted(fourth).await);
    fences.push(held[2].fence());
    let info = until(&providers, "stripe", "the fourth holding", |i| {
        i.waiters == 0
    })
    .await;
    assert_eq!((info.holders, info.permits_held), (3, 3));

    // Every grant's fence above every earlier one's, in grant order.
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    assert_eq!(info.fence, fences[3], "the highest fence held");
    for lease in held {
        lease.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_a_writer_waits_and_is_not_overtaken() {
    let server = Server::start();
    let ((_a, _b), docs, writers) = two_handles(&server, "docs", 1024).await;

    let r1 = acquire(&docs, "d", Take::One).await.unwrap();
    let r2 = acquire(&writers, "d", Take::One).await.unwrap();
    let info = until(&docs, "d", "two readers", |i| i.holders == 2).await;
    assert_eq!(info.permits_held, 2);

    let writer = spawn_acquire(&writers, "d", Take::All);
    until(&docs, "d", "the writer in line", |i| i.waiters == 1).await;
    // Readers behind the writer wait too, though 1022 permits are free.
    let r3 = spawn_acquire(&docs, "d", Take::One);
    until(&docs, "d", "the third reader in line", |i| i.waiters == 2).await;
    let r4 = spawn_acquire(&writers, "d", Take::One);
    let info = until(&docs, "d", "both late readers in line", |i| i.waiters == 3).await;
    assert_eq!((info.holders, info.permits_held), (2, 2));
    assert!(!writer.is_finished() && !r3.is_finished() && !r4.is_finished());

    // The first reader's release is not enough; the second's grants the writer.
    r1.release().await.unwrap();
    let info = until(&docs, "d", "one reader left", |i| i.holders == 1).await;
    assert_eq!((info.permits_held, info.waiters), (1, 3));
    assert!(
        !writer.is_finished(),
        "the writer shared the key with a reader"
    );
    r2.release().await.unwrap();
    let writer = granted(writer).await;
    assert_eq!(writer.permits(), 1024);
    let info = until(&docs, "d", "the writer alone", |i| i.permits_held == 1024).await;
    assert_eq!((info.holders, info.waiters), (1, 2));
    assert!(
        !r3.is_finished() && !r4.is_finished(),
        "a reader beside the writer"
    );

    // The writer's release grants both head readers, with nothing else let go.
    let writer_fence = writer.fence();
    writer.release().await.unwrap();
    let (r3, r4) = (granted(r3).await, granted(r4).await);
    let info = until(&docs, "d", "two readers again", |i| i.holders == 2).await;
    assert_eq!((info.permits_held, info.waiters), (2, 0));
    // Each its own grant, after the writer's.
    assert!(r3.fence() > writer_fence && r4.fence() > writer_fence);
    assert_ne!(r3.fence(), r4.fence());
    r3.release().await.unwrap();
    r4.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_hold_succeeds_only_when_the_permits_fit_and_nobody_waits() {
    let server = Server::start();
    let (_s, lock) = permit_lock(&server, "tries", 3).await;
    let two = acquire(&lock, "k", Take::Permits(2)).await.unwrap();
    assert_eq!(two.permits(), 2);

    // Two more do not fit: None, the closure not run.
    let mut ran = false;
    let tried = lock
        .key("k")
        .permits(2)
        .try_hold(async |_| ran = true)
        .await;
    assert_eq!(tried.unwrap(), None);
    assert!(!ran);
    assert!(lock
        .key("k")
        .exclusive()
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    // One fits, nobody waits: granted.
    let one = lock.try_hold("k", async |l| l.permits()).await.unwrap();
    assert_eq!(one, Some(1));

    // Someone waits (for all three): one would fit, yet the try answers None.
    let all = spawn_acquire(&lock, "k", Take::All);
    until(&lock, "k", "the exclusive hold in line", |i| i.waiters == 1).await;
    let tried = lock.key("k").permits(1).try_hold(async |_| ()).await;
    assert_eq!(tried.unwrap(), None);
    assert!(lock.try_acquire("k").await.unwrap().is_none());

    two.release().await.unwrap();
    let all = granted(all).await;
    assert_eq!(all.permits(), 3);
    all.release().await.unwrap();
    let fit = lock.key("k").exclusive().try_hold(async |l| l.permits());
    assert_eq!(fit.await.unwrap(), Some(3));
}

/// `command`'s error line from the server, as sent.
async fn server_error(raw: &mut Connection, command: &[&str]) -> String {
    match raw.command(command).await.unwrap() {
        Value::Error(text) => text,
        other => panic!("{command:?} answered {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_counts_fail_invalid_with_the_servers_text() {
    let server = Server::start();
    let s = server.store().await;
    let mut raw = Connection::connect(&server.addr).await.unwrap();

    // A lock of 0 (or too many) permits: open fails, as the server answers.
    let e = s.lock("providers").permits(0).open().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    let zero = "lock providers: a lock has 1 to 1000000 permits, not 0: invalid";
    assert_eq!(e.to_string(), zero);
    let line = server_error(&mut raw, &["HOLD", "providers", "stripe", "PERMITS", "0"]);
    assert_eq!(line.await, format!("INVALID {zero}"));
    let e = s.lock("providers").permits(1_000_001).open().unwrap_err();
    let args = ["HOLD", "providers", "stripe", "PERMITS", "1000001"];
    assert_eq!(server_error(&mut raw, &args).await, format!("INVALID {e}"));

    // More than the lock has, or none: the hold fails at once.
    let providers = s.lock("providers").permits(5).open().unwrap();
    for (m, text) in [
        (
            6,
            "lock providers: key \"stripe\": 6 permits asked of a lock of 5: invalid",
        ),
        (
            0,
            "lock providers: key \"stripe\": 0 permits asked of a lock of 5: invalid",
        ),
    ] {
        let e = providers.key("stripe").permits(m).hold(async |_| ()).await;
        let e = e.unwrap_err();
        assert_eq!(
            (e.kind(), e.to_string().as_str()),
            (ErrorKind::Invalid, text)
        );
        let tried = providers.key("stripe").permits(m).try_hold(async |_| ());
        assert_eq!(tried.await.unwrap_err().to_string(), text);
        let take = m.to_string();
        let args = ["HOLD", "providers", "stripe", "PERMITS", "5", "TAKE", &take];
        assert_eq!(
            server_error(&mut raw, &args).await,
            format!("INVALID {text}")
        );
    }
    opened_with_another_count(&s).await;
}

/// The server fixes a lock's count while a key of it is held: another
/// count fails `invalid` (passed through from the server), and the
/// connection stays usable.
async fn opened_with_another_count(s: &Store) {
    let docs = s.lock("docs").permits(1024).open().unwrap();
    let held = acquire(&docs, "a", Take::One).await.unwrap();
    let eight = s.lock("docs").permits(8).open().unwrap();
    let e = eight.hold("b", async |_| ()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(!e.is_connection());
    assert_eq!(
        e.to_string(),
        "lock docs: opened with 1024 permits, not 8: invalid"
    );
    let e = eight.try_hold("b", async |_| ()).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "lock docs: opened with 1024 permits, not 8: invalid"
    );
    let plain = s.lock("docs").open().unwrap();
    let e = plain.key("b").exclusive().acquire().await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "lock docs: opened with 1024 permits, not 1: invalid"
    );
    // The same store goes on: a hold of the right count is granted.
    let b = docs.key("b").exclusive().hold(async |l| l.permits()).await;
    assert_eq!(b.unwrap(), 1024);
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_lists_every_holder_with_its_fence_and_permits() {
    let server = Server::start();
    let ((a, _b), lock, other) = two_handles(&server, "seen", 5).await;
    // A never-used key has no state. (Another lock's: the server fixes a
    // lock's count at the first command naming it, INSPECT included.)
    let unseen = a.lock("unseen").open().unwrap();
    assert_eq!(unseen.inspect("k").await.unwrap(), None, "never used");

    let first = acquire(&lock, "k", Take::Permits(2)).await.unwrap();
    let second = acquire(&other, "k", Take::One).await.unwrap();
    let all = spawn_acquire(&other, "k", Take::All);
    let info = until(&lock, "k", "the exclusive hold in line", |i| i.waiters == 1).await;
    assert!(info.held);
    assert_eq!((info.holders, info.permits_held), (2, 3));
    assert_eq!(info.fence, second.fence(), "the highest fence held");
    let seen: Vec<(i64, u64, u32)> = info
        .holder_list
        .iter()
        .map(|h| (h.lease, h.fence, h.permits))
        .collect();
    assert_eq!(
        seen,
        [
            (first.id(), first.fence(), 2),
            (second.id(), second.fence(), 1)
        ]
    );
    let (h1, h2) = (&info.holder_list[0], &info.holder_list[1]);
    assert!(h1.id > 0 && h2.id > 0 && h1.id != h2.id, "{info:?}");
    assert!(h1.addr.starts_with("127.0.0.1:") && h1.addr != h2.addr);
    assert_eq!((h1.name.as_deref(), h2.name.as_deref()), (None, None));
    assert_eq!(info.holder.as_ref(), Some(h1), "the oldest holder");

    first.release().await.unwrap();
    second.release().await.unwrap();
    let all = granted(all).await;
    let info = until(&lock, "k", "the exclusive holder", |i| i.waiters == 0).await;
    assert_eq!(
        (info.holders, info.permits_held, info.fence),
        (1, 5, all.fence())
    );
    let only = &info.holder_list[..];
    assert_eq!(only.len(), 1);
    assert_eq!(
        (only[0].lease, only[0].fence, only[0].permits),
        (all.id(), all.fence(), 5)
    );
    let last = all.fence();
    all.release().await.unwrap();
    // Free (unless already reclaimed): nobody listed, the last grant's fence.
    if let Some(free) = lock.inspect("k").await.unwrap() {
        assert!(!free.held);
        assert_eq!((free.holders, free.permits_held, free.fence), (0, 0, last));
        assert!(free.holder_list.is_empty() && free.holder.is_none());
    }
}

/// The holder example in a process of its own, once it printed `held FENCE`.
struct HolderProcess {
    child: tokio::process::Child,
    out: Lines<BufReader<ChildStdout>>,
    fence: u64,
}

/// The holder example holding `take` of a lock of `permits`.
async fn holder_process(addr: &str, lock: &str, permits: &str, take: &str) -> HolderProcess {
    let mut child = tokio::process::Command::new(holder_binary())
        .args([addr, lock, "k", "--permits", permits, "--take", take])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run the holder example (cargo build --example holder)");
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = timeout(PATIENCE, out.next_line()).await.unwrap().unwrap();
    let line = line.expect("the holder prints a line");
    let fence = line
        .strip_prefix("held ")
        .unwrap_or_else(|| panic!("{line}"));
    HolderProcess {
        child,
        out,
        fence: fence.parse().unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_returns_its_permits_to_the_line() {
    let server = Server::start();
    let (_s, lock) = permit_lock(&server, "drop", 3).await;

    // Two permits held by another process, one here: all three taken.
    let mut process = holder_process(&server.addr, "drop", "3", "2").await;
    let mine = acquire(&lock, "k", Take::One).await.unwrap();
    let waiter = spawn_acquire(&lock, "k", Take::Permits(2));
    let info = until(&lock, "k", "the waiter in line", |i| i.waiters == 1).await;
    assert_eq!((info.holders, info.permits_held), (2, 3));
    assert_eq!(info.holder_list[0].fence, process.fence);

    // The process dies (SIGKILL: no RELEASE sent): its two permits go to the waiter.
    process.child.kill().await.unwrap();
    let waited = granted(waiter).await;
    assert_eq!(waited.permits(), 2);
    assert!(waited.fence() > mine.fence());

    // The server drops this process's connection (CLIENT KILL): the lease
    // is lost, and its permit is free again.
    let info = until(&lock, "k", "the waiter holding", |i| i.waiters == 0).await;
    let mine_conn = info
        .holder_list
        .iter()
        .find(|h| h.lease == mine.id())
        .unwrap();
    let mut raw = Connection::connect(&server.addr).await.unwrap();
    let id = mine_conn.id.to_string();
    raw.command(&["CLIENT", "KILL", "ID", &id]).await.unwrap();
    timeout(PATIENCE, mine.signal().aborted())
        .await
        .expect("a dropped connection aborts the signal");
    let lost = mine.check().unwrap_err();
    assert_eq!(lost.kind(), ErrorKind::Lost);
    let vars = [("lock", "drop"), ("key", "\"k\"")];
    assert_eq!(
        lost.to_string(),
        common::expected_text("lost_connection", &vars)
    );
    let info = until(&lock, "k", "the lost permit back", |i| i.holders == 1).await;
    assert_eq!(info.permits_held, 2);
    let one = lock.key("k").permits(1).try_hold(async |l| l.fence()).await;
    assert!(one.unwrap().is_some_and(|f| f > waited.fence()));
    waited.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holder_example_takes_all_and_prints_refusals() {
    let server = Server::start();
    let (_s, lock) = permit_lock(&server, "ex", 4).await;
    let mut process = holder_process(&server.addr, "ex", "4", "all").await;
    let info = until(&lock, "k", "the example holding", |i| i.holders == 1).await;
    assert_eq!((info.permits_held, info.fence), (4, process.fence));
    let mut stdin = process.child.stdin.take().unwrap();
    stdin.write_all(b"done\n").await.unwrap();
    let line = timeout(PATIENCE, process.out.next_line()).await.unwrap();
    assert_eq!(line.unwrap().as_deref(), Some("released"));
    let status = timeout(PATIENCE, process.child.wait()).await.unwrap();
    assert!(status.unwrap().success());

    let out = tokio::process::Command::new(holder_binary())
        .args([&server.addr, "ex", "k", "--permits", "4", "--take", "5"])
        .stdin(Stdio::null())
        .output();
    let out = timeout(PATIENCE, out).await.unwrap().unwrap();
    assert!(!out.status.success());
    let text = "error lock ex: key \"k\": 5 permits asked of a lock of 4: invalid\n";
    assert_eq!(String::from_utf8_lossy(&out.stdout), text);
}

/// What a scripted server saw: every `HOLD` and `TRYHOLD`, as sent.
type Seen = Arc<Mutex<Vec<Vec<String>>>>;

/// A scripted server that grants every `HOLD` and `TRYHOLD` (lease 1,
/// fence 1) and records them; `CLUSTER` answers an error (one server).
async fn recording_server() -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen: Seen = Arc::default();
    let shared = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let seen = shared.clone();
            tokio::spawn(async move {
                let (mut dec, mut buf) = (Decoder::new(1 << 20), BytesMut::new());
                while let Some(cmd) = common::next_command(&mut sock, &mut dec, &mut buf).await {
                    let reply = match cmd[0].as_str() {
                        "HELLO" => Value::Map(vec![
                            (Value::bulk("server"), Value::bulk("holdline")),
                            (Value::bulk("proto"), Value::Integer(3)),
                        ]),
                        "HOLD" | "TRYHOLD" => {
                            seen.lock().unwrap().push(cmd);
                            Value::Array(vec![Value::Integer(1), Value::Integer(1)])
                        }
                        "CLUSTER" => Value::Error("ERR cluster support disabled".into()),
                        _ => Value::simple("OK"),
                    };
                    let mut out = Vec::new();
                    encode(&reply, Proto::Resp3, &mut out);
                    if sock.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_and_take_are_sent_only_when_not_one() {
    let (addr, seen) = recording_server().await;
    let s = Store::connect(&addr).await.unwrap();
    let plain = s.lock("plain").ttl(Duration::from_secs(3)).open().unwrap();
    let five = s
        .lock("five")
        .ttl(Duration::from_secs(3))
        .permits(5)
        .open()
        .unwrap();
    plain.hold("k", async |_| ()).await.unwrap();
    plain
        .key("k")
        .exclusive()
        .try_hold(async |_| ())
        .await
        .unwrap();
    five.key("k").permits(1).hold(async |_| ()).await.unwrap();
    let two = five.key("k").permits(2).hold(async |l| l.permits()).await;
    assert_eq!(two.unwrap(), 2);
    let all = five
        .key("k")
        .exclusive()
        .try_hold(async |l| l.permits())
        .await;
    assert_eq!(all.unwrap(), Some(5));
    let wait = "10000";
    let expected: Vec<Vec<&str>> = vec![
        vec!["HOLD", "plain", "k", "WAIT", wait, "TTL", "3000"],
        vec!["TRYHOLD", "plain", "k", "TTL", "3000"],
        vec![
            "HOLD", "five", "k", "WAIT", wait, "TTL", "3000", "PERMITS", "5",
        ],
        vec![
            "HOLD", "five", "k", "WAIT", wait, "TTL", "3000", "PERMITS", "5", "TAKE", "2",
        ],
        vec![
            "TRYHOLD", "five", "k", "TTL", "3000", "PERMITS", "5", "TAKE", "ALL",
        ],
    ];
    assert_eq!(*seen.lock().unwrap(), expected);
}
