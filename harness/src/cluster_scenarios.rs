//! The `cluster` scenario: uncontended holds (`HOLD bench key WAIT 0`, then
//! `RELEASE lease`) through one plain `holdline serve` (no `--etcd`: the
//! reference row) and through clusters of 1, 2 and 3 nodes with a private
//! etcd, every row with the same clients and keys. A client has a
//! connection to every node and sends each key to the owner of its slot,
//! computing the slot itself (CRC16) from the owners `CLUSTER SLOTS` gave
//! once the map settled; a `MOVED` answer (none expected: nothing joins or
//! leaves while a row runs) re-routes the slot and is counted.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use holdline_client::{Connection, Value};
use tokio::runtime::Runtime;

use crate::cluster::{
    etcd_binary, owners, shares, tools_required, Cluster, Range, Setup, ETCD_TTL, PARTITIONS,
};
use crate::measure::{hist, io_runtime, record_pairs, run_tasks};
use crate::row::Run;
use crate::scenario::{Cfg, Scenario, CLUSTER_KEYS};
use crate::servers::{is_debug_build, ServerKind, ServerProcess};
use holdline_client::key_slot;

/// The lock name the holds use.
const LOCK: &str = "bench";

/// What a row runs against, started: the plain node or a cluster (its
/// etcd, its nodes and their settled map).
enum Servers {
    Plain(ServerProcess),
    Cluster(Cluster),
}

/// The servers of a row and how long they took to be ready.
struct Started {
    servers: Servers,
    /// From the first process started to a settled map.
    ready: Duration,
}

impl Started {
    fn addrs(&self) -> Vec<SocketAddr> {
        match &self.servers {
            Servers::Plain(node) => vec![node.addr],
            Servers::Cluster(c) => c.nodes.iter().map(|n| n.addr).collect(),
        }
    }

    /// The settled map (empty for the plain node).
    fn map(&self) -> &[Range] {
        match &self.servers {
            Servers::Plain(_) => &[],
            Servers::Cluster(c) => &c.map,
        }
    }
}

/// One run of the `cluster` scenario against `setup` with `clients`
/// clients; a row `n/a` (saying how to get what is missing) where the
/// holdline binary or, for a cluster, etcd is missing. A missing etcd
/// panics instead (the row reads PANICKED) under `HOLDLINE_REQUIRE_TOOLS=1`.
pub fn run(setup: Setup, cfg: &Cfg, clients: usize) -> Run {
    let mut run = Run::new(Scenario::Cluster, clients, setup.name());
    // Holds wait in line, and HOLD has a bounded wait.
    run.fifo = true;
    run.deadline = true;
    let bin = match ServerKind::Holdline.binary() {
        Ok(bin) => bin,
        Err(missing) => {
            run.na = Some(missing.na);
            run.note = missing.how;
            return run;
        }
    };
    let rt = io_runtime();
    let started = match setup {
        Setup::Plain => start_plain(&bin),
        Setup::Nodes(n) => match etcd_binary() {
            Ok(_) => start_cluster(&bin, n),
            Err(missing) if tools_required() => {
                panic!(
                    "etcd is required (HOLDLINE_REQUIRE_TOOLS=1) but missing: {}",
                    missing.how
                )
            }
            Err(missing) => {
                run.na = Some(missing.na);
                run.note = missing.how;
                return run;
            }
        },
    };
    let started = started.unwrap_or_else(|e| panic!("{}: {e}", setup.name()));
    let counts = measure(&mut run, cfg, &rt, &started, clients);
    run.note = note(setup, clients, &started, &counts);
    if is_debug_build(&bin) {
        run.note = format!("DEBUG BUILD of holdline (build --release); {}", run.note);
    }
    run
}

fn start_plain(bin: &std::path::Path) -> Result<Started, String> {
    let t0 = Instant::now();
    let node = ServerProcess::holdline(bin, &[])?;
    Ok(Started {
        servers: Servers::Plain(node),
        ready: t0.elapsed(),
    })
}

/// A cluster of `n` nodes (`holdline_testing::cluster::Cluster::start`:
/// etcd, the nodes, and a wait until every node answers the same settled
/// map).
fn start_cluster(bin: &std::path::Path, n: usize) -> Result<Started, String> {
    let t0 = Instant::now();
    let cluster = Cluster::start(bin, n, PARTITIONS as u16, ETCD_TTL, &[])?;
    Ok(Started {
        servers: Servers::Cluster(cluster),
        ready: t0.elapsed(),
    })
}

/// A client's connection to every node and where it sends each slot.
struct Router {
    conns: Vec<Connection>,
    addrs: Arc<[SocketAddr]>,
    /// Each slot's owner: an index into `conns`.
    owner: Vec<u8>,
    /// Holds granted by each node.
    held: Vec<u64>,
    moved: u64,
    down: u64,
}

impl Router {
    async fn connect(addrs: Arc<[SocketAddr]>, owner: Vec<u8>) -> Router {
        let mut conns = Vec::with_capacity(addrs.len());
        for a in addrs.iter() {
            let c = Connection::connect(*a).await;
            conns.push(c.unwrap_or_else(|e| panic!("connect to {a}: {e}")));
        }
        Router {
            held: vec![0; conns.len()],
            conns,
            addrs,
            owner,
            moved: 0,
            down: 0,
        }
    }

    /// Holds `key` on its slot's owner: the node and the lease. A `MOVED`
    /// re-routes the slot, a `CLUSTERDOWN` (nobody serves it yet) waits a
    /// millisecond; both are counted and the hold is sent again.
    async fn hold(&mut self, key: &str) -> (usize, i64) {
        loop {
            let s = usize::from(key_slot(key));
            let node = usize::from(self.owner[s]);
            let reply = self.conns[node]
                .command(&["HOLD", LOCK, key, "WAIT", "0"])
                .await
                .unwrap_or_else(|e| panic!("HOLD {key} at {}: {e}", self.addrs[node]));
            match &reply {
                Value::Array(a) => match a.as_slice() {
                    [Value::Integer(lease), Value::Integer(_fence)] => {
                        self.held[node] += 1;
                        return (node, *lease);
                    }
                    _ => panic!("HOLD {key}: answered {reply:?}"),
                },
                Value::Error(e) if e.starts_with("MOVED ") => {
                    self.owner[s] = self.moved_to(e);
                    self.moved += 1;
                }
                Value::Error(e) if e.starts_with("CLUSTERDOWN") => {
                    self.down += 1;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                _ => panic!("HOLD {key} at {}: answered {reply:?}", self.addrs[node]),
            }
        }
    }

    /// The node a `MOVED slot host:port` names.
    fn moved_to(&self, text: &str) -> u8 {
        let to = text.split_whitespace().nth(2).and_then(|a| a.parse().ok());
        let i = to.and_then(|a: SocketAddr| self.addrs.iter().position(|x| *x == a));
        let i = i.unwrap_or_else(|| panic!("{text}: not one of the nodes {:?}", self.addrs));
        i as u8
    }

    async fn release(&mut self, node: usize, lease: i64) {
        let reply = self.conns[node]
            .command(&["RELEASE", &lease.to_string()])
            .await
            .expect("read a release's answer");
        assert!(
            matches!(&reply, Value::Simple(s) if s == "OK"),
            "RELEASE {lease}: answered {reply:?}"
        );
    }
}

/// What the clients counted besides the pairs: holds per node, `MOVED`
/// and `CLUSTERDOWN` answers.
#[derive(Default)]
struct Counts {
    held: Vec<u64>,
    moved: u64,
    down: u64,
}

/// Each client holds and releases its own keys round robin, each on its
/// owner, for `cfg.duration`, every pair timed.
fn measure(run: &mut Run, cfg: &Cfg, rt: &Runtime, started: &Started, clients: usize) -> Counts {
    let addrs: Arc<[SocketAddr]> = started.addrs().into();
    let owner = owners(started.map(), &addrs);
    let routers: Vec<parking_lot::Mutex<Option<Router>>> = rt.block_on(async {
        let mut all = Vec::with_capacity(clients);
        for _ in 0..clients {
            let r = Router::connect(addrs.clone(), owner.clone()).await;
            all.push(parking_lot::Mutex::new(Some(r)));
        }
        all
    });
    let routers = Arc::new(routers);
    let (outs, secs) = run_tasks(rt, clients, cfg.duration, |t, stop| {
        let routers = routers.clone();
        async move {
            let mut r = routers[t].lock().take().expect("each router is taken once");
            let keys: Vec<String> = (0..CLUSTER_KEYS).map(|i| format!("c{t}-{i}")).collect();
            let mut h = hist();
            let mut n = 0u64;
            while !stop.load(SeqCst) {
                let key = &keys[n as usize % keys.len()];
                let t0 = Instant::now();
                let (node, lease) = r.hold(key).await;
                r.release(node, lease).await;
                let _ = h.record(t0.elapsed().as_nanos() as u64);
                n += 1;
            }
            (h, n, r)
        }
    });
    let mut counts = Counts {
        held: vec![0; addrs.len()],
        ..Counts::default()
    };
    let mut pairs: Vec<(Histogram<u64>, [u64; 1])> = Vec::with_capacity(outs.len());
    for (h, n, r) in outs {
        pairs.push((h, [n]));
        for (sum, x) in counts.held.iter_mut().zip(&r.held) {
            *sum += x;
        }
        counts.moved += r.moved;
        counts.down += r.down;
    }
    record_pairs(run, pairs, secs, "hold+release");
    counts
}

/// The row's note: the setup, the map and how the holds spread over it.
fn note(setup: Setup, clients: usize, started: &Started, counts: &Counts) -> String {
    let n = started.addrs().len();
    let total: u64 = counts.held.iter().sum::<u64>().max(1);
    let spread: Vec<String> = counts
        .held
        .iter()
        .map(|h| format!("{:.0}%", *h as f64 * 100.0 / total as f64))
        .collect();
    let ready = started.ready.as_secs_f64();
    match setup {
        Setup::Plain => format!(
            "{clients} clients, 1 node without --etcd, {CLUSTER_KEYS} keys each; started in {ready:.1}s"
        ),
        Setup::Nodes(_) => format!(
            "{clients} clients x {n} node{} ({} connections), {CLUSTER_KEYS} keys each; \
             partitions {}, holds per node {}; ttl {ETCD_TTL}; settled {ready:.1}s after start; \
             MOVED {}, CLUSTERDOWN {}",
            if n == 1 { "" } else { "s" },
            clients * n,
            shares(started.map(), &started.addrs()),
            spread.join("/"),
            counts.moved,
            counts.down,
        ),
    }
}

/// A cluster routes as the scenario does: the owner grants, another node
/// answers `MOVED` to the owner; and every setup measures briefly.
#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the cluster rows can run here; a missing etcd fails the test
    /// under `HOLDLINE_REQUIRE_TOOLS=1`.
    fn available() -> bool {
        if let Err(m) = ServerKind::Holdline.binary() {
            eprintln!("skipped: {}", m.how);
            return false;
        }
        match etcd_binary() {
            Ok(_) => true,
            Err(m) if tools_required() => {
                panic!(
                    "etcd is required (HOLDLINE_REQUIRE_TOOLS=1) but missing: {}",
                    m.how
                )
            }
            Err(m) => {
                eprintln!("skipped: {}", m.how);
                false
            }
        }
    }

    #[test]
    fn a_key_is_granted_by_its_owner_and_moved_by_the_other_node() {
        if !available() {
            return;
        }
        let bin = ServerKind::Holdline.binary().unwrap();
        let rt = io_runtime();
        let started = start_cluster(&bin, 2).expect("a cluster");
        let addrs: Arc<[SocketAddr]> = started.addrs().into();
        assert_eq!(shares(started.map(), &addrs), "8/8");
        let owner = owners(started.map(), &addrs);
        rt.block_on(async {
            let mut r = Router::connect(addrs.clone(), owner.clone()).await;
            for key in ["a", "b", "c", "{tag}x", "c0-1"] {
                let s = key_slot(key);
                let right = usize::from(owner[usize::from(s)]);
                let wrong = 1 - right;
                let reply = r.conns[wrong]
                    .command(&["HOLD", LOCK, key, "WAIT", "0"])
                    .await
                    .unwrap();
                let want = format!("MOVED {s} {}", addrs[right]);
                assert_eq!(reply, Value::Error(want), "{key}");
                let (node, lease) = r.hold(key).await;
                assert_eq!(node, right, "{key}");
                r.release(node, lease).await;
            }
            // A wrong table is put right by the MOVED answer.
            let s = usize::from(key_slot("a"));
            r.owner[s] = 1 - owner[s];
            let (node, lease) = r.hold("a").await;
            assert_eq!((node, r.moved), (usize::from(owner[s]), 1));
            r.release(node, lease).await;
        });
    }

    #[test]
    fn every_setup_measures_and_two_nodes_share_the_holds() {
        if !available() {
            return;
        }
        let cfg = Cfg::new(Duration::from_millis(60), 10);
        for setup in [Setup::Plain, Setup::Nodes(2)] {
            let r = run(setup, &cfg, 2);
            assert_eq!(r.na, None, "{setup:?}: {}", r.note);
            assert!(r.ops > 0 && r.p50 > 0, "{setup:?}: {r:?}");
            if setup == Setup::Nodes(2) {
                assert!(r.note.contains("partitions 8/8"), "{}", r.note);
                assert!(r.note.contains("MOVED 0"), "{}", r.note);
                let no_holds = r.note.contains("node 0%") || r.note.contains("/0%");
                assert!(!no_holds, "a node got no holds: {}", r.note);
            }
        }
    }
}
