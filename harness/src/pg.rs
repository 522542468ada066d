//! A private PostgreSQL cluster for the server rows: Debian's server
//! binaries (`apt-get install postgresql`: `/usr/lib/postgresql/N/bin`),
//! `initdb` into a fresh data directory of its own, then `postgres` on a
//! loopback port (another tried when its log says the port was taken),
//! fsync off (advisory locks write nothing). PostgreSQL refuses to run as
//! root: under root both run as the `postgres` user (the data directory
//! is then that user's), as `runuser -u postgres` would run them. Never
//! the system's cluster or service.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::procs::is_root;
use crate::spawn;

/// Where Debian puts each major version's server binaries.
const DEBIAN_ROOT: &str = "/usr/lib/postgresql";

/// The user the server runs as when the harness runs as root.
const SERVER_USER: &str = "postgres";

/// Connections the cluster accepts: the 400 of the memory row and more.
pub const MAX_CONNECTIONS: usize = 450;

/// How to get PostgreSQL, for a row that cannot start it.
pub const INSTALL: &str = "apt-get install -y --no-install-recommends postgresql";

/// The folder holding `postgres` and `initdb`: `$PG_BINDIR`, else the
/// newest `/usr/lib/postgresql/N/bin` that has both; else how to get one.
pub fn bindir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("PG_BINDIR") {
        let dir = PathBuf::from(dir);
        return if has_server(&dir) {
            Ok(dir)
        } else {
            Err(format!(
                "PG_BINDIR={}: no postgres and initdb there; install PostgreSQL \
                 (`{INSTALL}` on Debian)",
                dir.display()
            ))
        };
    }
    newest_in(Path::new(DEBIAN_ROOT)).ok_or_else(|| {
        format!(
            "no PostgreSQL server under {DEBIAN_ROOT}: install it (`{INSTALL}` on Debian; \
             the harness makes its own cluster with initdb, never the system's) or point \
             PG_BINDIR at its bin folder"
        )
    })
}

fn has_server(dir: &Path) -> bool {
    dir.join("postgres").is_file() && dir.join("initdb").is_file()
}

/// The `N/bin` under `root` with the highest major version `N` that has a server.
fn newest_in(root: &Path) -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let n: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            has_server(&bin).then_some((n, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// A user's uid and gid, from `/etc/passwd`.
fn user_ids(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 3 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

/// `cmd` as PostgreSQL must run: not as root (as [`SERVER_USER`] when
/// this process is root), messages in English (the harness reads its log).
fn server_command(bin: &Path) -> Result<Command, String> {
    let mut cmd = Command::new(bin);
    cmd.current_dir("/").env("LC_ALL", "C").env_remove("PGDATA");
    if is_root() {
        use std::os::unix::process::CommandExt;
        let (uid, gid) = user_ids(SERVER_USER).ok_or_else(|| {
            format!(
                "running as root, PostgreSQL needs an unprivileged user: no `{SERVER_USER}` \
                 user (Debian's postgresql package makes one)"
            )
        })?;
        cmd.uid(uid).gid(gid);
    }
    Ok(cmd)
}

/// A running cluster; stopped (a fast shutdown) and its data removed when dropped.
pub struct Postgres {
    child: Option<Child>,
    dir: PathBuf,
    pub port: u16,
}

impl Postgres {
    /// `initdb` into a fresh directory, then `postgres` on a free port.
    pub fn start(bindir: &Path) -> Result<Postgres, String> {
        static STARTS: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "holdline-pg-{}-{}",
            std::process::id(),
            STARTS.fetch_add(1, Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let mut pg = Postgres {
            child: None,
            dir,
            port: 0,
        };
        pg.initdb(bindir)?;
        let child = spawn::on_ports_to_try(|port, _| {
            pg.launch(bindir, port).map(|c| c.map(|c| (c, port)))
        })?;
        pg.port = child.1;
        pg.child = Some(child.0);
        Ok(pg)
    }

    /// The postmaster's pid (its backends are its children).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    fn initdb(&self, bindir: &Path) -> Result<(), String> {
        let mut cmd = server_command(&bindir.join("initdb"))?;
        cmd.arg("-D")
            .arg(&self.dir)
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C"])
            .arg("--no-sync")
            .stdin(Stdio::null());
        let out = cmd
            .output()
            .map_err(|e| format!("cannot run initdb: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        Err(format!(
            "initdb -D {} failed ({}): {}",
            self.dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }

    /// `postgres` on `port`: `None` when its log said the port was taken.
    fn launch(&self, bindir: &Path, port: u16) -> Result<Option<Child>, String> {
        let mut cmd = server_command(&bindir.join("postgres"))?;
        let max = format!("max_connections={MAX_CONNECTIONS}");
        cmd.arg("-D")
            .arg(&self.dir)
            .args(["-p", &port.to_string()])
            .arg("-k")
            .arg(&self.dir)
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(["-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
            .args(["-c", &max]);
        match spawn::launch(cmd, true, "ready to accept connections") {
            spawn::Launch::Ready(child) => Ok(Some(child)),
            spawn::Launch::PortTaken => Ok(None),
            spawn::Launch::Failed(why) => Err(format!("postgres: {why}")),
        }
    }

    /// The connection string of its superuser, over TCP.
    pub fn conninfo(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGINT: a fast shutdown (backends told to end, shared memory
            // given back); SIGKILL only if that takes too long.
            if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                // SAFETY: kill sends a signal to our own child; no memory is passed.
                unsafe { libc::kill(pid, libc::SIGINT) };
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_version_with_a_server_is_picked() {
        let root =
            std::env::temp_dir().join(format!("holdline-pg-versions-{}", std::process::id()));
        for (v, server) in [("13", true), ("15", true), ("16", false)] {
            let bin = root.join(v).join("bin");
            std::fs::create_dir_all(&bin).unwrap();
            if server {
                std::fs::write(bin.join("postgres"), "").unwrap();
                std::fs::write(bin.join("initdb"), "").unwrap();
            }
        }
        assert_eq!(newest_in(&root), Some(root.join("15").join("bin")));
        assert_eq!(newest_in(&root.join("none")), None);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_taken_port_is_told_apart_from_a_failure() {
        let Ok(bin) = bindir() else {
            eprintln!("skipped: no PostgreSQL");
            return;
        };
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let pg = Postgres {
            child: None,
            dir: std::env::temp_dir().join(format!("holdline-pg-taken-{}", std::process::id())),
            port: 0,
        };
        pg.initdb(&bin).unwrap();
        // Its log says the address is in use: the caller tries another port.
        assert!(matches!(pg.launch(&bin, port), Ok(None)));
        drop(taken);
        let mut child = pg
            .launch(&bin, port)
            .unwrap()
            .expect("the port is free now");
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn the_server_user_is_read_from_passwd() {
        assert_eq!(user_ids("root"), Some((0, 0)));
        assert_eq!(user_ids("no-such-user-here"), None);
    }
}
