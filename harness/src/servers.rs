//! The server processes the `server-*` scenarios measure: `holdline serve`
//! and `redis-server`, each started on a loopback port (`testing/spawn.rs`:
//! holdline binds port 0, Redis is tried again when its port was taken), its resident
//! memory read from `/proc`, and killed when dropped (the `cluster` rows'
//! nodes start here too, with their options).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use crate::spawn;

/// The servers, in table order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ServerKind {
    /// `holdline serve`.
    Holdline,
    /// `redis-server` with the single-instance lock recipe.
    Redis,
}

impl ServerKind {
    pub const ALL: [ServerKind; 2] = [ServerKind::Holdline, ServerKind::Redis];

    /// The name in tables (`holdline`, so ratios read against it as for the designs).
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Holdline => "holdline",
            ServerKind::Redis => "redis",
        }
    }

    /// Waiters are granted in arrival order (Redis clients poll: no line).
    pub fn fifo(self) -> bool {
        self == ServerKind::Holdline
    }

    /// The program to start, or why there is none and how to get it.
    pub fn binary(self) -> Result<PathBuf, Missing> {
        match self {
            ServerKind::Holdline => holdline_binary(),
            ServerKind::Redis => redis_binary(),
        }
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

/// A started server; killed and reaped when dropped.
pub struct ServerProcess {
    child: Child,
    pub addr: SocketAddr,
}

impl ServerProcess {
    pub fn start(kind: ServerKind) -> Result<ServerProcess, String> {
        let bin = kind.binary().map_err(|m| m.how)?;
        match kind {
            ServerKind::Holdline => start_holdline(&bin),
            ServerKind::Redis => start_redis(&bin),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
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
        let _ = self.child.kill();
        let _ = self.child.wait();
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
        Ok(ServerProcess { child, addr })
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
                child,
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
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
