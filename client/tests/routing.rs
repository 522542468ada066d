//! Routing against scripted nodes (no cluster needed): the map learnt at
//! connect, `MOVED` followed and remembered, a loop of them, `CLUSTERDOWN`
//! retried then given up, a hold's wait and its bound counted from its
//! call across resends, an unreachable node, a node silent while the
//! map is fetched again, several addresses, `STATS` summed over the nodes,
//! and a single server left alone. The two routing texts are compared
//! with `clients/texts.json`.

mod common;

use bytes::BytesMut;
use common::{assert_text_with_reason, client_rule, expected_text, Server, PATIENCE};
use holdline_client::{key_slot, ErrorKind, Store, Value};
use holdline_resp::{encode, Decoder, Proto};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

const NOT_CLUSTER: &str = "ERR This instance has cluster support disabled";

/// A node's script: its own address and a command in, the reply out.
type Script = dyn Fn(&str, &[String]) -> Value + Send + Sync;

/// A scripted node on loopback: answers `HELLO` and `PING` itself, every
/// other command with its script, and counts the commands by verb.
struct FakeNode {
    addr: String,
    state: Arc<NodeState>,
}

/// What a fake node's connections share.
struct NodeState {
    own: String,
    script: Box<Script>,
    counts: Mutex<HashMap<String, usize>>,
    /// A verb answered only after a pause.
    slow: Mutex<Option<(&'static str, Duration)>>,
    /// Set: takes connections and commands, answers nothing (not even
    /// `HELLO`), as a stopped process.
    mute: AtomicBool,
}

impl FakeNode {
    async fn start(script: impl Fn(&str, &[String]) -> Value + Send + Sync + 'static) -> FakeNode {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let state = Arc::new(NodeState {
            own: addr.clone(),
            script: Box::new(script),
            counts: Mutex::new(HashMap::new()),
            slow: Mutex::new(None),
            mute: AtomicBool::new(false),
        });
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(serve(sock, shared.clone()));
            }
        });
        FakeNode { addr, state }
    }

    /// How many `verb` commands came, on every connection.
    fn count(&self, verb: &str) -> usize {
        let counts = self.state.counts.lock().unwrap();
        counts.get(verb).copied().unwrap_or(0)
    }

    /// From now on, answers `verb` only `after` it came.
    fn answer_late(&self, verb: &'static str, after: Duration) {
        *self.state.slow.lock().unwrap() = Some((verb, after));
    }

    /// From now on, answers nothing at all.
    fn mute(&self) {
        self.state.mute.store(true, Ordering::Relaxed);
    }
}

async fn serve(mut sock: TcpStream, node: Arc<NodeState>) {
    let mut dec = Decoder::new(1 << 20);
    let mut buf = BytesMut::new();
    loop {
        let Some(cmd) = common::next_command(&mut sock, &mut dec, &mut buf).await else {
            return;
        };
        *node
            .counts
            .lock()
            .unwrap()
            .entry(cmd[0].clone())
            .or_default() += 1;
        if node.mute.load(Ordering::Relaxed) {
            continue;
        }
        let reply = match cmd[0].as_str() {
            "HELLO" => Value::Map(vec![
                (Value::bulk("server"), Value::bulk("holdline")),
                (Value::bulk("proto"), Value::Integer(3)),
            ]),
            "PING" => Value::simple("PONG"),
            _ => (node.script)(&node.own, &cmd),
        };
        let slow = *node.slow.lock().unwrap();
        if let Some((_, after)) = slow.filter(|(verb, _)| *verb == cmd[0]) {
            tokio::time::sleep(after).await;
        }
        let mut out = Vec::new();
        encode(&reply, Proto::Resp3, &mut out);
        if sock.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// `CLUSTER SLOTS`'s answer: each range served by `host:port`.
/// A node that owns `k`'s slot (and only it) and grants every HOLD;
/// `rest` answers its other commands. Answers the slot and the node.
async fn owner_of_k(rest: impl Fn(&str) -> Value + Send + Sync + 'static) -> (u16, FakeNode) {
    let slot = key_slot("k");
    let node = FakeNode::start(move |own, cmd| match cmd[0].as_str() {
        "CLUSTER" => slots(&[(slot, slot, own)]),
        "HOLD" => grant(),
        other => rest(other),
    })
    .await;
    (slot, node)
}

fn slots(ranges: &[(u16, u16, &str)]) -> Value {
    let ranges = ranges.iter().map(|&(start, end, addr)| {
        let (host, port) = addr.rsplit_once(':').unwrap();
        Value::Array(vec![
            Value::Integer(start.into()),
            Value::Integer(end.into()),
            Value::Array(vec![
                Value::bulk(host),
                Value::Integer(port.parse().unwrap()),
                Value::bulk("0".repeat(40)),
            ]),
        ])
    });
    Value::Array(ranges.collect())
}

fn grant() -> Value {
    Value::Array(vec![Value::Integer(1), Value::Integer(5)])
}

/// A loopback address nothing listens on.
fn dead_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moved_is_followed_and_its_node_remembered() {
    let (slot, b) = owner_of_k(|cmd| match cmd {
        "RELEASE" => Value::ok(),
        "INSPECT" => Value::Null,
        other => panic!("unexpected {other}"),
    })
    .await;
    let moved = format!("MOVED {slot} {}", b.addr);
    let a = FakeNode::start(move |_, cmd| match cmd[0].as_str() {
        // No slot served yet: a key goes to any known node.
        "CLUSTER" => Value::Array(vec![]),
        "HOLD" => Value::error(moved.clone()),
        other => panic!("unexpected {other}"),
    })
    .await;
    let store = Store::connect(&a.addr).await.unwrap();
    assert!(store.is_cluster());
    assert_eq!(store.node_for("k"), None, "an empty map");
    let lock = store.lock("l").open().unwrap();
    let fence = timeout(PATIENCE, lock.hold("k", async |lease| lease.fence()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(fence, 5);
    assert_eq!((a.count("HOLD"), b.count("HOLD")), (1, 1));
    assert_eq!(store.redirects(), 1);
    assert_eq!(store.node_for("k").as_deref(), Some(b.addr.as_str()));
    // The next hold and an inspect of the key go straight to B (after the
    // map was asked for again: B, which the map names, answers first).
    lock.hold("k", async |_| ()).await.unwrap();
    assert_eq!(lock.inspect("k").await.unwrap(), None);
    assert_eq!((a.count("HOLD"), b.count("HOLD")), (1, 2));
    assert_eq!(b.count("INSPECT"), 1);
    assert_eq!(b.count("CLUSTER"), 1);
    assert_eq!(store.redirects(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_loop_fails_closed_after_five_redirects() {
    let slot = key_slot("k");
    let a = FakeNode::start(move |own, cmd| match cmd[0].as_str() {
        "CLUSTER" => slots(&[(0, 16383, own)]),
        // Always elsewhere: itself.
        "HOLD" | "INSPECT" => Value::error(format!("MOVED {slot} {own}")),
        other => panic!("unexpected {other}"),
    })
    .await;
    let store = Store::connect(&a.addr).await.unwrap();
    let lock = store.lock("l").open().unwrap();
    let vars = [("lock", "l"), ("key", "\"k\"")];
    let err = timeout(PATIENCE, lock.hold("k", async |_| ()))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
    assert_eq!(err.to_string(), expected_text("moved_loop", &vars));
    // Sent once, then redirected 5 times.
    assert_eq!(a.count("HOLD"), 6);
    assert_eq!(store.redirects(), 5);
    let err = lock.inspect("k").await.unwrap_err();
    assert_eq!(err.to_string(), expected_text("moved_loop", &vars));
    assert_eq!(a.count("INSPECT"), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterdown_asks_for_the_map_again_then_fails_slot_unserved() {
    // Down for "k" always; for "j" the first three answers only.
    let j_downs = Arc::new(AtomicUsize::new(0));
    let downs = j_downs.clone();
    let a = FakeNode::start(move |own, cmd| match (cmd[0].as_str(), cmd.get(2)) {
        ("CLUSTER", _) => slots(&[(0, 16383, own)]),
        ("HOLD", Some(key)) if key == "j" && downs.fetch_add(1, Ordering::Relaxed) >= 3 => grant(),
        ("HOLD", _) => Value::error("CLUSTERDOWN Hash slot not served"),
        ("RELEASE", _) => Value::ok(),
        (other, _) => panic!("unexpected {other}"),
    })
    .await;
    let store = Store::connect(&a.addr).await.unwrap();
    let lock = store.lock("l").open().unwrap();
    let started = Instant::now();
    let fence = timeout(PATIENCE, lock.hold("j", async |lease| lease.fence()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(fence, 5);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(a.count("HOLD"), 4);
    // Asked at connect, then after each CLUSTERDOWN.
    assert_eq!(a.count("CLUSTER"), 4);

    let started = Instant::now();
    let err = timeout(PATIENCE, lock.hold("k", async |_| ()))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
    let slot = key_slot("k").to_string();
    let vars = [("lock", "l"), ("key", "\"k\""), ("slot", slot.as_str())];
    assert_eq!(err.to_string(), expected_text("slot_unserved", &vars));
    assert_eq!(a.count("HOLD"), 4 + 10);
    // Nine pauses of 100 ms between the ten tries.
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(store.redirects(), 0);
}

/// A node serving every slot that answers `CLUSTERDOWN` to the first
/// `downs` HOLDs (all of them: `usize::MAX`), then grants; and the `WAIT`
/// of each HOLD it was sent, in order.
async fn down_then_served(downs: usize) -> (FakeNode, Arc<Mutex<Vec<u64>>>) {
    let waits = Arc::new(Mutex::new(Vec::new()));
    let seen = waits.clone();
    let node = FakeNode::start(move |own, cmd| match cmd[0].as_str() {
        "CLUSTER" => slots(&[(0, 16383, own)]),
        "HOLD" => {
            let at = cmd.iter().position(|arg| arg == "WAIT").unwrap();
            let mut seen = seen.lock().unwrap();
            seen.push(cmd[at + 1].parse().unwrap());
            if seen.len() > downs {
                grant()
            } else {
                Value::error("CLUSTERDOWN Hash slot not served")
            }
        }
        "RELEASE" => Value::ok(),
        other => panic!("unexpected {other}"),
    })
    .await;
    (node, waits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_sent_again_carries_the_wait_left() {
    // texts.json's wait_left: the wait runs from the hold's call.
    let pause = client_rule("cluster_down_pause_ms");
    let (a, waits) = down_then_served(2).await;
    let store = Store::connect(&a.addr).await.unwrap();
    let lock = store.lock("left").open().unwrap();
    let hold = lock
        .key("j")
        .wait(Duration::from_secs(2))
        .hold(async |_| ());
    timeout(PATIENCE, hold).await.unwrap().unwrap();
    let waits = waits.lock().unwrap().clone();
    assert_eq!(waits.len(), 3);
    assert!(waits[0] <= 2000, "{waits:?}");
    assert!(waits.windows(2).all(|w| w[1] + pause <= w[0]), "{waits:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_of_a_slot_down_gives_up_at_its_wait_plus_its_grace() {
    // texts.json's wait_grace: each CLUSTERDOWN answers 400 ms late, so ten
    // would take 5 s; the hold gives up at 600 ms + max(1s ttl, 1s) instead.
    let (a, waits) = down_then_served(usize::MAX).await;
    a.answer_late("HOLD", Duration::from_millis(400));
    let store = Store::connect(&a.addr).await.unwrap();
    let lock = store
        .lock("late")
        .ttl(Duration::from_secs(1))
        .open()
        .unwrap();
    let started = Instant::now();
    let hold = lock
        .key("j")
        .wait(Duration::from_millis(600))
        .hold(async |_| ());
    let err = timeout(PATIENCE, hold).await.unwrap().unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::Closed);
    let vars = [
        ("lock", "late"),
        ("key", "\"j\""),
        ("wait", "600ms"),
        ("ttl", "1s"),
    ];
    assert_eq!(err.to_string(), expected_text("wait_silent", &vars));
    let range = Duration::from_millis(1550)..Duration::from_secs(3);
    assert!(range.contains(&took), "{took:?}");
    let waits = waits.lock().unwrap().clone();
    // The last was sent once the wait was spent: no wait left.
    assert!(waits[0] <= 600 && waits.last() == Some(&0), "{waits:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_node_fails_cannot_connect_and_the_next_hold_finds_the_new_owner() {
    let dead = dead_addr();
    let asked = AtomicUsize::new(0);
    let gone = dead.clone();
    let a = FakeNode::start(move |own, cmd| match cmd[0].as_str() {
        // At connect: every slot on a node that is gone; later: here.
        "CLUSTER" if asked.fetch_add(1, Ordering::Relaxed) == 0 => slots(&[(0, 16383, &gone)]),
        "CLUSTER" => slots(&[(0, 16383, own)]),
        "HOLD" => grant(),
        "RELEASE" => Value::ok(),
        other => panic!("unexpected {other}"),
    })
    .await;
    let store = Store::connect(&a.addr).await.unwrap();
    assert_eq!(store.node_for("k").as_deref(), Some(dead.as_str()));
    let lock = store.lock("l").open().unwrap();
    let err = lock.hold("k", async |_| ()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
    assert_text_with_reason("cannot_connect", &[("hostport", &dead)], &err.to_string());
    assert_eq!(a.count("CLUSTER"), 1, "not asked again until the next hold");
    let fence = lock.hold("k", async |lease| lease.fence()).await.unwrap();
    assert_eq!(fence, 5);
    assert_eq!(a.count("CLUSTER"), 2);
    assert_eq!(store.node_for("k").as_deref(), Some(a.addr.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_server_is_asked_once_and_its_errors_are_not_redirects() {
    let a = FakeNode::start(|_, cmd| match (cmd[0].as_str(), cmd.get(2)) {
        ("CLUSTER", _) => Value::error(NOT_CLUSTER),
        ("HOLD", Some(key)) if key == "m" => Value::error("MOVED 1 127.0.0.1:1"),
        ("HOLD", _) => grant(),
        ("RELEASE", _) => Value::ok(),
        (other, _) => panic!("unexpected {other}"),
    })
    .await;
    let store = Store::connect(&a.addr).await.unwrap();
    assert!(!store.is_cluster());
    assert_eq!(store.node_for("k"), None);
    let lock = store.lock("l").open().unwrap();
    for _ in 0..3 {
        lock.hold("k", async |_| ()).await.unwrap();
    }
    // A single server's MOVED (it would not send one) is just its error.
    let err = lock.hold("m", async |_| ()).await.unwrap_err();
    assert_eq!(
        (err.kind(), err.to_string().as_str()),
        (ErrorKind::Invalid, "MOVED 1 127.0.0.1:1")
    );
    assert_eq!(a.count("HOLD"), 4);
    assert_eq!(a.count("CLUSTER"), 1);
    assert_eq!(store.redirects(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_addresses_are_tried_in_order() {
    let server = Server::start();
    let (dead1, dead2) = (dead_addr(), dead_addr());
    // The first that answers wins; a real single server stays single.
    let store = Store::connect(&format!("{dead1}, {}", server.addr))
        .await
        .unwrap();
    assert!(!store.is_cluster());
    let lock = store.lock("several").open().unwrap();
    assert!(lock.hold("k", async |l| l.fence()).await.unwrap() > 0);
    // None answers: the last one's error.
    let err = Store::connect(&format!("{dead1},{dead2}"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
    assert_text_with_reason("cannot_connect", &[("hostport", &dead2)], &err.to_string());
    // Each part is checked before any is dialled, and named when bad.
    let err = Store::connect(&format!("{},nope://x", server.addr))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    let vars = [("address", "\"nope://x\"")];
    assert_eq!(err.to_string(), expected_text("bad_address", &vars));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leases_clock_starts_at_the_hold_that_was_granted() {
    let (slot, b) = owner_of_k(|cmd| match cmd {
        "RENEW" | "RELEASE" => Value::ok(),
        other => panic!("unexpected {other}"),
    })
    .await;
    let moved = format!("MOVED {slot} {}", b.addr);
    let a = FakeNode::start(move |own, cmd| match cmd[0].as_str() {
        "CLUSTER" => slots(&[(0, 16383, own)]),
        "HOLD" => Value::error(moved.clone()),
        other => panic!("unexpected {other}"),
    })
    .await;
    let store = Store::connect(&a.addr).await.unwrap();
    // The redirect comes past a ttl after the first HOLD was sent.
    let ttl = Duration::from_millis(500);
    a.answer_late("HOLD", ttl + Duration::from_millis(100));
    let lock = store.lock("l").ttl(ttl).open().unwrap();
    let started = Instant::now();
    let lost = timeout(PATIENCE, lock.hold("k", async |lease| lease.is_lost()))
        .await
        .unwrap()
        .unwrap();
    assert!(!lost);
    assert!(started.elapsed() >= ttl);
    // Granted at once after its own HOLD: nothing to confirm (a deadline
    // counted from the first HOLD would have passed, asking for a RENEW).
    assert_eq!((a.count("HOLD"), b.count("HOLD")), (1, 1));
    assert_eq!(b.count("RENEW"), 0);
}

/// Three scripted nodes that answer `CLUSTER SLOTS` with one map (the
/// first node's range first), and a key on the third that answers
/// `CLUSTERDOWN` twice, then is granted.
async fn three_nodes_one_slot_down_twice() -> ([FakeNode; 3], String) {
    let map = Arc::new(Mutex::new(Value::Array(vec![])));
    let key = (0..)
        .map(|n| format!("k{n}"))
        .find(|k| key_slot(k) > 10922)
        .unwrap();
    let downs = Arc::new(AtomicUsize::new(0));
    let start = |map: Arc<Mutex<Value>>, downs: Option<Arc<AtomicUsize>>| {
        FakeNode::start(move |_, cmd| match cmd[0].as_str() {
            "CLUSTER" => map.lock().unwrap().clone(),
            "HOLD" => match &downs {
                Some(downs) if downs.fetch_add(1, Ordering::Relaxed) < 2 => {
                    Value::error("CLUSTERDOWN Hash slot not served")
                }
                _ => grant(),
            },
            "RELEASE" => Value::ok(),
            other => panic!("unexpected {other}"),
        })
    };
    let nodes = [
        start(map.clone(), None).await,
        start(map.clone(), None).await,
        start(map.clone(), Some(downs)).await,
    ];
    *map.lock().unwrap() = slots(&[
        (0, 5460, &nodes[0].addr),
        (5461, 10922, &nodes[1].addr),
        (10923, 16383, &nodes[2].addr),
    ]);
    (nodes, key)
}

/// Holds `key` (answered `CLUSTERDOWN` twice: the map is fetched again
/// twice) and checks the time it took: one silent node given up after
/// texts.json's `map_refresh_node_timeout_ms` (the connect timeout is
/// 10 s), then asked last, so not waited for a second time.
async fn hold_through_two_refreshes(store: &Store, key: &str) {
    let given = Duration::from_millis(client_rule("map_refresh_node_timeout_ms"));
    let pause = Duration::from_millis(client_rule("cluster_down_pause_ms"));
    let lock = store.lock("frozen").open().unwrap();
    let started = Instant::now();
    let fence = timeout(PATIENCE, lock.hold(key, async |lease| lease.fence()))
        .await
        .unwrap()
        .unwrap();
    let took = started.elapsed();
    assert_eq!(fence, 5);
    assert!(
        took >= given + 2 * pause && took < given + Duration::from_millis(1500),
        "took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_silent_to_cluster_slots_holds_up_a_refresh_2s_at_most_then_is_asked_last() {
    let (nodes, key) = three_nodes_one_slot_down_twice().await;
    // The store's first node, first in the map, with an idle connection.
    let store = Store::connect(&nodes[0].addr).await.unwrap();
    assert_eq!(
        store.node_for(&*key).as_deref(),
        Some(nodes[2].addr.as_str())
    );
    nodes[0].mute();
    hold_through_two_refreshes(&store, &key).await;
    // Asked at connect and by the first refresh (given up); the second
    // asked node 1 first.
    assert_eq!(nodes[0].count("CLUSTER"), 2);
    assert_eq!(nodes[1].count("CLUSTER"), 2);
    assert_eq!(nodes[2].count("HOLD"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_answers_nothing_first_in_the_map_holds_up_a_refresh_2s_at_most() {
    let (nodes, key) = three_nodes_one_slot_down_twice().await;
    // Node 0 takes connections and answers nothing, HELLO included; the
    // store connects through node 1, so it must open one to ask node 0.
    nodes[0].mute();
    let store = Store::connect(&nodes[1].addr).await.unwrap();
    hold_through_two_refreshes(&store, &key).await;
    assert_eq!((nodes[0].count("HELLO"), nodes[0].count("CLUSTER")), (1, 0));
    assert_eq!(nodes[1].count("CLUSTER"), 3);
}

/// A `STATS` answer with these counters.
fn stats_reply(counters: &[(&str, i64)]) -> Value {
    let pairs = counters
        .iter()
        .map(|&(name, n)| (Value::bulk(name), Value::Integer(n)));
    Value::Map(pairs.collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_sums_every_nodes_counters_and_fails_with_a_node_that_cannot_answer() {
    let map = Arc::new(Mutex::new(Value::Array(vec![])));
    let node = |map: Arc<Mutex<Value>>, counters: &'static [(&'static str, i64)]| {
        FakeNode::start(move |_, cmd| match cmd[0].as_str() {
            "CLUSTER" => map.lock().unwrap().clone(),
            "STATS" => {
                assert_eq!(cmd[1], "tally");
                stats_reply(counters)
            }
            other => panic!("unexpected {other}"),
        })
    };
    let a = node(
        map.clone(),
        &[("live_keys", 3), ("grants", 1), ("waiters", 2)],
    )
    .await;
    let b = node(
        map.clone(),
        &[("live_keys", 4), ("grants", 10), ("timeouts", 7)],
    )
    .await;
    *map.lock().unwrap() = slots(&[(0, 8191, &a.addr), (8192, 16383, &b.addr)]);
    let store = Store::connect(&a.addr).await.unwrap();
    let stats = store.lock("tally").open().unwrap().stats().await.unwrap();
    assert_eq!(
        (stats.live_keys, stats.grants, stats.waiters, stats.timeouts),
        (7, 11, 2, 7)
    );
    assert_eq!((a.count("STATS"), b.count("STATS")), (1, 1));

    // A node of the map that cannot be reached fails the call, as a hold
    // sent there would.
    let dead = dead_addr();
    *map.lock().unwrap() = slots(&[(0, 8191, &a.addr), (8192, 16383, &dead)]);
    let store = Store::connect(&a.addr).await.unwrap();
    let err = store
        .lock("tally")
        .open()
        .unwrap()
        .stats()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
    assert_text_with_reason("cannot_connect", &[("hostport", &dead)], &err.to_string());

    // A single server: its own counters, as ever.
    let single = FakeNode::start(|_, cmd| match cmd[0].as_str() {
        "CLUSTER" => Value::error(NOT_CLUSTER),
        "STATS" => stats_reply(&[("grants", 5)]),
        other => panic!("unexpected {other}"),
    })
    .await;
    let store = Store::connect(&single.addr).await.unwrap();
    let stats = store.lock("tally").open().unwrap().stats().await.unwrap();
    assert_eq!((stats.grants, stats.live_keys), (5, 0));
    assert_eq!(single.count("STATS"), 1);
}
