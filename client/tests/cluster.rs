//! The client against a real cluster (`holdline_testing::cluster`: etcd
//! and three `holdline serve --etcd` nodes, 8 partitions, etcd leases of
//! 2 s, a max ttl of 2 s): holds reach every node from one address, land
//! on their owners, the map is learnt from all three addresses, a ttl above
//! the cluster's max is refused `invalid`, and a node killed with SIGKILL
//! loses its leases, fails its waiters closed, and its keys are held again
//! on their new owner (once the take-over's max ttl has passed) with
//! greater fences; an election's observer of such a key follows it to its
//! new owner and is told its next leader there; then a node shut down
//! (SIGTERM) hands its partitions over with their leases and lines: its
//! holder follows its lease to the new owner and keeps it, its waiter
//! keeps its place. One cluster for the whole file: the phases run in
//! order, the kill and the shut-down last. Every lock asks a ttl of at
//! most `MAX_TTL`.

mod common;

use common::{expected_text, granted_at, Cluster, PATIENCE};
use holdline_client::{key_slot, Connection, ErrorKind, Store, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio::time::timeout;

const ETCD_TTL: Duration = Duration::from_secs(2);
/// The cluster's max ttl: short, so a take-over without a hand-over (a
/// SIGKILL) grants again quickly; every lock here asks at most this.
const MAX_TTL: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_node_cluster() {
    let Some(mut cluster) = Cluster::start(3, 8, ETCD_TTL.as_secs(), MAX_TTL) else {
        return;
    };
    let keys = keys_on_every_node(&cluster).await;
    one_address_reaches_every_node(&cluster, &keys).await;
    all_addresses_learn_the_map(&cluster, &keys).await;
    fenced_writes_go_to_the_keys_node(&cluster).await;
    a_ttl_above_the_max_is_refused(&cluster, &keys[0]).await;
    let observed = observe_in_the_background(&cluster, &keys[1]).await;
    a_killed_node_loses_its_leases_and_its_keys_move(&cluster, &keys[1]).await;
    the_observer_follows_the_key_to_its_new_owner(&cluster, &keys[1], observed).await;
    a_node_shut_down_hands_its_holds_over(&mut cluster).await;
}

/// What an observer of the election `key` of lock "failover" yielded (the
/// leaders' fences, `None` for nobody), and its task.
struct Observed {
    fences: Arc<Mutex<Vec<Option<u64>>>>,
    task: JoinHandle<()>,
}

/// An observer of the election `key` through node 0, its items collected
/// by a task; answers once it yielded the present state (nobody leads).
async fn observe_in_the_background(cluster: &Cluster, key: &str) -> Observed {
    let store = Store::connect(&cluster.nodes[0].addr).await.unwrap();
    let lock = store.lock("failover").ttl(MAX_TTL).open().unwrap();
    let mut observer = lock.election(key).observe();
    let fences = Arc::new(Mutex::new(Vec::new()));
    let seen = fences.clone();
    let task = tokio::spawn(async move {
        while let Some(item) = observer.next().await {
            seen.lock().unwrap().push(item.map(|l| l.fence));
        }
        panic!("the observer ended: {:?}", observer.error());
    });
    let deadline = Instant::now() + PATIENCE;
    while fences.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "no present state");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(*fences.lock().unwrap(), [None], "the present state: nobody");
    Observed { fences, task }
}

/// After the kill: a leader elected at the key's new owner is observed
/// there (the observer reconnected, followed the map, observed again),
/// and the fences it saw never went down.
async fn the_observer_follows_the_key_to_its_new_owner(
    cluster: &Cluster,
    key: &str,
    observed: Observed,
) {
    let store = Store::connect(&cluster.nodes[2].addr).await.unwrap();
    let lock = store.lock("failover").ttl(MAX_TTL).open().unwrap();
    let election = lock.election(key);
    let lead = timeout(PATIENCE, election.campaign("after the kill"))
        .await
        .unwrap()
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let fences = observed.fences.lock().unwrap().clone();
        if fences.last() == Some(&Some(lead.fence())) {
            let seen: Vec<u64> = fences.iter().flatten().copied().collect();
            assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{fences:?}");
            assert!(seen.len() >= 2, "the first leader and this one: {fences:?}");
            break;
        }
        assert!(Instant::now() < deadline, "not observed: {fences:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    observed.task.abort();
    lead.resign().await.unwrap();
}

/// One key per node (`keys[i]` on node `i`), their slots checked against
/// the server's `CLUSTER KEYSLOT`.
async fn keys_on_every_node(cluster: &Cluster) -> Vec<String> {
    let mut conn = Connection::connect(&*cluster.nodes[0].addr).await.unwrap();
    let mut keys = vec![None; cluster.nodes.len()];
    for i in 0.. {
        let key = format!("key-{i}");
        let owner = cluster.owner(key_slot(&key));
        if keys[owner].is_none() {
            let slot = conn.command(&["CLUSTER", "KEYSLOT", &key]).await.unwrap();
            assert_eq!(slot, Value::Integer(key_slot(&key).into()), "{key}");
            keys[owner] = Some(key);
        }
        if keys.iter().all(Option::is_some) {
            break;
        }
    }
    keys.into_iter().map(Option::unwrap).collect()
}

/// `INSPECT lock key` on a plain connection to `addr`.
async fn inspect_at(addr: &str, lock: &str, key: &str) -> Value {
    let mut conn = Connection::connect(addr).await.unwrap();
    conn.command(&["INSPECT", lock, key]).await.unwrap()
}

/// Whether an `INSPECT` map says held, with that fence.
fn held_with(reply: &Value, fence: u64) -> bool {
    let Value::Map(pairs) = reply else {
        return false;
    };
    let field = |name: &str| pairs.iter().find(|(k, _)| k.as_str() == Some(name));
    let held = field("held").is_some_and(|(_, v)| *v == Value::Boolean(true));
    let fenced = field("fence").is_some_and(|(_, v)| v.as_integer() == Some(fence as i64));
    held && fenced
}

async fn one_address_reaches_every_node(cluster: &Cluster, keys: &[String]) {
    let store = Store::connect(&cluster.nodes[0].addr).await.unwrap();
    assert!(store.is_cluster());
    let lock = store.lock("spread").ttl(MAX_TTL).open().unwrap();
    let mut held = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(
            store.node_for(key).as_deref(),
            Some(&*cluster.nodes[i].addr)
        );
        held.push(timeout(PATIENCE, lock.acquire(key)).await.unwrap().unwrap());
    }
    // Each landed on its owner: held there, redirected by the others.
    for (i, (key, lease)) in keys.iter().zip(&held).enumerate() {
        for (j, node) in cluster.nodes.iter().enumerate() {
            let reply = inspect_at(&node.addr, "spread", key).await;
            if i == j {
                assert!(held_with(&reply, lease.fence()), "{key} on {j}: {reply}");
            } else {
                let moved = format!("MOVED {} {}", key_slot(key), cluster.nodes[i].addr);
                assert_eq!(reply, Value::error(moved), "{key} asked at node {j}");
            }
        }
        // The client's own inspect goes to the owner too.
        let info = lock.inspect(key).await.unwrap().expect("a held key");
        assert!(info.held && info.fence == lease.fence());
    }
    for lease in held {
        lease.release().await.unwrap();
    }
}

async fn all_addresses_learn_the_map(cluster: &Cluster, keys: &[String]) {
    let all: Vec<&str> = cluster.nodes.iter().map(|n| &*n.addr).collect();
    let store = Store::connect(&all.join(",")).await.unwrap();
    let lock = store.lock("learnt").ttl(MAX_TTL).open().unwrap();
    for key in keys {
        let fence = lock.try_hold(key, async |lease| lease.fence()).await;
        assert!(fence.unwrap().expect("a free key") > 0);
    }
    // Each went straight to its node.
    assert_eq!(store.redirects(), 0);
    assert!(store.idle_connections() >= cluster.nodes.len());
}

/// `PUT` and `GET` go to the node of the key (hash tags keep the row's
/// slot the key's), whichever node was dialled.
async fn fenced_writes_go_to_the_keys_node(cluster: &Cluster) {
    let store = Store::connect(&cluster.nodes[0].addr).await.unwrap();
    let lock = store.lock("rows").ttl(MAX_TTL).open().unwrap();
    let key = (0..)
        .map(|i| format!("{{inv-{i}}}"))
        .find(|k| cluster.owner(key_slot(k)) == 2)
        .unwrap();
    let row = format!("{key}:status");
    lock.hold(&*key, async |lease| {
        let fence = lease.fence();
        store
            .put_fenced(&lock, lease.key(), fence, &row, b"paid")
            .await
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        store.get(&row).await.unwrap().as_deref(),
        Some(&b"paid"[..])
    );
    assert_eq!(store.redirects(), 0);
}

/// A hold asking a ttl above the cluster's max ttl is refused `invalid`,
/// with the node's text.
async fn a_ttl_above_the_max_is_refused(cluster: &Cluster, key: &str) {
    let store = Store::connect(&cluster.nodes[1].addr).await.unwrap();
    let lock = store.lock("long").ttl(MAX_TTL * 2).open().unwrap();
    let err = lock.hold(key, async |_| ()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    let want =
        format!("lock long: key {key:?}: ttl 4s is above the cluster's max ttl (2s): invalid");
    assert_eq!(err.to_string(), want);
    let err = lock.try_hold(key, async |_| ()).await.unwrap_err();
    assert_eq!((err.kind(), err.to_string()), (ErrorKind::Invalid, want));
}

async fn a_killed_node_loses_its_leases_and_its_keys_move(cluster: &Cluster, key: &str) {
    let victim = &cluster.nodes[1];
    let all: Vec<&str> = cluster.nodes.iter().map(|n| &*n.addr).collect();
    let holder = Store::connect(&all.join(",")).await.unwrap();
    let waiter = Store::connect(&cluster.nodes[0].addr).await.unwrap();
    let lock = holder.lock("failover").ttl(MAX_TTL).open().unwrap();
    let held = lock.acquire(key).await.unwrap();
    let first = held.fence();
    let waiting = {
        let lock = waiter.lock("failover").ttl(MAX_TTL).open().unwrap();
        let key = key.to_owned();
        tokio::spawn(async move { lock.key(&*key).wait(PATIENCE).hold(async |_| ()).await })
    };
    // The waiter stands in the key's line on the victim.
    let deadline = Instant::now() + PATIENCE;
    while lock.inspect(key).await.unwrap().expect("held").waiters == 0 {
        assert!(Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cluster.kill(1);
    let killed = Instant::now();
    timeout(ETCD_TTL + Duration::from_secs(3), held.signal().aborted())
        .await
        .expect("the lease on the killed node is lost");
    assert_eq!(held.check().unwrap_err().kind(), ErrorKind::Lost);
    let waited = timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the cut wait fails, not hangs")
        .unwrap();
    let err = waited.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
    let shown = format!("{key:?}");
    let vars = [("lock", "failover"), ("key", shown.as_str())];
    assert_eq!(
        err.to_string(),
        expected_text("connection_closed_key", &vars)
    );
    assert_eq!(held.release().await.unwrap_err().kind(), ErrorKind::Lost);
    // Fails closed while no node serves the key; its new owner, having
    // taken it over without a hand-over, grants nothing for the max ttl
    // (a hold waiting less fails in use); then it grants.
    let budget = ETCD_TTL + MAX_TTL + Duration::from_secs(4);
    let mut retried = Vec::new();
    let next = loop {
        let hold = lock.key(key).wait(Duration::from_millis(500));
        match hold.hold(async |lease| lease.fence()).await {
            Ok(fence) => break fence,
            Err(e) if matches!(e.kind(), ErrorKind::Closed | ErrorKind::InUse) => {
                assert!(
                    killed.elapsed() < budget,
                    "not held again in {budget:?}: {e}"
                );
                retried.push(e.to_string());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{e:?}"),
        }
    };
    retried.dedup();
    let took = killed.elapsed();
    eprintln!("held again {took:?} after the kill, through: {retried:#?}");
    assert!(
        next > first,
        "fence {next} after {first} on the killed node"
    );
    assert_ne!(holder.node_for(key).as_deref(), Some(&*victim.addr));
}

/// A key node `addr` serves, as `store`'s map says.
fn key_served_by(store: &Store, addr: &str) -> String {
    (0..)
        .map(|i| format!("handed-{i}"))
        .find(|k| store.node_for(k).as_deref() == Some(addr))
        .unwrap()
}

/// What the holder's function saw: its fence at its start and at its
/// end, whether its signal had fired by then, and when it ended.
struct Seen {
    fences: (u64, u64),
    aborted: bool,
    ended: Instant,
}

/// A node that gives its partitions up (SIGTERM) while a hold of one of
/// its keys runs: the holder follows the lease to the key's new owner and
/// keeps it (its function completes, the hold succeeds, the signal never
/// fires, the fence is the same, it is renewed there past its ttl), and
/// lets it go there at its end; a waiter in line then keeps its place
/// ahead of one that came after the hand-over.
async fn a_node_shut_down_hands_its_holds_over(cluster: &mut Cluster) {
    let (leaving, staying) = (2, 0);
    let (staying_addr, leaving_addr) = (
        cluster.nodes[staying].addr.clone(),
        cluster.nodes[leaving].addr.clone(),
    );
    let connect = || Store::connect(&staying_addr);
    let (holder, first) = (connect().await.unwrap(), connect().await.unwrap());
    let key = key_served_by(&holder, &leaving_addr);
    let open = |store: &Store| store.lock("handover").ttl(MAX_TTL).open().unwrap();
    let lock = open(&holder);
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let holding = {
        let (lock, key) = (lock.clone(), key.clone());
        tokio::spawn(async move {
            let seen = lock
                .hold(&*key, async |lease| {
                    let fence = lease.fence();
                    let _ = started_tx.send(fence);
                    // Past the ttl after the hand-over: renewed there.
                    tokio::time::sleep(Duration::from_millis(3200)).await;
                    let aborted = lease.signal().is_aborted();
                    Seen {
                        fences: (fence, lease.fence()),
                        aborted,
                        ended: Instant::now(),
                    }
                })
                .await;
            (seen, Instant::now())
        })
    };
    let fence = timeout(PATIENCE, started).await.unwrap().unwrap();
    let first_waits = granted_at(open(&first), &key);
    let _ = waiters_at_least(&lock, &key, 1).await;
    cluster.terminate(leaving);
    let terminated = Instant::now();
    // Once the node is gone, a waiter that comes now is behind the first.
    let deadline = Instant::now() + PATIENCE;
    while !cluster.exited(leaving) {
        assert!(Instant::now() < deadline, "node {leaving} did not exit");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Held on the new owner (its INSPECT's fence is its store's own; the
    // holder keeps the one it knows): the same lease a ttl later.
    let there = inspect(&lock, &key).await;
    eprintln!(
        "node {leaving} gone {:?} after SIGTERM",
        terminated.elapsed()
    );
    assert!(there.held && there.holders == 1, "{there:?}");
    // A client that comes after: its map names the new owner.
    let second = loop {
        let store = connect().await.unwrap();
        if store.node_for(&key) != Some(leaving_addr.clone()) {
            break store;
        }
        assert!(
            Instant::now() < deadline,
            "the map still names node {leaving}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let second_waits = granted_at(open(&second), &key);
    // The first waiter took its own place (REATTACH): had it asked
    // again, the place handed over would stand in line as a third.
    let line = waiters_at_least(&lock, &key, 2).await;
    assert_eq!(line.waiters, 2, "{line:?}");
    let other = open(&connect().await.unwrap());
    let tried = other.try_hold(&*key, async |_| ()).await.unwrap();
    assert!(tried.is_none(), "the key was given to another client");
    // A ttl after the hand-over: renewed on its new owner since.
    let past_ttl = terminated + MAX_TTL + Duration::from_millis(300);
    tokio::time::sleep_until(past_ttl.into()).await;
    still_held_with(&lock, &key, there.fence).await;
    let (seen, returned) = timeout(PATIENCE, holding).await.unwrap().unwrap();
    let seen = seen.expect("the hold succeeded across the hand-over");
    assert_eq!(seen.fences, (fence, fence), "the fence is unchanged");
    assert!(!seen.aborted, "the signal fired");
    let first_at = timeout(PATIENCE, first_waits).await.unwrap().unwrap();
    let first_at = first_at.expect("the first waiter's hold");
    let second_at = timeout(PATIENCE, second_waits).await.unwrap().unwrap();
    let second_at = second_at.expect("the second waiter's hold");
    // Nobody else held it while the function ran; let go on the new owner
    // at once (not left to run out there).
    assert!(first_at.0 > seen.ended, "granted to a waiter while held");
    assert!(
        first_at.0 - returned < Duration::from_millis(500),
        "{:?}",
        first_at.0 - returned
    );
    assert!(first_at.0 < second_at.0, "the first waiter kept its place");
    assert!(fence < first_at.1 && first_at.1 < second_at.1);
    let free = other.try_hold(&*key, async |l| l.fence()).await.unwrap();
    assert!(free.expect("free after the holds") > second_at.1);
    assert_ne!(holder.node_for(&key), Some(leaving_addr));
}

/// `INSPECT` of `key` of `lock`, asked again while its node is between
/// owners (a connection to the node that left fails; the map is asked
/// for again before the next try).
async fn inspect(lock: &holdline_client::Lock, key: &str) -> holdline_client::KeyInfo {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match lock.inspect(key).await {
            Ok(info) => return info.unwrap_or_else(|| panic!("{key} not held")),
            Err(e) if e.kind() == ErrorKind::Closed && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("{e:?}"),
        }
    }
}

/// Waits until `key` of `lock` has at least `n` waiters; answers what
/// `INSPECT` said then.
async fn waiters_at_least(
    lock: &holdline_client::Lock,
    key: &str,
    n: usize,
) -> holdline_client::KeyInfo {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let info = inspect(lock, key).await;
        if info.waiters >= n {
            return info;
        }
        assert!(
            Instant::now() < deadline,
            "{} waiters, not {n}",
            info.waiters
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `key` of `lock` is held under `fence` (on the node that serves it).
async fn still_held_with(lock: &holdline_client::Lock, key: &str, fence: u64) {
    let info = inspect(lock, key).await;
    assert!(info.held && info.fence == fence, "{info:?}");
}
