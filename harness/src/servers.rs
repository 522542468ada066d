//! The server processes the `server-*` scenarios measure: `holdline serve`
//! (with its history as it ships, off, or also written to an audit log),
//! `redis-server`, an etcd member and a PostgreSQL cluster, each started
//! on a loopback port (`holdline_testing::spawn`: holdline binds port 0; Redis,
//! etcd and PostgreSQL are tried again on other ports when theirs was
//! taken), its resident memory and CPU time read from `/proc`, and
//! stopped when dropped (the `cluster` rows' nodes start here too, with
//! their options).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use crate::pg::{self, Postgres};
use crate::procs;
use crate::spawn;

/// The servers, in table order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ServerKind {
    /// `holdline serve`, its history on (as it ships: the last 10,000 events).
    Holdline,
    /// `redis-server` with the single-instance lock recipe.
    Redis,
    /// An etcd member, locked through etcd v3's Lock and Unlock RPCs.
    Etcd,
    /// A PostgreSQL cluster, locked with session advisory locks.
    Postgres,
    /// `holdline serve --history 0`: no history kept.
    HistoryOff,
    /// `holdline serve --audit-log FILE`: history kept and written to a file too.
    AuditLog,
    /// `$HOLDLINE_BASE_BIN serve`: another build of holdline (the one
    /// before a change), run beside the current one when that is set.
    Baseline,
}

impl ServerKind {
    /// The lock servers a user picks between, in the rows' order.
    pub const ALL: [ServerKind; 4] = [
        ServerKind::Holdline,
        ServerKind::Redis,
        ServerKind::Etcd,
        ServerKind::Postgres,
    ];

    /// holdline's history settings, in the `server-history` rows' order
    /// (history off first: the others read against it).
    pub const HISTORY: [ServerKind; 3] = [
        ServerKind::HistoryOff,
        ServerKind::Holdline,
        ServerKind::AuditLog,
    ];

    /// The name in tables (`holdline`, so ratios read against it as for the designs).
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Holdline => "holdline",
            ServerKind::Redis => "redis",
            ServerKind::Etcd => "etcd",
            ServerKind::Postgres => "postgres",
            ServerKind::HistoryOff => "history-off",
            ServerKind::AuditLog => "audit-log",
            ServerKind::Baseline => "holdline-base",
        }
    }

    /// Waiters are granted in arrival order (Redis clients poll: no line;
    /// etcd grants by revision; PostgreSQL's lock manager queues waiters).
    pub fn fifo(self) -> bool {
        self != ServerKind::Redis
    }

    /// A `holdline serve` (of any history setting).
    pub fn is_holdline(self) -> bool {
        matches!(
            self,
            ServerKind::Holdline
                | ServerKind::HistoryOff
                | ServerKind::AuditLog
                | ServerKind::Baseline
        )
    }

    /// Another project's server: under `HOLDLINE_REQUIRE_TOOLS=1` its
    /// absence fails the row rather than making it n/a.
    pub fn is_peer(self) -> bool {
        !self.is_holdline()
    }

    /// The program to start (PostgreSQL: its bin folder), or why there is
    /// none and how to get it.
    pub fn binary(self) -> Result<PathBuf, Missing> {
        match self {
            ServerKind::Redis => redis_binary(),
            ServerKind::Etcd => etcd_binary(),
            ServerKind::Postgres => pg::bindir().map_err(|how| Missing {
                na: "postgresql missing",
                how,
            }),
            ServerKind::Baseline => baseline_binary(),
            _ => holdline_binary(),
        }
    }

    /// Whether `$HOLDLINE_BASE_BIN` names a second holdline to run beside
    /// the current one (the rows then alternate the two).
    pub fn baseline_set() -> bool {
        std::env::var_os("HOLDLINE_BASE_BIN").is_some()
    }
}

/// `$HOLDLINE_BASE_BIN`: the build a change is measured against.
fn baseline_binary() -> Result<PathBuf, Missing> {
    match std::env::var_os("HOLDLINE_BASE_BIN") {
        Some(p) => holdline_at(PathBuf::from(p)),
        None => Err(Missing {
            na: "no baseline",
            how: "set HOLDLINE_BASE_BIN to another holdline binary to run it beside this one"
                .into(),
        }),
    }
}

/// A server that cannot be started here: a short reason for the row's `na`,
/// and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missing {
    pub na: &'static str,
    pub how: String,
}

/// `$HOLDLINE_BIN`, else `release/holdline` under the target folder, else
/// (so that `cargo test` finds the one it built) `debug/holdline`, which
/// [`is_debug_build`] tells apart.
fn holdline_binary() -> Result<PathBuf, Missing> {
    if let Some(p) = std::env::var_os("HOLDLINE_BIN") {
        return holdline_at(PathBuf::from(p));
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace_path("target"));
    let release = target.join("release").join("holdline");
    let debug = target.join("debug").join("holdline");
    holdline_at(release).or_else(|missing| holdline_at(debug).map_err(|_| missing))
}

/// A `holdline` from a debug build: its rows say so, their numbers mean little.
pub fn is_debug_build(path: &Path) -> bool {
    path.parent()
        .and_then(Path::file_name)
        .is_some_and(|dir| dir == "debug")
}

/// `path` when it is a file; else why not and how to build one.
fn holdline_at(path: PathBuf) -> Result<PathBuf, Missing> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(Missing {
            na: "holdline binary missing",
            how: format!(
                "no holdline binary at {}: build it with `cargo build --release --bin holdline`, \
                 or point HOLDLINE_BIN at one",
                path.display()
            ),
        })
    }
}

/// `$REDIS_SERVER`, else `redis-server` on the PATH (or in /usr/bin, /usr/sbin).
fn redis_binary() -> Result<PathBuf, Missing> {
    if let Some(p) = std::env::var_os("REDIS_SERVER") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            // Said as for no redis-server at all, with where it looked.
            redis_in([]).map_err(|m| Missing {
                how: format!("REDIS_SERVER={}: no such file; {}", p.display(), m.how),
                ..m
            })
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    redis_in(
        std::env::split_paths(&path).chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")]),
    )
}

/// `redis-server` in the first of `dirs` that has one.
fn redis_in(dirs: impl IntoIterator<Item = PathBuf>) -> Result<PathBuf, Missing> {
    dirs.into_iter()
        .map(|dir| dir.join("redis-server"))
        .find(|p| p.is_file())
        .ok_or_else(|| Missing {
            na: "redis-server missing",
            how: "redis-server not found: install Redis 7 (`apt-get install redis-server` on \
                  Debian/Ubuntu) or point REDIS_SERVER at one; holdline's rows run alone"
                .into(),
        })
}

/// Debian's etcd (`apt-get install etcd-server`).
const ETCD: &str = spawn::ETCD;

/// `/usr/bin/etcd`, or why there is none and how to get it.
pub fn etcd_binary() -> Result<PathBuf, Missing> {
    etcd_at(Path::new(ETCD))
}

fn etcd_at(path: &Path) -> Result<PathBuf, Missing> {
    if path.is_file() {
        return Ok(path.to_path_buf());
    }
    Err(Missing {
        na: "etcd missing",
        how: format!(
            "no etcd at {}: install Debian's etcd-server (`apt-get install etcd-server`; \
             the harness starts its own member on free loopback ports, never the system's \
             service)",
            path.display()
        ),
    })
}

/// `HOLDLINE_REQUIRE_TOOLS=1` (CI): a missing tool fails rather than skips.
pub fn tools_required() -> bool {
    std::env::var("HOLDLINE_REQUIRE_TOOLS").as_deref() == Ok("1")
}

/// What runs: a process of its own, an etcd member, a PostgreSQL cluster.
enum Process {
    Child(Child),
    Etcd(spawn::Etcd),
    Postgres(Postgres),
}

/// A started server; stopped (and its data removed) when dropped.
pub struct ServerProcess {
    process: Process,
    pub addr: SocketAddr,
    /// `--audit-log`'s file, removed when dropped.
    pub audit_log: Option<PathBuf>,
}

impl ServerProcess {
    pub fn start(kind: ServerKind) -> Result<ServerProcess, String> {
        let bin = kind.binary().map_err(|m| m.how)?;
        match kind {
            ServerKind::Holdline | ServerKind::Baseline => start_holdline(&bin),
            ServerKind::Redis => start_redis(&bin),
            ServerKind::Etcd => {
                let etcd = holdline_testing::cluster::start_etcd()?;
                Ok(ServerProcess {
                    addr: SocketAddr::from(([127, 0, 0, 1], etcd.client_port)),
                    process: Process::Etcd(etcd),
                    audit_log: None,
                })
            }
            ServerKind::Postgres => {
                let pg = Postgres::start(&bin)?;
                Ok(ServerProcess {
                    addr: SocketAddr::from(([127, 0, 0, 1], pg.port)),
                    process: Process::Postgres(pg),
                    audit_log: None,
                })
            }
            ServerKind::HistoryOff => ServerProcess::holdline(&bin, &["--history", "0"]),
            ServerKind::AuditLog => {
                static LOGS: AtomicUsize = AtomicUsize::new(0);
                let log = std::env::temp_dir().join(format!(
                    "holdline-audit-{}-{}.log",
                    std::process::id(),
                    LOGS.fetch_add(1, Relaxed)
                ));
                let path = log.display().to_string();
                let mut server = ServerProcess::holdline(&bin, &["--audit-log", &path])?;
                server.audit_log = Some(log);
                Ok(server)
            }
        }
    }

    /// The server's process (PostgreSQL: the postmaster, its backends below it).
    pub fn pid(&self) -> u32 {
        match &self.process {
            Process::Child(child) => child.id(),
            Process::Etcd(etcd) => etcd.pid().unwrap_or(0),
            Process::Postgres(pg) => pg.pid(),
        }
    }

    /// The PostgreSQL cluster, when that is what runs.
    pub fn postgres(&self) -> Option<&Postgres> {
        match &self.process {
            Process::Postgres(pg) => Some(pg),
            _ => None,
        }
    }

    /// User + system CPU ticks the server has used so far, its child
    /// processes' included (PostgreSQL's backends).
    pub fn cpu_ticks(&self) -> Option<u64> {
        procs::tree_cpu_ticks(self.pid())
    }

    /// Memory the server's processes hold: their proportional set size
    /// (shared pages split among them), in bytes.
    pub fn pss(&self) -> Option<i64> {
        procs::tree_pss(self.pid())
    }

    /// The server's resident memory now (`VmRSS`), in bytes.
    pub fn rss(&self) -> Option<i64> {
        proc_status_kib(self.pid(), "VmRSS:").map(|k| k * 1024)
    }

    /// The most resident memory the server has had (`VmHWM`), in bytes.
    pub fn peak_rss(&self) -> Option<i64> {
        proc_status_kib(self.pid(), "VmHWM:").map(|k| k * 1024)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Process::Child(child) = &mut self.process {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(log) = &self.audit_log {
            let _ = std::fs::remove_file(log);
        }
    }
}

/// A `kB` line of `/proc/PID/status`.
fn proc_status_kib(pid: u32, field: &str) -> Option<i64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].split_whitespace().next()?.parse().ok()
}

/// `holdline serve --listen 127.0.0.1:0`: the port comes from its
/// `holdline: listening on ADDR` line.
fn start_holdline(bin: &Path) -> Result<ServerProcess, String> {
    ServerProcess::holdline(bin, &[])
}

impl ServerProcess {
    /// `holdline serve --listen 127.0.0.1:0 EXTRA...` (a cluster node's
    /// options in `extra`); the address comes from its `holdline:
    /// listening on ADDR` line (its info lines, one per start, would break
    /// into the progress bar: `HOLDLINE_LOG` is `warn` unless set).
    pub fn holdline(bin: &Path, extra: &[&str]) -> Result<ServerProcess, String> {
        let mut args = vec!["--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let (child, addr, _) = spawn::spawn_holdline(bin, &args)?;
        Ok(ServerProcess {
            process: Process::Child(child),
            addr,
            audit_log: None,
        })
    }
}

/// `redis-server` on a free loopback port, nothing saved to disk: Redis
/// takes a port number (its `--port 0` means no TCP at all), so another
/// port is tried when its log says the one picked was taken.
fn start_redis(bin: &Path) -> Result<ServerProcess, String> {
    spawn::on_ports_to_try(|port, _| {
        let mut cmd = Command::new(bin);
        cmd.args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--loglevel", "notice"])
            .args(["--dir", &std::env::temp_dir().display().to_string()]);
        match spawn::launch(cmd, false, "Ready to accept connections") {
            spawn::Launch::Ready(child) => Ok(Some(ServerProcess {
                process: Process::Child(child),
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
                audit_log: None,
            })),
            spawn::Launch::PortTaken => Ok(None),
            spawn::Launch::Failed(why) => Err(format!("redis-server: {why}")),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_status_reads_this_process_memory() {
        let rss = proc_status_kib(std::process::id(), "VmRSS:").expect("VmRSS");
        assert!(rss > 100, "{rss} KiB");
        assert_eq!(proc_status_kib(std::process::id(), "NoSuchField:"), None);
    }

    #[test]
    fn a_missing_holdline_says_how_to_build_it() {
        let m = holdline_at(PathBuf::from("/nonexistent/holdline")).unwrap_err();
        assert_eq!(m.na, "holdline binary missing");
        assert!(
            m.how.contains("cargo build --release --bin holdline"),
            "{}",
            m.how
        );
    }

    #[test]
    fn a_debug_build_is_told_apart() {
        assert!(is_debug_build(Path::new("/w/target/debug/holdline")));
        assert!(!is_debug_build(Path::new("/w/target/release/holdline")));
        assert!(!is_debug_build(Path::new("holdline")));
    }

    #[test]
    fn a_missing_redis_says_how_to_get_it() {
        let m = redis_in([PathBuf::from("/nonexistent")]).unwrap_err();
        assert_eq!(m.na, "redis-server missing");
        assert!(m.how.contains("apt-get install redis-server"), "{}", m.how);
    }

    #[test]
    fn a_missing_etcd_says_how_to_get_it() {
        let m = etcd_at(Path::new("/nonexistent/etcd")).unwrap_err();
        assert_eq!(m.na, "etcd missing");
        assert!(m.how.contains("apt-get install etcd-server"), "{}", m.how);
    }

    #[test]
    fn postgres_starts_as_its_own_cluster_and_is_gone_when_dropped() {
        if ServerKind::Postgres.binary().is_err() {
            eprintln!("skipped: no PostgreSQL");
            return;
        }
        let server = ServerProcess::start(ServerKind::Postgres).expect("postgres starts");
        let (addr, dir) = (server.addr, server.postgres().map(|p| p.conninfo()));
        assert!(dir.unwrap().contains(&format!("port={}", addr.port())));
        assert!(server.cpu_ticks().is_some());
        assert!(server.pss().unwrap() > 1 << 20);
        let pid = server.pid();
        drop(server);
        assert!(
            std::net::TcpStream::connect(addr).is_err(),
            "still listening"
        );
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "still running"
        );
    }

    #[test]
    fn redis_starts_on_a_free_port_and_stops_when_dropped() {
        if redis_binary().is_err() {
            eprintln!("skipped: no redis-server");
            return;
        }
        let server = ServerProcess::start(ServerKind::Redis).expect("redis starts");
        let addr = server.addr;
        assert!(server.rss().unwrap() > 0);
        assert!(server.peak_rss().unwrap() >= server.rss().unwrap() / 2);
        drop(server);
        assert!(
            std::net::TcpStream::connect(addr).is_err(),
            "still listening"
        );
    }
}
