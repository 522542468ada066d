//! Cluster mode against a real etcd and real node processes: holds spread
//! over three nodes and redirects name the owner (redis-cli -c follows
//! them); a killed owner's partitions move within etcd-ttl + 2 s and every
//! key's fences keep rising; a node frozen past its lease never grants
//! after another node took its partitions (an external fenced register
//! counts any lower fence); etcd stopped and started again; a node joining
//! takes its share without dropping the holders of partitions that stay,
//! and an observer of a partition that moves is told `closed`, then MOVED.

mod common;

use common::cluster::{
    await_settled, await_spread, covers, etcd_available, key_slot, owner_of, slot, slot_map,
    start_etcd, start_node_with, Etcd,
};
use common::{error_text, Client, Server};
use holdline_resp::Value;
use holdline_testing::cluster::ETCD_FLAGS;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// etcd's lease in these tests (etcd refuses less than 2 s by default).
const TTL: u64 = 2;
const PARTITIONS: u16 = 8;

/// Three nodes of one cluster on a private etcd, all of them owning some.
struct Three {
    etcd: Etcd,
    nodes: Vec<Server>,
}

impl Three {
    /// `max_ttl`: the cluster's `--max-ttl` (how long a partition taken
    /// over without a hand-over grants nothing). `None` where no etcd is
    /// installed: the test is skipped.
    fn start(name: &str, max_ttl: &str) -> Option<Three> {
        if !etcd_available() {
            return None;
        }
        let etcd = start_etcd();
        let nodes: Vec<Server> = (0..3)
            .map(|_| start_node_with(&etcd, name, PARTITIONS, TTL, &["--max-ttl", max_ttl]))
            .collect();
        let three = Three { etcd, nodes };
        let addrs: Vec<SocketAddr> = three.nodes.iter().map(|n| n.addr).collect();
        await_settled(&addrs, PARTITIONS, Duration::from_secs(20));
        Some(three)
    }

    fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.addr.to_string()).collect()
    }

    /// Node `i`'s address, a client of node 0, and the first `n` keys node
    /// `i` owns in node 0's slot map.
    fn keys_of(&self, i: usize, n: usize) -> (String, Client, Vec<String>) {
        let map = slot_map(self.nodes[0].addr);
        let owner = self.addrs()[i].clone();
        let mut c = self.nodes[0].connect();
        let keys = keys_owned_by(&mut c, &map, &owner, n);
        (owner, c, keys)
    }

    fn node_at(&self, addr: &str) -> &Server {
        self.nodes
            .iter()
            .find(|n| n.addr.to_string() == addr)
            .unwrap()
    }
}

/// The first keys `k0, k1, ...` whose owner is `owner`; the server's
/// KEYSLOT agrees with the slot computed here for each.
fn keys_owned_by(c: &mut Client, map: &[(u16, u16, String)], owner: &str, n: usize) -> Vec<String> {
    let keys: Vec<String> = (0..100_000)
        .map(|i| format!("k{i}"))
        .filter(|k| owner_of(map, slot(k)).as_deref() == Some(owner))
        .take(n)
        .collect();
    for k in &keys {
        assert_eq!(key_slot(c, k), slot(k), "{k}");
    }
    keys
}

/// A grant's `[lease, fence]`, or a panic naming the answer.
fn granted(v: Value) -> (i64, i64) {
    match v {
        Value::Array(a) => match (&a[0], &a[1]) {
            (Value::Integer(l), Value::Integer(f)) => (*l, *f),
            _ => panic!("not a grant: {a:?}"),
        },
        other => panic!("not a grant: {other:?}"),
    }
}

/// Waits until `via`'s map shows `slot` owned by a node other than `old`,
/// among `alive`; answers the new owner.
fn await_new_owner(via: SocketAddr, slot: u16, old: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        if let Some(owner) = owner_of(&slot_map(via), slot) {
            if owner != old {
                return owner;
            }
        }
        assert!(
            Instant::now() < deadline,
            "slot {slot} still with {old} after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn holds_spread_over_three_nodes_and_redirects_name_the_owner() {
    let Some(three) = Three::start("spread", "10s") else {
        return;
    };
    let map = slot_map(three.nodes[0].addr);
    let mut first = three.nodes[0].connect();
    for owner in three.addrs() {
        let keys = keys_owned_by(&mut first, &map, &owner, 3);
        let mut at_owner = Client::connect(owner.parse().unwrap());
        for key in &keys {
            let slot = key_slot(&mut first, key);
            for node in &three.nodes {
                let mut c = node.connect();
                let answer = c.call(&["TRYHOLD", "spread", key]);
                if node.addr.to_string() == owner {
                    let (lease, _) = granted(answer);
                    assert_eq!(c.call(&["RELEASE", &lease.to_string()]), Value::ok());
                } else {
                    assert_eq!(error_text(answer), format!("MOVED {slot} {owner}"));
                }
            }
            granted(at_owner.call(&["HOLD", "spread", key, "WAIT", "0"]));
        }
        // The owner shows them held; STATS counts what this node serves.
        assert_eq!(at_owner.stat("spread", "held_keys"), 3);
    }
    // A row must share its key's slot; GET is routed by the row's slot.
    let mut c = three.nodes[0].connect();
    let err = error_text(c.call(&["PUT", "spread", "{a}", "1", "{b}row", "v"]));
    assert_eq!(err, "CROSSSLOT Keys in request don't hash to the same slot");
    let single = Server::start(&[]);
    let err = error_text(single.connect().call(&["CLUSTER", "SLOTS"]));
    assert_eq!(err, "ERR This instance has cluster support disabled");
}

#[test]
fn redis_cli_follows_redirects_and_reads_the_map() {
    if !etcd_available()
        || !common::tool_available("redis-cli", common::runs("redis-cli", &["--version"]))
    {
        return;
    }
    let Some(three) = Three::start("cli", "10s") else {
        return;
    };
    let map = slot_map(three.nodes[0].addr);
    let mut c = three.nodes[0].connect();
    let elsewhere = three.addrs()[1].clone();
    let key = &keys_owned_by(&mut c, &map, &elsewhere, 1)[0];
    let out = std::process::Command::new("redis-cli")
        .args([
            "-c",
            "-p",
            &three.nodes[0].port(),
            "HOLD",
            "cli",
            key,
            "WAIT",
            "0",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(
        lines.len(),
        2,
        "a lease and a fence after the redirect: {text:?}"
    );
    assert!(lines.iter().all(|l| l.parse::<i64>().is_ok()), "{text:?}");
    // CLUSTER SHARDS and NODES name the same three nodes.
    let Value::Array(shards) = c.call(&["CLUSTER", "SHARDS"]) else {
        panic!()
    };
    assert_eq!(shards.len(), 3);
    let Value::Bulk(nodes) = c.call(&["CLUSTER", "NODES"]) else {
        panic!()
    };
    let nodes = String::from_utf8(nodes).unwrap();
    assert_eq!(nodes.lines().count(), 3, "{nodes}");
    assert_eq!(nodes.matches("myself").count(), 1, "{nodes}");
    let info = match c.call(&["INFO", "cluster"]) {
        Value::Verbatim(t) => t,
        Value::Bulk(b) => String::from_utf8(b).unwrap(),
        other => panic!("{other:?}"),
    };
    assert!(info.contains("cluster_enabled:1\r\n"), "{info}");
    let served = info
        .lines()
        .find_map(|l| l.strip_prefix("cluster_partitions_served:"))
        .unwrap();
    assert!(served.parse::<u16>().unwrap() >= 1, "{info}");
    let Value::Bulk(info) = c.call(&["CLUSTER", "INFO"]) else {
        panic!()
    };
    assert!(String::from_utf8_lossy(&info).contains("cluster_state:ok"));
}

/// HOLD `key` at `owner` (WAIT 0) until it is granted: while the new
/// owner is not serving yet (CLUSTERDOWN, MOVED from its stale map) or has
/// not opened the partition (INUSE). Panics past `within`.
fn hold_when_served(owner: &str, lock: &str, key: &str, within: Duration) -> (i64, i64) {
    hold_following(owner, lock, key, within, false)
}

/// As [`hold_when_served`], but a MOVED sends the next HOLD to the node it
/// names, as a client does: for a map read before a rebalancing moved the
/// key on (never where a node named by a stale map may be frozen).
fn hold_following(
    owner: &str,
    lock: &str,
    key: &str,
    within: Duration,
    follow_moved: bool,
) -> (i64, i64) {
    let deadline = Instant::now() + within;
    let mut at = owner.to_owned();
    let mut c = Client::connect(at.parse().unwrap());
    loop {
        match c.call(&["HOLD", lock, key, "WAIT", "0"]) {
            Value::Error(e) if follow_moved && e.starts_with("MOVED") => {
                assert!(Instant::now() < deadline, "{key} at {at}: {e}");
                at = e.rsplit(' ').next().unwrap().to_owned();
                c = Client::connect(at.parse().unwrap());
            }
            Value::Error(e)
                if e.starts_with("CLUSTERDOWN")
                    || e.starts_with("MOVED")
                    || e.starts_with("INUSE") =>
            {
                assert!(Instant::now() < deadline, "{key} at {at}: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
            v => return granted(v),
        }
    }
}

/// A fenced register outside the cluster, as a resource behind the lock
/// would be: it accepts a write only with a fence above every one it saw
/// for the key, and counts the refusals.
#[derive(Default)]
struct Register {
    highest: HashMap<String, i64>,
    refused: Vec<(String, i64)>,
}

impl Register {
    fn write(&mut self, key: &str, fence: i64) -> bool {
        let top = self.highest.entry(key.to_owned()).or_insert(i64::MIN);
        if fence > *top {
            *top = fence;
            true
        } else {
            self.refused.push((key.to_owned(), fence));
            false
        }
    }
}

#[test]
fn a_killed_owner_moves_its_partitions_within_ttl_plus_2s_and_fences_keep_rising() {
    let Some(mut three) = Three::start("kill", "1s") else {
        return;
    };
    let (victim, mut c, keys) = three.keys_of(2, 6);
    let mut register = Register::default();
    let mut at_victim = Client::connect(victim.parse().unwrap());
    // With secrets: a node killed hands nothing over all the same.
    let secret = |i: usize| format!("{i:0>32}");
    for (i, key) in keys.iter().enumerate() {
        let hold = ["HOLD", "kill", key, "WAIT", "0", "SECRET", &secret(i)];
        let (_, fence) = granted(at_victim.call(&hold));
        assert!(register.write(key, fence));
    }
    three.nodes[2].signal(libc::SIGKILL);
    let killed = Instant::now();
    let survivor = three.nodes[0].addr;
    for key in &keys {
        let slot = key_slot(&mut c, key);
        let owner = await_new_owner(survivor, slot, &victim, Duration::from_secs(TTL + 2));
        assert_ne!(owner, victim);
    }
    let moved = killed.elapsed();
    assert!(moved < Duration::from_secs(TTL + 2), "took {moved:?}");
    for key in &keys {
        let owner = owner_of(&slot_map(survivor), key_slot(&mut c, key)).unwrap();
        // The new owner took over without a hand-over: it grants only once
        // no holder of the dead node can think it holds (--max-ttl 1s).
        let (_, fence) = hold_when_served(&owner, "kill", key, Duration::from_secs(TTL + 4));
        assert!(
            register.write(key, fence),
            "{key}: fence {fence} not above the old owner's"
        );
    }
    assert!(register.refused.is_empty());
    for (i, key) in keys.iter().enumerate() {
        let owner = owner_of(&slot_map(survivor), key_slot(&mut c, key)).unwrap();
        let (_, answer) = reattach(&owner, "kill", key, &secret(i), Duration::from_secs(5));
        assert!(error_text(answer).ends_with("nothing was handed over under its secret"));
    }
    drop(three.nodes.remove(2));
}

#[test]
fn a_frozen_owner_never_grants_after_another_node_took_its_partition() {
    let Some(three) = Three::start("freeze", "1s") else {
        return;
    };
    let (victim_addr, mut c, mut keys) = three.keys_of(1, 1);
    let victim = three.node_at(&victim_addr);
    let key = keys.remove(0);
    let slot = key_slot(&mut c, &key);
    let mut register = Register::default();
    // A holds the key on the victim; B waits behind it there.
    let mut a = victim.connect();
    let a_sent = Instant::now();
    let (lease_a, fence_a) = granted(a.call(&["HOLD", "freeze", &key, "TTL", "1000"]));
    assert!(register.write(&key, fence_a));
    let mut b = victim.connect();
    b.send(&["HOLD", "freeze", &key, "WAIT", "60000"]);
    assert_eq!(b.read_within(Duration::from_millis(200)), None, "B waits");
    victim.signal(libc::SIGSTOP);
    let survivor = three.nodes[0].addr;
    let owner = await_new_owner(survivor, slot, &victim_addr, Duration::from_secs(TTL + 3));
    let (_, fence_c) = hold_when_served(&owner, "freeze", &key, Duration::from_secs(TTL + 4));
    // No overlap: A's client stops believing by its HOLD's send + ttl, and
    // the new owner granted only after that.
    assert!(
        a_sent.elapsed() > Duration::from_secs(1),
        "granted within A's ttl"
    );
    assert!(register.write(&key, fence_c), "the new owner's fence rises");
    victim.signal(libc::SIGCONT);
    // A lets go on the woken victim: the key must not go to B there.
    let release = a.call(&["RELEASE", &lease_a.to_string()]);
    match b.read_within(Duration::from_secs(10)) {
        Some(Value::Array(grant)) => {
            let Value::Integer(fence_b) = grant[1] else {
                panic!()
            };
            register.write(&key, fence_b);
        }
        Some(Value::Error(e)) => assert!(e.starts_with("CLOSED "), "{e}"),
        other => panic!("B's HOLD answered {other:?}"),
    }
    assert!(
        matches!(&release, Value::Error(e) if e.starts_with("LOST ")),
        "A's lease was lost when the victim stopped: {release:?}"
    );
    assert!(
        register.refused.is_empty(),
        "stale grants: {:?}",
        register.refused
    );
    // The woken victim rejoins: a later HOLD there is redirected to the
    // owner of the moment, or (once the victim has its share back) granted
    // above every fence given so far.
    let mut v = victim.connect();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match v.call(&["HOLD", "freeze", &key, "WAIT", "0"]) {
            Value::Error(e) if e == "CLUSTERDOWN Hash slot not served" => {}
            Value::Error(e) if e.starts_with("MOVED ") => {
                assert!(e.starts_with(&format!("MOVED {slot} ")), "{e}");
                break;
            }
            Value::Error(e) if e.starts_with("INUSE ") => {}
            v => {
                let (_, fence) = granted(v);
                assert!(register.write(&key, fence), "a late grant below {fence_c}");
                break;
            }
        }
        assert!(Instant::now() < deadline, "the victim never rejoined");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = owner;
}

#[test]
fn nodes_keep_serving_while_etcd_is_away_then_stop_then_recover() {
    let Some(mut three) = Three::start("away", "3s") else {
        return;
    };
    let node = three.nodes[0].addr;
    let map = slot_map(node);
    let mut c = Client::connect(node);
    let keys = keys_owned_by(&mut c, &map, &node.to_string(), 3);
    let (lease, fence) = granted(c.call(&["HOLD", "away", &keys[0], "WAIT", "0"]));
    // A RESP3 holder that sends nothing is told by a push all the same.
    let mut quiet = Client::connect(node);
    assert!(matches!(quiet.call(&["HELLO", "3"]), Value::Map(_)));
    granted(quiet.call(&["HOLD", "away", &keys[2], "WAIT", "0", "TTL", "3000"]));
    three.etcd.kill();
    let gone = Instant::now();
    // Within the lease's margin the node still serves what it owns.
    let other = c.call(&["TRYHOLD", "away", &keys[1]]);
    if gone.elapsed() < Duration::from_millis(1000) {
        granted(other);
    }
    match quiet.read_within(Duration::from_secs(TTL + 2)) {
        Some(Value::Push(p)) => assert_eq!(p[0], Value::bulk("lost"), "{p:?}"),
        other => panic!("no lost push within the lease: {other:?}"),
    }
    assert!(
        gone.elapsed() < Duration::from_secs(TTL),
        "stopped before etcd could expire the lease"
    );
    // Past the lease it has stopped: the holder learns it, nothing is served.
    std::thread::sleep(Duration::from_secs(TTL) + Duration::from_millis(300));
    let renew = c.call(&["RENEW", &lease.to_string()]);
    assert!(
        matches!(&renew, Value::Error(e) if e.starts_with("LOST ")),
        "{renew:?}"
    );
    let err = error_text(c.call(&["TRYHOLD", "away", &keys[0]]));
    assert_eq!(err, "CLUSTERDOWN Hash slot not served");
    three.etcd.restart().unwrap();
    let map = await_spread(node, &three.addrs(), Duration::from_secs(20));
    let owner = owner_of(&map, key_slot(&mut c, &keys[0])).unwrap();
    // Nodes come back one by one and may pass partitions on after the map
    // read above was spread: follow the key.
    let (_, later) = hold_following(&owner, "away", &keys[0], Duration::from_secs(10), true);
    assert!(later > fence, "fences rise across etcd's absence");
}

#[test]
fn a_joining_node_takes_its_share_without_dropping_holders_that_stay() {
    if !etcd_available() {
        return;
    }
    let etcd = start_etcd();
    let two: Vec<Server> = (0..2)
        .map(|_| start_node_with(&etcd, "join", PARTITIONS, TTL, &["--max-ttl", "10s"]))
        .collect();
    let addrs: Vec<String> = two.iter().map(|n| n.addr.to_string()).collect();
    let before = await_spread(two[0].addr, &addrs, Duration::from_secs(20));
    // One held key in every partition, each held through its owner.
    let mut held = Vec::new();
    for p in 0..PARTITIONS {
        let (first, last) = (
            p as u32 * 16384 / PARTITIONS as u32,
            (p as u32 + 1) * 16384 / PARTITIONS as u32,
        );
        let key = (0..100_000)
            .map(|i| format!("j{i}"))
            .find(|k| (first..last).contains(&u32::from(slot(k))))
            .unwrap();
        let owner = owner_of(&before, slot(&key)).unwrap();
        let mut c = Client::connect(owner.parse().unwrap());
        let secret = format!("{p:0>32}");
        let hold = [
            "HOLD", "join", &key, "WAIT", "0", "TTL", "10000", "SECRET", &secret,
        ];
        let (lease, fence) = granted(c.call(&hold));
        held.push((key, owner, c, lease, fence, secret));
    }
    let third = start_node_with(&etcd, "join", PARTITIONS, TTL, &["--max-ttl", "10s"]);
    let mut all = addrs.clone();
    all.push(third.addr.to_string());
    let after = await_spread(two[0].addr, &all, Duration::from_secs(20));
    let mut kept = 0;
    for (key, owner, c, lease, fence, secret) in &mut held {
        let slot = &slot(key);
        let renew = c.call(&["RENEW", &lease.to_string()]);
        if owner_of(&after, *slot).as_deref() == Some(owner.as_str()) {
            assert_eq!(
                renew,
                Value::ok(),
                "slot {slot} stayed with {owner}: its holder stays"
            );
            kept += 1;
        } else {
            // Handed over with its partition: its holder follows it.
            let new_owner = owner_of(&after, *slot).unwrap();
            assert_eq!(error_text(renew), format!("MOVED {slot} {new_owner}"));
            let (_, answer) = reattach(&new_owner, "join", key, secret, Duration::from_secs(5));
            assert_eq!(granted(answer).1, *fence, "slot {slot}: the fence it had");
        }
    }
    assert!(kept >= 1, "some partitions stayed where they were");
    assert!(kept < held.len(), "the new node took a share");
}

#[test]
fn fence_windows_are_reserved_again_and_a_new_owner_starts_above_them() {
    if !etcd_available() {
        return;
    }
    let etcd = start_etcd();
    let window = "16";
    let start = |etcd: &Etcd| {
        let flags = [
            "--fence-window",
            window,
            "--metrics",
            "127.0.0.1:0",
            "--max-ttl",
            "1s",
        ];
        common::cluster::start_node_with(etcd, "windows", 1, TTL, &flags)
    };
    let mut node = start(&etcd);
    await_spread(node.addr, &[node.addr.to_string()], Duration::from_secs(20));
    // Operators see what the node serves and how long its lease lives.
    let body = scrape(&node.metrics.expect("--metrics").to_string());
    assert!(
        body.contains("\nholdline_cluster_partitions_served 1\n"),
        "{body}"
    );
    let left: f64 = body
        .lines()
        .find_map(|l| l.strip_prefix("holdline_cluster_lease_left_seconds "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(left > 0.0 && left <= TTL as f64, "{left}");
    let mut c = node.connect();
    let mut fences = Vec::new();
    // Many grants of one key: the owner reserves window after window (at
    // half of each); one it could not reserve in time stops the partition,
    // which is claimed again above it. Every fence still rises.
    let deadline = Instant::now() + Duration::from_secs(30);
    while fences.len() < 100 {
        match c.call(&["HOLD", "windows", "k", "WAIT", "0"]) {
            v @ Value::Array(_) => {
                let (lease, fence) = granted(v);
                fences.push(fence);
                assert_eq!(c.call(&["RELEASE", &lease.to_string()]), Value::ok());
                if fences.len() % 5 == 0 {
                    // Time for the agent's tick to reserve the next window.
                    std::thread::sleep(Duration::from_millis(300));
                }
            }
            Value::Error(e) if e.starts_with("CLUSTERDOWN") || e.starts_with("CLOSED ") => {
                std::thread::sleep(Duration::from_millis(20));
            }
            other => panic!("{other:?}"),
        }
        assert!(Instant::now() < deadline, "{} grants in 30 s", fences.len());
    }
    assert!(fences.windows(2).all(|w| w[1] > w[0]), "{fences:?}");
    assert!(
        fences[99] - fences[0] > 16,
        "several windows were used: {fences:?}"
    );
    // A new process owning the partition starts above every window.
    node.signal(libc::SIGKILL);
    let _ = node.wait_exit(Duration::from_secs(5));
    let node = start(&etcd);
    await_spread(node.addr, &[node.addr.to_string()], Duration::from_secs(20));
    let mut c = node.connect();
    // (It took over without a hand-over: the HOLD waits out --max-ttl.)
    let (_, fence) = granted(c.call(&["HOLD", "windows", "k", "WAIT", "5000"]));
    assert!(fence > fences[99], "{fence} after {}", fences[99]);
}

/// GET /metrics, the body.
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn a_node_shut_down_hands_its_partitions_over_once_no_holder_can_believe() {
    // A long --max-ttl: a take-over without a hand-over would grant
    // nothing for 20 s. SIGTERM's hand-over says how long a holder its
    // close could not tell (a cut link) might still believe: a partition
    // whose keys were let go is granted at once; one with a held key once
    // that lease's ttl since its holder was last heard has passed.
    let Some(mut three) = Three::start("leave", "20s") else {
        return;
    };
    let (leaving, mut c, keys) = three.keys_of(2, 64);
    let held_key = keys[0].clone();
    let free_key = keys
        .iter()
        .find(|k| partition_of_key(k) != partition_of_key(&held_key))
        .expect("node 2 owns two partitions or more")
        .clone();
    let mut at_leaving = Client::connect(leaving.parse().unwrap());
    // A lease may not outlive what a take-over waits for.
    let err = error_text(at_leaving.call(&["HOLD", "leave", &held_key, "TTL", "25000"]));
    assert_eq!(
        err,
        format!("INVALID lock leave: key \"{held_key}\": ttl 25s is above the cluster's max ttl (20s): invalid")
    );
    let (lease, _) = granted(at_leaving.call(&["HOLD", "leave", &free_key, "WAIT", "0"]));
    assert_eq!(
        at_leaving.call(&["RELEASE", &lease.to_string()]),
        Value::ok()
    );
    let ttl = Duration::from_secs(8);
    let sent = Instant::now();
    let (_, fence) =
        granted(at_leaving.call(&["HOLD", "leave", &held_key, "WAIT", "0", "TTL", "8000"]));
    // The holder's client believes until its last command's send + ttl -
    // max(10ms, ttl / 10); it sends nothing more.
    let believed_until = sent + ttl - ttl / 10;
    three.nodes[2].signal(libc::SIGTERM);
    let asked = Instant::now();
    assert!(three.nodes[2].wait_exit(Duration::from_secs(10)).success());
    let owner_of_free = await_new_owner(
        three.nodes[0].addr,
        key_slot(&mut c, &free_key),
        &leaving,
        Duration::from_secs(5),
    );
    hold_when_served(&owner_of_free, "leave", &free_key, Duration::from_secs(5));
    assert!(
        Instant::now() < believed_until,
        "the let-go key's partition waited {:?} after SIGTERM",
        asked.elapsed()
    );
    let slot = key_slot(&mut c, &held_key);
    let owner = await_new_owner(three.nodes[0].addr, slot, &leaving, Duration::from_secs(5));
    let (_, next) = hold_when_served(&owner, "leave", &held_key, Duration::from_secs(15));
    let granted_at = Instant::now();
    assert!(next > fence);
    assert!(
        granted_at >= believed_until,
        "granted while its holder could believe, {:?} early",
        believed_until - granted_at
    );
    assert!(
        asked.elapsed() < Duration::from_secs(16),
        "granted {:?} after SIGTERM: the hand-over was not seen",
        asked.elapsed()
    );
    drop(three.nodes.remove(2));
}

/// The partition of `key`'s slot.
fn partition_of_key(key: &str) -> u32 {
    (0..u32::from(PARTITIONS))
        .find(|&p| u32::from(slot(key)) < (p + 1) * 16384 / u32::from(PARTITIONS))
        .unwrap()
}

/// One key in each partition (the first `o0, o1, ...` there).
fn a_key_per_partition() -> Vec<String> {
    (0..PARTITIONS)
        .map(|p| {
            let first = u32::from(p) * 16384 / u32::from(PARTITIONS);
            let last = (u32::from(p) + 1) * 16384 / u32::from(PARTITIONS);
            (0..100_000)
                .map(|i| format!("o{i}"))
                .find(|k| (first..last).contains(&u32::from(slot(k))))
                .unwrap()
        })
        .collect()
}

/// A RESP3 observer's next push: its key and event.
fn observed(c: &mut Client) -> Option<(String, String)> {
    match c.read_within(Duration::from_secs(10))? {
        Value::Push(items) => Some((
            items[2].as_str().unwrap().to_owned(),
            items[3].as_str().unwrap().to_owned(),
        )),
        other => panic!("expected a push, got {other:?}"),
    }
}

#[test]
fn an_observer_of_a_partition_that_moves_is_told_closed_then_moved() {
    if !etcd_available() {
        return;
    }
    let etcd = start_etcd();
    let first = start_node_with(&etcd, "watch", PARTITIONS, TTL, &["--max-ttl", "10s"]);
    let first_addr = first.addr.to_string();
    await_spread(
        first.addr,
        std::slice::from_ref(&first_addr),
        Duration::from_secs(20),
    );
    let keys = a_key_per_partition();
    let mut o = first.connect();
    assert!(matches!(o.call(&["HELLO", "3"]), Value::Map(_)));
    for key in &keys {
        assert_eq!(o.call(&["OBSERVE", "watch", key]), Value::ok());
        assert_eq!(observed(&mut o), Some((key.clone(), "free".into())));
    }
    let second = start_node_with(&etcd, "watch", PARTITIONS, TTL, &["--max-ttl", "10s"]);
    let both = [first_addr.clone(), second.addr.to_string()];
    let after = await_spread(first.addr, &both, Duration::from_secs(20));
    let moved: Vec<&String> = keys
        .iter()
        .filter(|k| owner_of(&after, slot(k)).as_deref() != Some(first_addr.as_str()))
        .collect();
    assert!(!moved.is_empty() && moved.len() < keys.len(), "{after:?}");
    // Every key whose partition moved is told `closed`, and no other.
    let mut closed: Vec<String> = (0..moved.len())
        .map(|_| {
            let (key, event) = observed(&mut o).expect("a closed push in time");
            assert_eq!(event, "closed", "{key}");
            key
        })
        .collect();
    closed.sort();
    let mut want: Vec<String> = moved.iter().map(|k| k.to_string()).collect();
    want.sort();
    assert_eq!(closed, want);
    assert_eq!(o.call(&["PING"]), Value::simple("PONG"));
    // Observing again here is redirected to the new owner, where it works.
    let key = moved[0];
    let redirect = error_text(o.call(&["OBSERVE", "watch", key]));
    assert_eq!(redirect, format!("MOVED {} {}", slot(key), second.addr));
    let mut there = second.connect();
    assert!(matches!(there.call(&["HELLO", "3"]), Value::Map(_)));
    assert_eq!(there.call(&["OBSERVE", "watch", key]), Value::ok());
    assert_eq!(observed(&mut there), Some((key.clone(), "free".into())));
}

/// `/readyz` of `node`'s metrics listener: the status and the body.
fn readyz(node: &Server) -> (u16, String) {
    let addr = node.metrics.expect("--metrics").to_string();
    let (status, _, body) = common::http_get(&addr, "/readyz", "");
    (status, body)
}

/// Waits until `/readyz` answers `status`, answering its body.
fn await_readyz(node: &Server, status: u16, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let (got, body) = readyz(node);
        if got == status {
            return body;
        }
        assert!(Instant::now() < deadline, "/readyz stayed {got} {body:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_node_cut_from_etcd_is_not_ready_until_it_serves_its_share_again() {
    if !etcd_available() {
        return;
    }
    let mut etcd = start_etcd();
    let node = start_node_with(
        &etcd,
        "ready",
        PARTITIONS,
        TTL,
        &["--metrics", "127.0.0.1:0"],
    );
    let within = Duration::from_secs(20);
    assert_eq!(await_readyz(&node, 200, within), "ready\n");
    etcd.kill();
    // It stops serving before its lease could run out: not ready, and why.
    let why = await_readyz(&node, 503, Duration::from_secs(TTL + 5));
    assert!(
        ["no live etcd lease\n", "not registered in etcd\n"].contains(&why.as_str()),
        "{why:?}"
    );
    etcd.restart().unwrap();
    assert_eq!(await_readyz(&node, 200, within), "ready\n");
    let map = slot_map(node.addr);
    assert!(covers(&map, &[node.addr.to_string()]), "{map:?}");
}

/// etcd over TLS with client certificates and its auth on: a node given
/// the CA, a client certificate and a user with a password file joins
/// and serves (etcd refuses every request of a node without them).
#[test]
fn a_node_reaches_etcd_over_tls_as_a_user() {
    use holdline_testing::certs::ServerFiles;
    if !etcd_available() {
        return;
    }
    let s = ServerFiles::new("etcd-tls", "etcd");
    let (client_cert, client_key) = s.authority.leaf(true);
    let client_cert = s.dir.write("client.pem", &client_cert);
    let client_key = s.dir.write("client-key.pem", &client_key);
    let password = "etcd-root-password-0123";
    let password_file = s.dir.write("password", &format!("{password}\n"));
    let mut flags = ETCD_FLAGS.to_vec();
    flags.extend(["--cert-file", &s.cert, "--key-file", &s.key]);
    flags.extend(["--trusted-ca-file", &s.ca, "--client-cert-auth"]);
    let etcd = Etcd::start_tls(&flags).unwrap_or_else(|why| panic!("{why}"));
    enable_etcd_auth(&etcd, &s.ca, (&client_cert, &client_key), password);
    let access = [
        "--etcd-cacert",
        &s.ca,
        "--etcd-cert",
        &client_cert,
        "--etcd-key",
        &client_key,
        "--etcd-user",
        "root",
        "--etcd-password-file",
        &password_file,
    ];
    let node = start_node_with(&etcd, "tls", PARTITIONS, TTL, &access);
    let map = await_spread(node.addr, &[node.addr.to_string()], Duration::from_secs(20));
    assert!(covers(&map, &[node.addr.to_string()]), "{map:?}");
    let mut c = Client::connect(node.addr);
    granted(c.call(&["HOLD", "tls", "k", "WAIT", "0"]));
    // The same node without the CA is refused at start: TLS and https://
    // go together.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_holdline"))
        .args(["serve", "--listen", "127.0.0.1:0", "--etcd", &etcd.url()])
        .args(["--cluster", "tls", "--advertise", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("every URL https:// with --etcd-cacert, none without"),
        "{err}"
    );
    // A wrong password, or a CA that did not sign etcd's certificate, is a
    // refusal no retry can mend: the node says so and exits at once (not
    // after its minute of retries for an etcd that is not up yet).
    let wrong_password = s.dir.write("wrong-password", "not-the-password\n");
    let mut wrong = access;
    wrong[9] = &wrong_password;
    let err = refused_at_start(&etcd, &wrong);
    assert!(err.contains("etcd refused this node:"), "{err}");
    let other_ca = s.dir.write(
        "other-ca.pem",
        &holdline_testing::certs::Ca::new("other").cert.pem(),
    );
    let mut wrong = access;
    wrong[1] = &other_ca;
    let err = refused_at_start(&etcd, &wrong);
    assert!(err.contains("etcd refused this node:"), "{err}");
    assert!(err.contains("certificate"), "{err}");
}

/// Starts a node of cluster `tls` on `etcd` with `access`, which etcd must
/// refuse: answers its stderr once it exited 1, within 20 s.
fn refused_at_start(etcd: &Etcd, access: &[&str]) -> String {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_holdline"))
        .args(["serve", "--listen", "127.0.0.1:0", "--etcd", &etcd.url()])
        .args(["--cluster", "tls", "--advertise", "127.0.0.1:0"])
        .args(access)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err);
            panic!("a node etcd refuses went on trying for 20 s: {err}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    err
}

/// etcd's auth on, with the user `root` of `password`.
fn enable_etcd_auth(etcd: &Etcd, ca: &str, (cert, key): (&str, &str), password: &str) {
    use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
    let read = |path: &str| std::fs::read(path).unwrap();
    let tls = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(read(ca)))
        .identity(Identity::from_pem(read(cert), read(key)));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let options = ConnectOptions::new().with_tls(tls);
        let mut client = Client::connect([etcd.url()], Some(options)).await.unwrap();
        client.user_add("root", password, None).await.unwrap();
        client.user_grant_role("root", "root").await.unwrap();
        client.auth_enable().await.unwrap();
    });
}

/// `REATTACH lock key secret` at `owner` until it answers something
/// other than a redirection (the partition is between owners a moment).
fn reattach(owner: &str, lock: &str, key: &str, secret: &str, within: Duration) -> (Client, Value) {
    let deadline = Instant::now() + within;
    let mut at = owner.to_owned();
    loop {
        let mut c = Client::connect(at.parse().unwrap());
        c.call(&["HELLO", "3"]);
        c.send(&["REATTACH", lock, key, secret]);
        let answer = c.read_within(Duration::from_secs(30)).expect("an answer");
        match &answer {
            Value::Error(e) if e.starts_with("MOVED ") => {
                at = e.split(' ').nth(2).unwrap().to_owned();
            }
            Value::Error(e) if e.starts_with("CLUSTERDOWN") => {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => return (c, answer),
        }
        assert!(
            Instant::now() < deadline,
            "no answer but redirections from {owner}"
        );
    }
}

#[test]
fn a_node_shut_down_hands_its_leases_and_lines_over_and_holders_reattach() {
    // A long --max-ttl: without the hand-over, the held key would be
    // granted to nobody for its ttl; with it, its holder keeps it.
    let Some(mut three) = Three::start("follow", "20s") else {
        return;
    };
    let (leaving, mut c, keys) = three.keys_of(2, 64);
    let key = keys[0].clone();
    let slot = key_slot(&mut c, &key);
    // A holder in each of the node's other partitions: every one moves.
    let mut others: Vec<(String, Client, i64, String)> = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let p = partition_of_key(k);
        if p == partition_of_key(&key) || others.iter().any(|(o, ..)| partition_of_key(o) == p) {
            continue;
        }
        let mut h = Client::connect(leaving.parse().unwrap());
        h.call(&["HELLO", "3"]);
        let secret = format!("{i:0>32}");
        let (_, fence) = granted(h.call(&["HOLD", "follow", k, "WAIT", "0", "SECRET", &secret]));
        others.push((k.clone(), h, fence, secret));
    }
    assert!(!others.is_empty(), "node 2 owns two partitions or more");
    let (holder_secret, waiter_secret) = (
        "0123456789abcdef0123456789abcdef",
        "fedcba9876543210fedcba9876543210",
    );
    let mut holder = Client::connect(leaving.parse().unwrap());
    let hello = holder.call(&["HELLO", "3"]);
    let Value::Map(hello) = hello else {
        panic!("{hello:?}")
    };
    assert_eq!(
        common::map_field(&hello, "handover"),
        Some(Value::Integer(1))
    );
    let bad = holder.call(&["HOLD", "follow", &key, "SECRET", "short"]);
    assert_eq!(
        error_text(bad),
        format!("INVALID lock follow: key \"{key}\": a secret is 16 to 64 letters, digits, '-' or '_': invalid")
    );
    let (lease, fence) = granted(holder.call(&[
        "HOLD",
        "follow",
        &key,
        "WAIT",
        "0",
        "TTL",
        "8000",
        "SECRET",
        holder_secret,
    ]));
    let mut waiter = Client::connect(leaving.parse().unwrap());
    waiter.call(&["HELLO", "3"]);
    waiter.send(&[
        "HOLD",
        "follow",
        &key,
        "WAIT",
        "30000",
        "SECRET",
        waiter_secret,
    ]);
    assert_eq!(
        waiter.read_within(Duration::from_millis(200)),
        None,
        "it waits"
    );

    three.nodes[2].signal(libc::SIGTERM);
    let asked = Instant::now();
    // The holder is told where its lease went, the waiter where its place.
    let pushed = holder.read_within(Duration::from_secs(10)).expect("a push");
    let Value::Push(push) = pushed else {
        panic!("{pushed:?}")
    };
    assert_eq!(push[0], Value::bulk("moved"));
    assert_eq!(push[1], Value::Integer(lease));
    assert_eq!(push[2], Value::Integer(i64::from(slot)));
    let Value::Bulk(to) = &push[3] else {
        panic!("{push:?}")
    };
    let to = String::from_utf8(to.clone()).unwrap();
    let moved = error_text(
        waiter
            .read_within(Duration::from_secs(10))
            .expect("an answer"),
    );
    assert_eq!(moved, format!("MOVED {slot} {to}"));
    assert!(three.nodes[2].wait_exit(Duration::from_secs(10)).success());

    for (k, h, fence, secret) in &mut others {
        let pushed = h.read_within(Duration::from_secs(5)).expect("a push");
        let Value::Push(push) = pushed else {
            panic!("{k}: {pushed:?}")
        };
        assert_eq!(push[0], Value::bulk("moved"), "{k}");
        let Value::Bulk(to) = &push[3] else {
            panic!("{push:?}")
        };
        let to = String::from_utf8(to.clone()).unwrap();
        let (_, answer) = reattach(&to, "follow", k, secret, Duration::from_secs(10));
        assert_eq!(granted(answer).1, *fence, "{k}: the fence it had");
    }
    let (mut holder, answer) =
        reattach(&to, "follow", &key, holder_secret, Duration::from_secs(10));
    let (new_lease, kept_fence) = granted(answer);
    assert_eq!(kept_fence, fence, "the fence its holder knows");
    // A fenced write with that fence is its holder's; INSPECT shows it.
    let row = format!("{{{key}}}row");
    let put = ["PUT", "follow", &key, &fence.to_string(), &row, "v"];
    assert_eq!(holder.call(&put), Value::ok());
    let Value::Map(inspect) = holder.call(&["INSPECT", "follow", &key]) else {
        panic!()
    };
    assert_eq!(
        common::map_field(&inspect, "fence"),
        Some(Value::Integer(fence))
    );
    assert!(
        asked.elapsed() < Duration::from_secs(6),
        "re-attached {:?} after SIGTERM",
        asked.elapsed()
    );
    let owner = await_new_owner(three.nodes[0].addr, slot, &leaving, Duration::from_secs(5));
    let mut other = Client::connect(owner.parse().unwrap());
    assert_eq!(
        other.call(&["TRYHOLD", "follow", &key]),
        Value::Null,
        "still held"
    );
    // Its place: before a HOLD that came after the hand-over.
    let (mut waiter, _) = (Client::connect(owner.parse().unwrap()), ());
    waiter.call(&["HELLO", "3"]);
    waiter.send(&["REATTACH", "follow", &key, waiter_secret]);
    assert_eq!(
        waiter.read_within(Duration::from_millis(200)),
        None,
        "it waits"
    );
    other.send(&["HOLD", "follow", &key, "WAIT", "30000"]);
    assert_eq!(
        other.read_within(Duration::from_millis(200)),
        None,
        "it waits too"
    );
    // Taken once: neither the secret again nor another one.
    let (_, again) = reattach(
        &owner,
        "follow",
        &key,
        holder_secret,
        Duration::from_secs(5),
    );
    let nothing = format!(
        "LOST lock follow: key \"{key}\": the lease was lost: nothing was handed over under its secret"
    );
    assert_eq!(error_text(again), nothing);
    // Renewed on its new connection past the ttl it had at the hand-over.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(holder.call(&["RENEW", &new_lease.to_string()]), Value::ok());
    assert_eq!(
        holder.call(&["RELEASE", &new_lease.to_string()]),
        Value::ok()
    );
    let (waiter_lease, next) =
        granted(waiter.read_within(Duration::from_secs(5)).expect("granted"));
    assert!(next > fence, "fences rise across the hand-over");
    assert_eq!(
        other.read_within(Duration::from_millis(200)),
        None,
        "behind the waiter"
    );
    assert_eq!(
        waiter.call(&["RELEASE", &waiter_lease.to_string()]),
        Value::ok()
    );
    let (_, last) = granted(other.read_within(Duration::from_secs(5)).expect("granted"));
    assert!(last > next);
    drop(three.nodes.remove(2));
}

/// A program that runs the server as a node of the release before
/// hand-overs carried leases: it neither takes nor gives them.
fn earlier_release() -> (common::TempFile, std::path::PathBuf) {
    let bin = env!("CARGO_BIN_EXE_holdline");
    let script = common::TempFile::new(
        "earlier-release",
        &format!("#!/bin/sh\nHOLDLINE_TEST_IGNORE_IMPORTS=1 exec {bin} \"$@\"\n"),
    );
    let path = std::path::PathBuf::from(&script.path);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    (script, path)
}

#[test]
fn a_node_hands_an_earlier_release_no_leases_and_its_holders_are_told_lost() {
    if !etcd_available() {
        return;
    }
    let etcd = start_etcd();
    let (_script, older) = earlier_release();
    let new = start_node_with(&etcd, "skew", PARTITIONS, TTL, &["--max-ttl", "20s"]);
    let start_older = || {
        let node = holdline_testing::cluster::start_node(
            &older,
            &etcd,
            "skew",
            PARTITIONS,
            &format!("{TTL}s"),
            &["--max-ttl", "20s"],
        );
        Server(node.unwrap_or_else(|why| panic!("{why}")))
    };
    let mut nodes = vec![new, start_older(), start_older()];
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.addr).collect();
    await_settled(&addrs, PARTITIONS, Duration::from_secs(20));
    let mut at_older = nodes[1].connect();
    let Value::Map(hello) = at_older.call(&["HELLO", "3"]) else {
        panic!()
    };
    assert_eq!(common::map_field(&hello, "handover"), None);
    let map = slot_map(nodes[1].addr);
    let newer = nodes[0].addr.to_string();
    let key = keys_owned_by(&mut at_older, &map, &newer, 1).remove(0);
    let mut holder = nodes[0].connect();
    holder.call(&["HELLO", "3"]);
    let sent = Instant::now();
    let (lease, fence) = granted(holder.call(&[
        "HOLD",
        "skew",
        &key,
        "WAIT",
        "0",
        "TTL",
        "4000",
        "SECRET",
        "0123456789abcdef0123456789abcdef",
    ]));
    let believed_until = sent + Duration::from_millis(4000 - 400);
    nodes[0].signal(libc::SIGTERM);
    // Its next owner cannot take the lease: it ends as before.
    let pushed = holder.read_within(Duration::from_secs(10)).expect("a push");
    let Value::Push(push) = pushed else {
        panic!("{pushed:?}")
    };
    assert_eq!(push[0], Value::bulk("lost"));
    assert_eq!(push[1], Value::Integer(lease));
    assert!(nodes[0].wait_exit(Duration::from_secs(10)).success());
    let slot = key_slot(&mut at_older, &key);
    let owner = await_new_owner(nodes[1].addr, slot, &newer, Duration::from_secs(5));
    let (_, next) = hold_when_served(&owner, "skew", &key, Duration::from_secs(15));
    assert!(next > fence);
    assert!(
        Instant::now() >= believed_until,
        "granted while its holder could believe"
    );
    drop(nodes.remove(0));
}
