//! A real `holdline serve` process on loopback, started by the tests.
//!
//! The binary: `$HOLDLINE_BIN`, else the newer of `release/holdline` and
//! `debug/holdline` in the target dir this test executable was built into,
//! else built there with `cargo build --release --bin holdline`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use holdline_client::{Lock, Store};
use holdline_testing::{cluster, spawn};
use tokio::task::JoinHandle;

pub use spawn::PATIENCE;

/// A server process, killed when dropped.
pub struct Server {
    process: spawn::Holdline,
    pub addr: String,
    _dir: Option<TempDir>,
}

/// A directory removed when dropped (for the token or users file).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Server {
    /// A server on a loopback port it binds itself.
    pub fn start() -> Server {
        Server::start_with(None, &[])
    }

    /// A server that requires `token`.
    pub fn start_with_token(token: &str) -> Server {
        Server::start_with(Some(("--token-file", token)), &[])
    }

    /// A server with users (`holdline serve --users`): `users` is the
    /// file's text, one `NAME TOKEN [admin] [locks=GLOB,...]` a line.
    pub fn start_with_users(users: &str) -> Server {
        Server::start_with(Some(("--users", users)), &[])
    }

    /// A server with more arguments to `holdline serve` (`--tls-cert ...`).
    pub fn start_with_args(args: &[&str]) -> Server {
        Server::start_with(None, args)
    }

    /// `file`: a flag and the text of the file it names (written to a
    /// directory removed with the server).
    fn start_with(file: Option<(&str, &str)>, args: &[&str]) -> Server {
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        // SIGTERM drains for --drain-timeout: short, so stopping stays quick.
        let mut all = vec!["--listen", "127.0.0.1:0", "--drain-timeout", "100ms"];
        all.extend_from_slice(args);
        let dir = file.map(|(_, text)| {
            let dir = std::env::temp_dir().join(format!(
                "holdline-client-test-{}-{}",
                std::process::id(),
                // Relaxed: the count only has to be unique.
                STARTED.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("file"), text).unwrap();
            TempDir(dir)
        });
        let path = dir.as_ref().map(|d| d.0.join("file"));
        let path = path.as_ref().and_then(|f| f.to_str());
        if let (Some((flag, _)), Some(path)) = (file, path) {
            all.extend([flag, path]);
        }
        let process = spawn::Holdline::spawn(binary(), &all).unwrap_or_else(|why| panic!("{why}"));
        Server {
            addr: process.addr.to_string(),
            process,
            _dir: dir,
        }
    }

    /// SIGKILL: every connection drops at once, no answers written.
    pub fn kill(&mut self) {
        let _ = self.process.child.kill();
        let _ = self.process.child.wait();
    }

    /// SIGSTOP: the process stalls, its connections stay open, silent.
    pub fn stop(&mut self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`stop`](Server::stop).
    pub fn resume(&mut self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.process.child.id().to_string();
        let status = Command::new("kill").args([sig, &pid]).status().unwrap();
        assert!(status.success(), "kill {sig} {pid}");
    }

    /// SIGTERM: the server drains (100 ms here), then closes its store
    /// (waiters `CLOSED`) and exits.
    pub fn terminate(&mut self) {
        self.signal("-TERM");
        let _ = self.process.child.wait();
    }

    /// A store connected to this server.
    pub async fn store(&self) -> Store {
        Store::connect(&self.addr).await.expect("connect")
    }

    /// A store connected to this server, and its lock `name` opened with
    /// a ttl of `ttl_ms` and a max hold of `max_hold_ms` where given (else
    /// the server's defaults).
    pub async fn lock(
        &self,
        name: &str,
        ttl_ms: Option<u64>,
        max_hold_ms: Option<u64>,
    ) -> (Store, Lock) {
        let store = self.store().await;
        let mut builder = store.lock(name);
        if let Some(ms) = ttl_ms {
            builder = builder.ttl(Duration::from_millis(ms));
        }
        if let Some(ms) = max_hold_ms {
            builder = builder.max_hold(Duration::from_millis(ms));
        }
        let lock = builder.open().unwrap();
        (store, lock)
    }
}

/// Asserts `e`'s kind, and exactly its text.
#[track_caller]
pub fn assert_error(e: &holdline_client::Error, kind: holdline_client::ErrorKind, text: &str) {
    assert_eq!(e.kind(), kind, "{e}");
    assert_eq!(e.to_string(), text);
}

/// Holds `key` of `lock`, waiting up to `wait`, and asserts its grant's
/// fence is above zero: the key was free, or came free in time.
pub async fn assert_takes(lock: &Lock, key: &str, wait: Duration) {
    let fence = lock
        .key(key)
        .wait(wait)
        .hold(async |l| l.fence())
        .await
        .unwrap();
    assert!(fence > 0);
}

/// A task that waits (up to `PATIENCE`) for `key` of `lock`, holds it
/// and answers when its hold began, and its fence.
pub fn granted_at(
    lock: Lock,
    key: &str,
) -> JoinHandle<Result<(Instant, u64), holdline_client::Error>> {
    let key = key.to_owned();
    tokio::spawn(async move {
        lock.key(&key)
            .wait(PATIENCE)
            .hold(async |l| (Instant::now(), l.fence()))
            .await
    })
}

/// The server binary, found or built once per test process.
pub fn binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("HOLDLINE_BIN") {
            return PathBuf::from(bin);
        }
        // <target>/<profile>/deps/<this test>
        let exe = std::env::current_exe().unwrap();
        let target = exe
            .parent()
            .and_then(Path::parent)
            .and_then(Path::parent)
            .expect("the test runs from <target>/<profile>/deps")
            .to_path_buf();
        // The newer of the two, so a stale build of one profile is not used.
        let built = ["release", "debug"]
            .iter()
            .map(|profile| target.join(profile).join("holdline"))
            .filter_map(|bin| Some((bin.metadata().ok()?.modified().ok()?, bin)))
            .max();
        if let Some((_, bin)) = built {
            return bin;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let status = Command::new(cargo)
            .current_dir(root)
            .env("CARGO_TARGET_DIR", &target)
            .args(["build", "--release", "--bin", "holdline"])
            .status()
            .expect("run cargo build --release --bin holdline");
        assert!(
            status.success(),
            "cargo build --release --bin holdline failed"
        );
        target.join("release").join("holdline")
    })
}

/// The repository's root (the workspace this crate is in).
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// A TCP forwarder (`clients/testing/frozen_proxy.py`) between a client
/// and the server: [`freeze`](Proxy::freeze) stops its process, so nothing
/// flows either way while both sockets stay open.
pub struct Proxy {
    child: Child,
    pub addr: String,
}

impl Proxy {
    /// A proxy to `target` (`host:port`).
    pub fn start(target: &str) -> Proxy {
        use std::io::{BufRead, BufReader};
        let script = repo_root().join("clients/testing/frozen_proxy.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(target)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start python3 clients/testing/frozen_proxy.py");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line.trim().parse().expect("the proxy prints its port");
        Proxy {
            child,
            addr: format!("127.0.0.1:{port}"),
        }
    }

    /// SIGSTOP: every path through the proxy goes silent.
    pub fn freeze(&self) {
        signal(&self.child, "-STOP");
    }

    /// SIGCONT after [`freeze`](Proxy::freeze).
    pub fn thaw(&self) {
        signal(&self.child, "-CONT");
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.thaw();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn signal(child: &Child, sig: &str) {
    let pid = child.id().to_string();
    let status = Command::new("kill").args([sig, &pid]).status().unwrap();
    assert!(status.success(), "kill {sig} {pid}");
}

/// The Rust holder example: `$HOLDLINE_RUST_HOLDER`, else the newer of
/// the release and debug builds beside this test (`cargo test` builds the
/// crate's examples; `cargo test --test NAME` alone does not).
pub fn holder_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("HOLDLINE_RUST_HOLDER") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().unwrap();
    let target = exe.ancestors().nth(3).unwrap();
    ["release", "debug"]
        .iter()
        .map(|profile| target.join(profile).join("examples").join("holder"))
        .filter_map(|bin| Some((bin.metadata().ok()?.modified().ok()?, bin)))
        .max()
        .map(|(_, bin)| bin)
        .expect("no holder example: cargo build --example holder -p holdline-client")
}

/// `clients/texts.json`, read once.
fn client_table() -> &'static serde_json::Value {
    static TABLE: OnceLock<serde_json::Value> = OnceLock::new();
    TABLE.get_or_init(|| {
        let path = repo_root().join("clients/texts.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    })
}

/// A number of the rules every client shares (`clients/texts.json`).
pub fn client_rule(name: &str) -> u64 {
    client_table()["rules"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("clients/texts.json has no number rule {name}"))
}

/// The client-made texts every client shares (`clients/texts.json`).
pub fn client_text(name: &str) -> String {
    client_table()["texts"][name]
        .as_str()
        .unwrap_or_else(|| panic!("clients/texts.json has no text {name}"))
        .to_owned()
}

/// `name`'s text with each `{placeholder}` replaced.
pub fn expected_text(name: &str, vars: &[(&str, &str)]) -> String {
    let mut text = client_text(name);
    // Every placeholder is given (checked before filling: a value, such as
    // a shown `\u{7}`, may hold braces of its own).
    for field in text.split('{').skip(1).filter_map(|s| s.split_once('}')) {
        let placeholder = field.0;
        let given = vars.iter().any(|(k, _)| *k == placeholder);
        let literal = name == "bad_address"; // `[[user]:token@]` is no placeholder
        assert!(
            given || literal || placeholder.contains(['[', ' ']),
            "unfilled {{{placeholder}}} of {name}"
        );
    }
    for (k, v) in vars {
        text = text.replace(&format!("{{{k}}}"), v);
    }
    text
}

/// Asserts that `actual` is `name`'s text with `vars` filled in and any
/// text at its `{reason}` (the platform's own words).
pub fn assert_text_with_reason(name: &str, vars: &[(&str, &str)], actual: &str) {
    let mut text = client_text(name);
    for (k, v) in vars {
        text = text.replace(&format!("{{{k}}}"), v);
    }
    let (before, after) = text
        .split_once("{reason}")
        .unwrap_or_else(|| panic!("{name} has no {{reason}}"));
    assert!(
        actual.len() > before.len() + after.len()
            && actual.starts_with(before)
            && actual.ends_with(after),
        "{actual:?} is not {text:?}"
    );
}

/// Freezes `proxy`, which carries `held` (lock "frozen", key "k", `ttl`),
/// and checks the loss: the holder's signal fires at least 10 ms before
/// `next_grant` (the instant the next holder was granted the key) and
/// within ttl + 0.5 s of the freeze, and the lease answers `lost_silent`.
pub async fn lost_before_the_next_grant(
    proxy: &Proxy,
    held: &holdline_client::HeldLease,
    next_grant: impl std::future::Future<Output = Instant>,
    ttl: Duration,
) {
    let patience = Duration::from_secs(30);
    let frozen = Instant::now();
    proxy.freeze();
    tokio::time::timeout(patience, held.signal().aborted())
        .await
        .expect("the frozen link loses the lease");
    let lost_at = Instant::now();
    let granted_at = tokio::time::timeout(patience, next_grant).await.unwrap();
    assert!(
        granted_at >= lost_at + Duration::from_millis(10),
        "the holder learnt its loss {:?} after the next holder's grant",
        lost_at.saturating_duration_since(granted_at)
    );
    assert!(
        lost_at - frozen <= ttl + Duration::from_millis(500),
        "lost {:?} after the freeze",
        lost_at - frozen
    );
    let lost = held.check().unwrap_err();
    assert_eq!(lost.kind(), holdline_client::ErrorKind::Lost);
    let ttl_text = holdline::wire::duration_text(ttl);
    let vars = [
        ("lock", "frozen"),
        ("key", "\"k\""),
        ("ttl", ttl_text.as_str()),
    ];
    assert_eq!(lost.to_string(), expected_text("lost_silent", &vars));
}

/// A private cluster (`holdline_testing::cluster`, the one cluster
/// starter): one etcd and several `holdline serve --etcd` nodes on
/// loopback, killed when dropped.
pub struct Cluster {
    cluster: cluster::Cluster,
    pub etcd: String,
    pub nodes: Vec<ClusterNode>,
}

/// One node of a [`Cluster`], as it was when the cluster was ready.
pub struct ClusterNode {
    pub addr: String,
    pub pid: u32,
    /// The slot ranges it served then, inclusive.
    pub slots: Vec<(u16, u16)>,
}

impl Cluster {
    /// `nodes` nodes over `partitions` partitions, etcd leases of
    /// `etcd_ttl` seconds, a cluster max ttl of `max_ttl` (whole
    /// milliseconds: every hold must ask a ttl at most that, and a
    /// partition taken over without a hand-over grants nothing for that
    /// long), ready once every node answers the same settled map; `None`
    /// (saying so) when `/usr/bin/etcd` is missing, unless
    /// `HOLDLINE_REQUIRE_TOOLS=1`, which fails instead.
    pub fn start(
        nodes: usize,
        partitions: u16,
        etcd_ttl: u64,
        max_ttl: Duration,
    ) -> Option<Cluster> {
        if !spawn::etcd_available() {
            return None;
        }
        let max_ttl = format!("{}ms", max_ttl.as_millis());
        let etcd_ttl = format!("{etcd_ttl}s");
        let extra = ["--max-ttl", max_ttl.as_str()];
        let cluster = cluster::Cluster::start(binary(), nodes, partitions, &etcd_ttl, &extra)
            .unwrap_or_else(|why| panic!("the cluster did not start: {why}"));
        let nodes = (0..cluster.nodes.len()).map(|i| ClusterNode {
            addr: cluster.nodes[i].addr.to_string(),
            pid: cluster.nodes[i].child.id(),
            slots: cluster.slots_of(i),
        });
        Some(Cluster {
            etcd: cluster.etcd.url(),
            nodes: nodes.collect(),
            cluster,
        })
    }

    /// The index of the node that served `slot` when the cluster was ready.
    pub fn owner(&self, slot: u16) -> usize {
        self.cluster
            .owner(slot)
            .unwrap_or_else(|| panic!("no node served slot {slot}"))
    }

    /// SIGKILL node `i`: its connections drop at once, nothing answered.
    pub fn kill(&self, i: usize) {
        let pid = self.nodes[i].pid.to_string();
        let status = Command::new("kill").args(["-KILL", &pid]).status().unwrap();
        assert!(status.success(), "kill -KILL {pid}");
    }

    /// SIGTERM node `i`: a planned leave, its partitions (with their
    /// leases and lines) handed over to the nodes left, then it exits.
    pub fn terminate(&self, i: usize) {
        let pid = self.nodes[i].pid.to_string();
        let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(status.success(), "kill -TERM {pid}");
    }

    /// Whether node `i`'s process has exited.
    pub fn exited(&mut self, i: usize) -> bool {
        let child = &mut self.cluster.nodes[i].child;
        child.try_wait().ok().flatten().is_some()
    }
}

/// A scripted node's read of the next command from `sock`, as words;
/// `None` once the client hung up.
pub async fn next_command(
    sock: &mut tokio::net::TcpStream,
    dec: &mut holdline_resp::Decoder,
    buf: &mut bytes::BytesMut,
) -> Option<Vec<String>> {
    use tokio::io::AsyncReadExt;
    loop {
        match dec.decode(buf).unwrap() {
            Some(holdline_resp::Value::Array(args)) => {
                return Some(
                    args.iter()
                        .map(|a| a.as_str().unwrap().to_owned())
                        .collect(),
                )
            }
            Some(other) => panic!("not a command: {other}"),
            None => match sock.read_buf(buf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => continue,
            },
        }
    }
}
