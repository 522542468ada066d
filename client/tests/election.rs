//! Elections against a real `holdline serve`: campaign, leader, proclaim
//! and resign; a second campaigner elected with a greater fence once the
//! first resigns or loses its connection; notes on holds as `INSPECT`
//! shows them; `observe()` yielding the present state first, every change
//! in order, and the present state again after a `CLIENT KILL` of its
//! connection; against scripted nodes, `closed` observed again at the
//! node `MOVED` names, and a silent server given up after the ttl; and
//! `clients/testing/election.py` run with the campaigner example.
//!
//! "Waits" is the server's word: a campaigner counts as waiting once
//! `INSPECT` shows it in the key's line; nothing here is proved by a sleep.

mod common;

use bytes::BytesMut;
use common::{expected_text, Server, PATIENCE};
use holdline_client::{
    key_slot, Connection, Election, ErrorKind, Leader, Leadership, Lock, Observer, Store, Value,
};
use holdline_resp::{encode, Decoder, Proto};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::timeout;

/// A single server's answer to `CLUSTER SLOTS` (Redis's text).
const NOT_CLUSTER: &str = "ERR This instance has cluster support disabled";

async fn lock(server: &Server) -> Lock {
    let store = Store::connect(&server.addr).await.expect("connect");
    store
        .lock("elections")
        .ttl(Duration::from_secs(2))
        .open()
        .unwrap()
}

/// Waits (polling `INSPECT`) until `waiters` stand in the key's line.
async fn until_waiting(lock: &Lock, key: &str, waiters: usize) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let info = lock.inspect(key).await.unwrap();
        if info.is_some_and(|i| i.waiters == waiters) {
            return;
        }
        assert!(Instant::now() < deadline, "{waiters} never waited on {key}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Campaigns for `note` on a task of its own, and answers that task once
/// its campaign waits in line, the only one there.
async fn campaign_behind(
    lock: &Lock,
    election: &Election,
    note: &str,
) -> JoinHandle<Result<Leadership, holdline_client::Error>> {
    let waiting = {
        let (election, note) = (election.clone(), note.to_owned());
        tokio::spawn(async move { election.campaign(&note).await })
    };
    until_waiting(lock, election.name(), 1).await;
    waiting
}

/// `billing`'s election, with `a` leading and `b` waiting in line behind
/// it on a task of its own.
async fn a_leads_b_waits(
    lock: &Lock,
) -> (
    Election,
    Leadership,
    JoinHandle<Result<Leadership, holdline_client::Error>>,
) {
    let election = lock.election("billing");
    let lead = election.campaign("a").await.unwrap();
    let waiting = campaign_behind(lock, &election, "b").await;
    (election, lead, waiting)
}

/// The observer's next item, within the patience.
async fn next(observer: &mut Observer) -> Option<Leader> {
    timeout(PATIENCE, observer.next())
        .await
        .expect("an item within the patience")
        .expect("the stream goes on")
}

/// `(fence, note)` of an item that names a leader.
fn named(item: Option<Leader>) -> (u64, String) {
    let leader = item.expect("a leader, not none");
    (leader.fence, leader.note)
}

/// The ids of the server's connections now (`CLIENT LIST`).
async fn client_ids(admin: &mut Connection) -> BTreeSet<u64> {
    let list = admin.command(&["CLIENT", "LIST"]).await.unwrap();
    let text = list.as_str().expect("CLIENT LIST's text").to_owned();
    text.lines()
        .filter_map(|line| line.strip_prefix("id="))
        .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
        .collect()
}

async fn kill_client(admin: &mut Connection, id: u64) {
    let killed = admin
        .command(&["CLIENT", "KILL", "ID", &id.to_string()])
        .await
        .unwrap();
    assert_eq!(killed, Value::Integer(1), "CLIENT KILL ID {id}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_leads_proclaims_and_resigns_and_the_next_leads_higher() {
    let server = Server::start();
    let lock = lock(&server).await;
    let election = lock.election("billing");
    assert_eq!(election.name(), "billing");
    assert_eq!(election.leader().await.unwrap(), None, "nobody leads yet");

    let lead = election.campaign("10.0.0.5:8080").await.unwrap();
    let leader = election.leader().await.unwrap().expect("a leader");
    assert_eq!(
        (leader.fence, leader.note.as_str()),
        (lead.fence(), "10.0.0.5:8080")
    );
    assert!(leader.held_for.is_some() && leader.holder_id > 0);
    lead.proclaim("10.0.0.5:8081").await.unwrap();
    let proclaimed = election.leader().await.unwrap().unwrap();
    assert_eq!(
        (proclaimed.fence, proclaimed.note.as_str()),
        (lead.fence(), "10.0.0.5:8081")
    );

    // A second candidate waits in line until the first resigns.
    let second = campaign_behind(&lock, &election, "10.0.0.6:8080").await;
    assert!(!second.is_finished());
    let first_fence = lead.fence();
    lead.resign().await.unwrap();
    let second = timeout(PATIENCE, second).await.unwrap().unwrap().unwrap();
    assert!(second.fence() > first_fence, "fences rise");
    let now = election.leader().await.unwrap().unwrap();
    assert_eq!(
        (now.fence, now.note.as_str()),
        (second.fence(), "10.0.0.6:8080")
    );
    assert!(!second.is_lost());
    second.resign().await.unwrap();
    assert_eq!(
        election.leader().await.unwrap(),
        None,
        "resigned: nobody leads"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_connection_is_killed_loses_and_the_next_is_elected() {
    let server = Server::start();
    let lock = lock(&server).await;
    let (election, lead, waiting) = a_leads_b_waits(&lock).await;
    let id = election.leader().await.unwrap().unwrap().holder_id;
    let mut admin = Connection::connect(&server.addr).await.unwrap();
    kill_client(&mut admin, id).await;
    timeout(PATIENCE, lead.signal().aborted())
        .await
        .expect("the kill aborts the leader's signal");
    assert!(lead.is_lost());
    let next = timeout(PATIENCE, waiting).await.unwrap().unwrap().unwrap();
    assert!(next.fence() > lead.fence());
    let lost = lead.proclaim("a again").await.unwrap_err();
    assert_eq!(lost.kind(), ErrorKind::Lost);
    let vars = [("lock", "elections"), ("key", "\"billing\"")];
    assert_eq!(lost.to_string(), expected_text("lost_connection", &vars));
    assert_eq!(lead.resign().await.unwrap_err().kind(), ErrorKind::Lost);
    assert_eq!(election.leader().await.unwrap().unwrap().note, "b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_dropped_leaves_the_line_at_once() {
    let server = Server::start();
    let lock = lock(&server).await;
    let (election, lead, waiting) = a_leads_b_waits(&lock).await;
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    until_waiting(&lock, "billing", 0).await;
    // Nobody is elected behind the leader's back: resigned, the key is free.
    lead.resign().await.unwrap();
    assert_eq!(election.leader().await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_note_fails_invalid_with_the_servers_text() {
    let server = Server::start();
    let lock = lock(&server).await;
    let election = lock.election("billing");
    let text = "lock elections: key \"billing\": a note is 1 to 1024 bytes of UTF-8 \
                without control characters: invalid";
    for bad in ["", "two\nlines", &"x".repeat(1025)] {
        let e = election.campaign(bad).await.unwrap_err();
        assert_eq!(
            (e.kind(), e.to_string().as_str()),
            (ErrorKind::Invalid, text)
        );
    }
    let lead = election.campaign(&"x".repeat(1024)).await.unwrap();
    let e = lead.proclaim("tab\there").await.unwrap_err();
    assert_eq!(
        (e.kind(), e.to_string().as_str()),
        (ErrorKind::Invalid, text)
    );
    assert_eq!(election.leader().await.unwrap().unwrap().note.len(), 1024);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holds_note_is_what_inspect_shows() {
    let server = Server::start();
    let lock = lock(&server).await;
    let held = lock.key("job").note("worker 7").acquire().await.unwrap();
    let info = lock.inspect("job").await.unwrap().unwrap();
    assert_eq!(info.holder_list[0].note, "worker 7");
    held.set_note("worker 7: step 2").await.unwrap();
    let info = lock.inspect("job").await.unwrap().unwrap();
    assert_eq!(info.holder.unwrap().note, "worker 7: step 2");
    held.release().await.unwrap();
    // No note: empty.
    let plain = lock.try_acquire("job").await.unwrap().unwrap();
    let info = lock.inspect("job").await.unwrap().unwrap();
    assert_eq!(info.holder_list[0].note, "");
    drop(plain);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_yields_the_present_state_first_and_again_after_a_kill() {
    let server = Server::start();
    let lock = lock(&server).await;
    let election = lock.election("billing");
    let mut admin = Connection::connect(&server.addr).await.unwrap();

    // Nobody leads: the first item says so. Its connection is the one
    // that appeared meanwhile.
    let mut observer = election.observe();
    let before = client_ids(&mut admin).await;
    assert_eq!(next(&mut observer).await, None, "the present state: nobody");
    let after = client_ids(&mut admin).await;
    let new: Vec<u64> = after.difference(&before).copied().collect();
    assert_eq!(new.len(), 1, "one connection for the observer: {new:?}");

    let lead = election.campaign("a:1").await.unwrap();
    let granted = next(&mut observer).await.unwrap();
    assert_eq!(
        (granted.fence, granted.note.as_str()),
        (lead.fence(), "a:1")
    );
    assert_eq!(
        granted.held_for,
        Some(Duration::ZERO),
        "a grant just pushed"
    );
    lead.proclaim("a:2").await.unwrap();
    assert_eq!(
        named(next(&mut observer).await),
        (lead.fence(), "a:2".into())
    );

    // Its connection killed: it observes again and says the present state.
    kill_client(&mut admin, new[0]).await;
    let again = next(&mut observer).await.unwrap();
    assert_eq!((again.fence, again.note.as_str()), (lead.fence(), "a:2"));
    assert_eq!(
        again.held_for, None,
        "found in place: the push does not say"
    );
    assert!(observer.error().is_none());

    // Resigned: none; the next leader, with a greater fence.
    let first = lead.fence();
    lead.resign().await.unwrap();
    assert_eq!(next(&mut observer).await, None, "resigned: nobody leads");
    let second = election.campaign("b:1").await.unwrap();
    assert_eq!(
        named(next(&mut observer).await),
        (second.fence(), "b:1".into())
    );
    assert!(second.fence() > first);

    // Killed: none (disconnected), then whoever is elected next.
    kill_client(
        &mut admin,
        election.leader().await.unwrap().unwrap().holder_id,
    )
    .await;
    assert_eq!(next(&mut observer).await, None, "its connection killed");
    let third = election.campaign("c:1").await.unwrap();
    assert_eq!(
        named(next(&mut observer).await),
        (third.fence(), "c:1".into())
    );
    assert!(third.fence() > second.fence());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_of_a_held_key_is_told_the_holder_first_and_stops_when_dropped() {
    let server = Server::start();
    let lock = lock(&server).await;
    let election = lock.election("billing");
    let lead = election.campaign("here first").await.unwrap();
    let mut admin = Connection::connect(&server.addr).await.unwrap();
    let before = client_ids(&mut admin).await;
    let mut observer = election.observe();
    assert_eq!(
        named(next(&mut observer).await),
        (lead.fence(), "here first".into())
    );
    assert_eq!(client_ids(&mut admin).await.len(), before.len() + 1);
    // Dropped: its connection closes.
    drop(observer);
    let deadline = Instant::now() + PATIENCE;
    while client_ids(&mut admin).await != before {
        assert!(Instant::now() < deadline, "the observer's connection stays");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observing_a_lock_the_user_may_not_name_ends_the_stream_with_the_error() {
    let server = Server::start_with_users("alice alice-token-0123456789 locks=team-a.*\n");
    let store = Store::connect(&format!(
        "redis://alice:alice-token-0123456789@{}",
        server.addr
    ))
    .await
    .unwrap();
    let lock = store.lock("elections").open().unwrap();
    let mut observer = lock.election("billing").observe();
    let ended = timeout(PATIENCE, observer.next()).await.unwrap();
    assert_eq!(ended, None, "the stream ends");
    let e = observer.error().expect("why it ended");
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(e.is_no_perm(), "{e}");
}

/// The campaigner example: `$HOLDLINE_RUST_CAMPAIGNER`, else the one beside
/// this test (`<profile>/examples/campaigner`: `cargo test` builds the
/// crate's examples, `cargo test --test election` alone does not), else
/// built there.
fn campaigner_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("HOLDLINE_RUST_CAMPAIGNER") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().unwrap();
    // <target>/<profile>/deps/<this test>
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = profile_dir.join("examples").join("campaigner");
    if bin.exists() {
        return bin;
    }
    let release = profile_dir.file_name().is_some_and(|p| p == "release");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .current_dir(common::repo_root())
        .env("CARGO_TARGET_DIR", profile_dir.parent().unwrap())
        .args(["build", "--example", "campaigner", "-p", "holdline-client"]);
    if release {
        build.arg("--release");
    }
    let status = build
        .status()
        .expect("run cargo build --example campaigner");
    assert!(status.success(), "cargo build --example campaigner failed");
    bin
}

#[test]
fn the_election_checker_passes_with_the_campaigner() {
    let checker = common::repo_root().join("clients/testing/election.py");
    assert!(checker.exists(), "{} is missing", checker.display());
    let campaigner = campaigner_binary();
    let output = Command::new("python3")
        .arg(&checker)
        .arg("--campaigner")
        .arg(campaigner.to_str().unwrap())
        .env("HOLDLINE_BIN", common::binary())
        .output()
        .expect("run python3 clients/testing/election.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "election.py failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
}

/// A scripted node's answers to one command on its `n`th connection (from
/// 0): the frames to write (a reply, pushes), or `None` to answer nothing,
/// as a stopped server. `HELLO` is answered for it.
type Script = dyn Fn(usize, &[String]) -> Option<Vec<Value>> + Send + Sync;

/// The script of a node that is no cluster (`CLUSTER` answers Redis's
/// refusal); `answer` answers every other command by its name.
fn single_node(
    answer: impl Fn(usize, &str) -> Option<Vec<Value>> + Send + Sync + 'static,
) -> Arc<Script> {
    Arc::new(move |n, cmd: &[String]| match cmd[0].as_str() {
        "CLUSTER" => Some(vec![Value::error(NOT_CLUSTER)]),
        name => answer(n, name),
    })
}

/// A store of a scripted node, its lock `elections` with `ttl`, and an
/// observer of that lock's election `billing`.
async fn observe_scripted(script: Arc<Script>, ttl: Duration) -> (Lock, Observer) {
    let addr = scripted_node(script).await;
    let store = Store::connect(&addr).await.unwrap();
    let lock = store.lock("elections").ttl(ttl).open().unwrap();
    let observer = lock.election("billing").observe();
    (lock, observer)
}

/// A scripted node on loopback; answers its address.
async fn scripted_node(script: Arc<Script>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let mut n = 0;
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(serve_script(sock, n, script.clone()));
            n += 1;
        }
    });
    addr
}

async fn serve_script(mut sock: TcpStream, n: usize, script: Arc<Script>) {
    let (mut dec, mut buf) = (Decoder::new(1 << 20), BytesMut::new());
    while let Some(cmd) = common::next_command(&mut sock, &mut dec, &mut buf).await {
        let frames = match cmd[0].as_str() {
            "HELLO" => Some(vec![Value::Map(vec![
                (Value::bulk("server"), Value::bulk("holdline")),
                (Value::bulk("proto"), Value::Integer(3)),
            ])]),
            _ => script(n, &cmd),
        };
        let mut out = Vec::new();
        for frame in frames.unwrap_or_default() {
            encode(&frame, Proto::Resp3, &mut out);
        }
        if sock.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// `["observe", "elections", "billing", event, fence, 1, 20, note]`.
fn observe_push(event: &str, fence: i64, note: &str) -> Value {
    let words = ["observe", "elections", "billing", event].map(Value::bulk);
    let numbers = [fence, 1, 20].map(Value::Integer);
    let items = words.into_iter().chain(numbers).chain([Value::bulk(note)]);
    Value::Push(items.collect())
}

/// `CLUSTER SLOTS`: every slot on `addr`.
fn all_slots_on(addr: &str) -> Value {
    let (host, port) = addr.rsplit_once(':').unwrap();
    let node = Value::Array(vec![
        Value::bulk(host),
        Value::Integer(port.parse().unwrap()),
        Value::bulk("0".repeat(40)),
    ]);
    Value::Array(vec![Value::Array(vec![
        Value::Integer(0),
        Value::Integer(16383),
        node,
    ])])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_closed_partition_observe_follows_moved_to_the_new_owner() {
    let observes = Arc::new(AtomicUsize::new(0));
    let seen = observes.clone();
    let second: Arc<Script> = Arc::new(move |_, cmd: &[String]| match cmd[0].as_str() {
        "CLUSTER" => Some(vec![Value::error("ERR unused")]),
        "OBSERVE" => {
            seen.fetch_add(1, Ordering::Relaxed);
            Some(vec![Value::ok(), observe_push("held", 9, "b")])
        }
        _ => Some(vec![Value::simple("PONG")]),
    });
    let new_owner = scripted_node(second).await;
    let (moved_to, first_addr) = (new_owner.clone(), Arc::new(Mutex::new(String::new())));
    let own = first_addr.clone();
    let first: Arc<Script> = Arc::new(move |n, cmd: &[String]| match cmd[0].as_str() {
        "CLUSTER" => Some(vec![all_slots_on(&own.lock().unwrap())]),
        // The first observation: the holder, then the partition closed.
        "OBSERVE" if n <= 1 => Some(vec![
            Value::ok(),
            observe_push("held", 4, "a"),
            observe_push("closed", 4, "a"),
        ]),
        "OBSERVE" => {
            let slot = key_slot(&cmd[2]);
            Some(vec![Value::error(format!("MOVED {slot} {moved_to}"))])
        }
        _ => Some(vec![Value::simple("PONG")]),
    });
    let addr = scripted_node(first).await;
    *first_addr.lock().unwrap() = addr.clone();
    let store = Store::connect(&addr).await.unwrap();
    assert!(store.is_cluster());
    let lock = store.lock("elections").open().unwrap();
    let mut observer = lock.election("billing").observe();
    assert_eq!(named(next(&mut observer).await), (4, "a".into()));
    // `closed`: observed again, MOVED to the new owner, its present state.
    assert_eq!(named(next(&mut observer).await), (9, "b".into()));
    assert_eq!(observes.load(Ordering::Relaxed), 1);
    assert_eq!(store.redirects(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_is_observed_again_after_the_ttl() {
    let pings = Arc::new(AtomicUsize::new(0));
    let counted = pings.clone();
    let script = single_node(move |n, cmd| match cmd {
        "OBSERVE" => Some(vec![Value::ok(), observe_push("held", 4 + n as i64, "a")]),
        // The observer's first connection goes silent, as a stopped server.
        "PING" if n == 1 => {
            counted.fetch_add(1, Ordering::Relaxed);
            None
        }
        _ => Some(vec![Value::simple("PONG")]),
    });
    let (_lock, mut observer) = observe_scripted(script, Duration::from_millis(600)).await;
    // Connection 0 is the store's own (`CLUSTER SLOTS`); 1 the observer's.
    assert_eq!(named(next(&mut observer).await), (5, "a".into()));
    let silent = Instant::now();
    assert_eq!(named(next(&mut observer).await), (6, "a".into()));
    let waited = silent.elapsed();
    assert!(
        waited >= Duration::from_secs(1) && waited < PATIENCE,
        "observed again {waited:?} after the server went silent (at least 1 s)"
    );
    assert_eq!(pings.load(Ordering::Relaxed), 1, "one PING, then given up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_observe_is_given_up_after_the_ttl() {
    let observes = Arc::new(AtomicUsize::new(0));
    let counted = observes.clone();
    let script = single_node(move |n, cmd| match cmd {
        "OBSERVE" => {
            counted.fetch_add(1, Ordering::Relaxed);
            // The observer's first connection is never answered.
            (n > 1).then(|| vec![Value::ok(), observe_push("held", 4, "a")])
        }
        _ => Some(vec![Value::simple("PONG")]),
    });
    let (_lock, mut observer) = observe_scripted(script, Duration::from_millis(600)).await;
    let asked = Instant::now();
    assert_eq!(named(next(&mut observer).await), (4, "a".into()));
    let waited = asked.elapsed();
    assert!(
        waited >= Duration::from_secs(1),
        "given up after {waited:?}"
    );
    assert_eq!(observes.load(Ordering::Relaxed), 2);
}
