//! The client against a real cluster (`holdline_testing::cluster`: etcd
//! and three `holdline serve --etcd` nodes, 8 partitions, etcd leases of
//! 2 s, a max ttl of 2 s): holds reach every node from one address, land
//! on their owners, the map is learnt from all three addresses, a ttl above
//! the cluster's max is refused `invalid`, and a node killed with SIGKILL
//! loses its leases, fails its waiters closed, and its keys are held again
//! on their new owner (once the take-over's max ttl has passed) with
//! greater fences; an election's observer of such a key follows it to its
//! new owner and is told its next leader there. One cluster for the whole
//! file: the phases run in order, the kill last. Every lock asks a ttl of
//! at most `MAX_TTL`.

mod common;

use common::{expected_text, Cluster, PATIENCE};
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
    let Some(cluster) = Cluster::start(3, 8, ETCD_TTL.as_secs(), MAX_TTL) else {
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
