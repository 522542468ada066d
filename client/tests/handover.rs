//! A planned hand-over against scripted nodes (no cluster needed): a
//! node that says `handover` = 1 gets a secret with each hold, one that
//! does not gets none; a lease told it moved (by a push, before or after
//! its grant was registered) re-attaches at the node named, through
//! `CLUSTERDOWN` and a `MOVED` back to the node that left, keeps its
//! fence and its function, and is released there; one that cannot (a
//! `LOST` answer, a node that never answers in time) is lost with
//! `reattach_failed`; a waiting hold answered `MOVED` takes its place at
//! the new node with `REATTACH`, and holds again there when nothing was
//! handed over.

mod common;

use bytes::BytesMut;
use common::expected_text;
use holdline_client::{key_slot, ErrorKind, Store, Value};
use holdline_resp::{encode, Decoder, Proto};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

/// What a script answers one command with: frames, each written after
/// its pause (a push, then the reply; a reply that comes late).
type Frames = Vec<(Duration, Value)>;

/// A node's script: its own address and a command in, the frames out.
type Script = dyn Fn(&str, &[String]) -> Frames + Send + Sync;

/// A scripted node on loopback: answers `HELLO` (saying `handover` = 1
/// when asked to) and `CLUSTER SLOTS` (every slot its own) itself, every
/// other command with its script, and keeps the commands it was sent.
struct FakeNode {
    addr: String,
    seen: Arc<Mutex<Vec<Vec<String>>>>,
}

impl FakeNode {
    async fn start(
        handover: bool,
        script: impl Fn(&str, &[String]) -> Frames + Send + Sync + 'static,
    ) -> FakeNode {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let (own, log) = (addr.clone(), seen.clone());
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let node = (own.clone(), script.clone(), log.clone());
                tokio::spawn(serve(sock, handover, node));
            }
        });
        FakeNode { addr, seen }
    }

    /// The commands it was sent with this verb, in order.
    fn sent(&self, verb: &str) -> Vec<Vec<String>> {
        let seen = self.seen.lock().unwrap();
        seen.iter().filter(|c| c[0] == verb).cloned().collect()
    }
}

type Node = (String, Arc<Script>, Arc<Mutex<Vec<Vec<String>>>>);

async fn serve(mut sock: TcpStream, handover: bool, (own, script, seen): Node) {
    let mut dec = Decoder::new(1 << 20);
    let mut buf = BytesMut::new();
    while let Some(cmd) = common::next_command(&mut sock, &mut dec, &mut buf).await {
        seen.lock().unwrap().push(cmd.clone());
        let frames = match cmd[0].as_str() {
            "HELLO" => {
                let mut hello = vec![
                    (Value::bulk("server"), Value::bulk("holdline")),
                    (Value::bulk("proto"), Value::Integer(3)),
                ];
                if handover {
                    hello.push((Value::bulk("handover"), Value::Integer(1)));
                }
                vec![(Duration::ZERO, Value::Map(hello))]
            }
            "CLUSTER" => vec![(Duration::ZERO, all_slots(&own))],
            _ => script(&own, &cmd),
        };
        for (pause, frame) in frames {
            tokio::time::sleep(pause).await;
            let mut out = Vec::new();
            encode(&frame, Proto::Resp3, &mut out);
            if sock.write_all(&out).await.is_err() {
                return;
            }
        }
    }
}

/// `CLUSTER SLOTS`: every slot served by `own`.
fn all_slots(own: &str) -> Value {
    let (host, port) = own.rsplit_once(':').unwrap();
    let node = Value::Array(vec![
        Value::bulk(host),
        Value::Integer(port.parse().unwrap()),
        Value::bulk("0".repeat(40)),
    ]);
    let range = vec![Value::Integer(0), Value::Integer(16383), node];
    Value::Array(vec![Value::Array(range)])
}

fn now(v: Value) -> Frames {
    vec![(Duration::ZERO, v)]
}

fn grant(id: i64, fence: i64) -> Value {
    Value::Array(vec![Value::Integer(id), Value::Integer(fence)])
}

/// `["moved", lease, slot of "k", to]`.
fn moved_push(lease: i64, to: &str) -> Value {
    Value::Push(vec![
        Value::bulk("moved"),
        Value::Integer(lease),
        Value::Integer(key_slot("k").into()),
        Value::bulk(to),
    ])
}

/// The `SECRET` a HOLD carried, if any.
fn secret_of(cmd: &[String]) -> Option<String> {
    let at = cmd.iter().position(|w| w == "SECRET")?;
    cmd.get(at + 1).cloned()
}

const TTL: Duration = Duration::from_millis(600);
const NOTHING: &str =
    "LOST lock l: key \"k\": the lease was lost: nothing was handed over under its secret";

/// The old node: grants lease 1, fence 7, then pushes that it moved to
/// `to` with the first PING (`early`: right after the grant, before the
/// client can register it); answers RELEASE `-MOVED`, as a node that
/// handed the lease over does.
async fn old_node(to: String, early: bool) -> FakeNode {
    let pinged = Arc::new(Mutex::new(false));
    FakeNode::start(true, move |_, cmd| match cmd[0].as_str() {
        "HOLD" if early => vec![
            (Duration::ZERO, grant(1, 7)),
            (Duration::ZERO, moved_push(1, &to)),
        ],
        "HOLD" => now(grant(1, 7)),
        "PING" if !std::mem::replace(&mut *pinged.lock().unwrap(), true) && !early => {
            vec![
                (Duration::ZERO, moved_push(1, &to)),
                (Duration::ZERO, Value::simple("PONG")),
            ]
        }
        "PING" => now(Value::simple("PONG")),
        "RELEASE" | "RENEW" => now(Value::error(format!("MOVED {} {to}", key_slot("k")))),
        other => panic!("the old node was sent {other}"),
    })
    .await
}

/// A hold of "k" whose function runs `runs` and answers its fence and
/// lease id at its start and end, and whether its signal fired.
async fn hold_through(
    store: &Store,
    runs: Duration,
) -> Result<((u64, i64), (u64, i64), bool), holdline_client::Error> {
    let lock = store.lock("l").ttl(TTL).open().unwrap();
    let held = lock.hold("k", async |lease| {
        let start = (lease.fence(), lease.id());
        tokio::time::sleep(runs).await;
        (
            start,
            (lease.fence(), lease.id()),
            lease.signal().is_aborted(),
        )
    });
    timeout(Duration::from_secs(20), held)
        .await
        .expect("the hold ends")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_told_it_moved_reattaches_keeps_its_fence_and_is_released_there() {
    for early in [false, true] {
        let (tries, old_addr) = (Arc::new(Mutex::new(0)), Arc::new(Mutex::new(String::new())));
        let (count, named) = (tries.clone(), old_addr.clone());
        let new = FakeNode::start(true, move |_, cmd| match cmd[0].as_str() {
            // Between owners for a moment: down, then still naming the old.
            "REATTACH" => {
                let mut tries = count.lock().unwrap();
                *tries += 1;
                match *tries {
                    1 => now(Value::error("CLUSTERDOWN the partition is between owners")),
                    2 => {
                        let old = named.lock().unwrap();
                        now(Value::error(format!("MOVED {} {old}", key_slot("k"))))
                    }
                    _ => now(grant(9, 7)),
                }
            }
            "PING" => now(Value::simple("PONG")),
            "RELEASE" => now(Value::ok()),
            other => panic!("the new node was sent {other}"),
        })
        .await;
        let old = old_node(new.addr.clone(), early).await;
        old_addr.lock().unwrap().clone_from(&old.addr);
        let store = Store::connect(&old.addr).await.unwrap();
        // Past two ttls: renewed on the new node meanwhile.
        let (start, end, aborted) = hold_through(&store, TTL * 2).await.unwrap();
        assert_eq!((start, end.0, aborted), ((7, 1), 7, false), "early {early}");
        assert_eq!(end.1, 9, "the new node's lease id");
        let secret = secret_of(&old.sent("HOLD")[0]).expect("a SECRET");
        assert_eq!(secret.len(), 32);
        assert!(secret
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        let reattach = ["REATTACH", "l", "k", secret.as_str()]
            .map(String::from)
            .to_vec();
        assert_eq!(new.sent("REATTACH"), vec![reattach; 3]);
        assert!(
            old.sent("REATTACH").is_empty(),
            "not sent back to the old node"
        );
        assert_eq!(
            new.sent("RELEASE"),
            [["RELEASE", "9"].map(String::from).to_vec()]
        );
        assert!(new.sent("PING").len() >= 2, "renewed on the new node");
        assert!(old.sent("RELEASE").is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_cannot_follow_is_lost_reattach_failed() {
    let failed = expected_text("reattach_failed", &[("lock", "l"), ("key", "\"k\"")]);
    // Nothing was handed over under its secret.
    let new = FakeNode::start(true, |_, cmd| match cmd[0].as_str() {
        "REATTACH" => now(Value::error(NOTHING)),
        other => panic!("the new node was sent {other}"),
    })
    .await;
    let old = old_node(new.addr.clone(), false).await;
    let store = Store::connect(&old.addr).await.unwrap();
    let lost = hold_through(&store, TTL).await.unwrap_err();
    assert_eq!(
        (lost.kind(), lost.to_string()),
        (ErrorKind::Lost, failed.clone())
    );
    // A node that answers nothing: lost at the lease's deadline.
    let silent = FakeNode::start(true, |_, _| Vec::new()).await;
    let old = old_node(silent.addr.clone(), false).await;
    let store = Store::connect(&old.addr).await.unwrap();
    let lock = store.lock("l").ttl(TTL).open().unwrap();
    let held = lock.acquire("k").await.unwrap();
    timeout(TTL * 3, held.signal().aborted())
        .await
        .expect("lost by its deadline");
    let lost = held.check().unwrap_err();
    assert_eq!(
        (lost.kind(), lost.to_string()),
        (ErrorKind::Lost, failed.clone())
    );
    let released = held.release().await.unwrap_err();
    assert_eq!(released.to_string(), failed);
}

/// The old node of a waiting hold: answers its HOLD `-MOVED` to `to`
/// after a pause (it handed the line over).
async fn old_line(to: String) -> FakeNode {
    FakeNode::start(true, move |_, cmd| match cmd[0].as_str() {
        "HOLD" => vec![(
            Duration::from_millis(100),
            Value::error(format!("MOVED {} {to}", key_slot("k"))),
        )],
        "PING" => now(Value::simple("PONG")),
        other => panic!("the old node was sent {other}"),
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_hold_handed_over_takes_its_place_with_reattach() {
    let new = FakeNode::start(true, |_, cmd| match cmd[0].as_str() {
        // It waits there, then is granted.
        "REATTACH" => vec![(Duration::from_millis(100), grant(4, 8))],
        "PING" => now(Value::simple("PONG")),
        "RELEASE" => now(Value::ok()),
        other => panic!("the new node was sent {other}"),
    })
    .await;
    let old = old_line(new.addr.clone()).await;
    let store = Store::connect(&old.addr).await.unwrap();
    let (start, _, aborted) = hold_through(&store, Duration::ZERO).await.unwrap();
    assert_eq!((start, aborted), ((8, 4), false));
    let secret = secret_of(&old.sent("HOLD")[0]).expect("a SECRET");
    let reattach = ["REATTACH", "l", "k", secret.as_str()].map(String::from);
    assert_eq!(new.sent("REATTACH"), [reattach.to_vec()]);
    assert!(
        new.sent("HOLD").is_empty(),
        "it asked for its place, not again"
    );
    // Nothing handed over under its secret (a stale map's MOVED reads
    // the same): the HOLD goes again there, as after any MOVED.
    let empty = FakeNode::start(true, |_, cmd| match cmd[0].as_str() {
        "REATTACH" => now(Value::error(NOTHING)),
        "HOLD" => now(grant(6, 9)),
        "RELEASE" => now(Value::ok()),
        _ => now(Value::simple("PONG")),
    })
    .await;
    let old = old_line(empty.addr.clone()).await;
    let store = Store::connect(&old.addr).await.unwrap();
    let (start, _, aborted) = hold_through(&store, Duration::ZERO).await.unwrap();
    assert_eq!((start, aborted), ((9, 6), false));
    assert_eq!(empty.sent("REATTACH").len(), 1);
    assert_eq!(empty.sent("HOLD").len(), 1, "held again there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_handover_gets_no_secret() {
    let node = FakeNode::start(false, |_, cmd| match cmd[0].as_str() {
        "HOLD" | "TRYHOLD" => now(grant(1, 1)),
        "RELEASE" => now(Value::ok()),
        _ => now(Value::simple("PONG")),
    })
    .await;
    let store = Store::connect(&node.addr).await.unwrap();
    hold_through(&store, Duration::ZERO).await.unwrap();
    let lock = store.lock("l").ttl(TTL).open().unwrap();
    lock.try_hold("k", async |_| ()).await.unwrap().unwrap();
    let asked = [node.sent("HOLD"), node.sent("TRYHOLD")].concat();
    assert_eq!(asked.len(), 2);
    assert!(asked.iter().all(|c| secret_of(c).is_none()), "{asked:?}");
}
