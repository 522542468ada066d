//! The processes tests start, with no port picked for them and then bound
//! (another test could take it in between and be talked to instead):
//! `holdline serve` binds port 0 and prints its address, which is read
//! here; etcd and redis-server cannot say which port they got, so they
//! get ports picked here and are started again on others when one was
//! taken (each says so in its log, read here).
//!
//! Standard library only. Used by each crate that starts processes (the
//! server's and the Rust client's tests, the harness).

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a process may take to start or a test to be answered before
/// it gives up: far above what a loaded 2-core machine needs, so only a
/// hang trips it.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Whether a test needing `tool` may run: `false` (with a note) when it is
/// missing, unless `HOLDLINE_REQUIRE_TOOLS=1` (CI), which fails instead.
pub fn tool_available(tool: &str, present: bool) -> bool {
    if present {
        return true;
    }
    if std::env::var("HOLDLINE_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!("{tool} is required (HOLDLINE_REQUIRE_TOOLS=1) but missing");
    }
    eprintln!("note: {tool} is missing; skipping this test (set HOLDLINE_REQUIRE_TOOLS=1 to fail instead)");
    false
}

/// Whether etcd may be started (CI installs Debian's `etcd-server`).
pub fn etcd_available() -> bool {
    tool_available("etcd (Debian's etcd-server)", Path::new(ETCD).exists())
}

/// The line `holdline serve` prints first.
const LISTENING: &str = "holdline: listening on ";
/// The line it prints next with `--metrics`.
const METRICS: &str = "holdline: metrics on http://";

/// A `holdline serve` process, killed when dropped.
pub struct Holdline {
    pub child: Child,
    /// Where it listens, from the line it printed.
    pub addr: SocketAddr,
    /// Where its metrics listen, with `--metrics`.
    pub metrics: Option<SocketAddr>,
}

impl Holdline {
    /// Starts `bin serve ARGS...` (ARGS name `--listen HOST:0`) with its
    /// log at `HOLDLINE_LOG` (default `warn`) on this process's stderr,
    /// and reads the address it printed (and the metrics' one, when ARGS
    /// name `--metrics`).
    pub fn spawn(bin: &Path, args: &[&str]) -> Result<Holdline, String> {
        let (child, addr, metrics) = spawn_holdline(bin, args)?;
        Ok(Holdline {
            child,
            addr,
            metrics,
        })
    }
}

/// What [`Holdline::spawn`] does, answering the process as it is (for a
/// starter with its own wrapper).
pub fn spawn_holdline(
    bin: &Path,
    args: &[&str],
) -> Result<(Child, SocketAddr, Option<SocketAddr>), String> {
    let mut child = Command::new(bin)
        .arg("serve")
        .args(args)
        .env(
            "HOLDLINE_LOG",
            std::env::var("HOLDLINE_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let started = (|| -> Result<_, String> {
        let addr = read_address(&mut out, LISTENING, "")?;
        let metrics = if args.contains(&"--metrics") {
            Some(read_address(&mut out, METRICS, "/metrics")?)
        } else {
            None
        };
        Ok((addr, metrics))
    })();
    match started {
        Ok((addr, metrics)) => Ok((child, addr, metrics)),
        Err(why) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!("holdline serve {}: {why}", args.join(" ")))
        }
    }
}

impl Drop for Holdline {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address on the next line of `out`, which must read `PREFIX ADDR SUFFIX`.
fn read_address(
    out: &mut BufReader<ChildStdout>,
    prefix: &str,
    suffix: &str,
) -> Result<SocketAddr, String> {
    let mut line = String::new();
    out.read_line(&mut line)
        .map_err(|e| format!("reading its stdout: {e}"))?;
    let addr = line
        .trim()
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_suffix(suffix))
        .ok_or_else(|| format!("printed {line:?} where {prefix}ADDR{suffix} was due"))?;
    addr.parse()
        .map_err(|e| format!("printed {line:?}: not an address ({e})"))
}

/// A port free a moment ago, for a server that cannot bind port 0 and say
/// which it got: start it with [`launch`], which tells a port taken in
/// between from any other failure, and try again with another.
fn port_to_try() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// How a start read from the process's own output ended.
pub enum Launch {
    Ready(Child),
    /// Its log said the port was taken: try others.
    PortTaken,
    Failed(String),
}

/// Starts `cmd` and reads its `stream` (stdout or stderr, whichever its
/// log goes to) until a line contains `ready` (answers the child; the
/// rest of the log is read and dropped so a full pipe never stalls it),
/// a line contains "already in use" (the port was taken), it exits, or
/// [`PATIENCE`] passes.
pub fn launch(mut cmd: Command, from_stderr: bool, ready: &str) -> Launch {
    cmd.stdin(Stdio::null());
    if from_stderr {
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    } else {
        cmd.stdout(Stdio::piped()).stderr(Stdio::null());
    }
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return Launch::Failed(format!("cannot start {:?}: {e}", cmd.get_program())),
    };
    let log: Box<dyn Read + Send> = match (child.stdout.take(), child.stderr.take()) {
        (Some(out), _) => Box::new(out),
        (None, Some(err)) => Box::new(err),
        (None, None) => unreachable!("one stream is piped"),
    };
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(log).lines() {
            let Ok(line) = line else { return };
            // Once the starter stopped listening, lines are only drained.
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + PATIENCE;
    let mut tail = Vec::new();
    let outcome = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left.min(Duration::from_millis(100))) {
            Ok(line) if line.contains(ready) => return Launch::Ready(child),
            Ok(line) if line.to_ascii_lowercase().contains("already in use") => {
                break Launch::PortTaken
            }
            Ok(line) => tail.push(line),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) if left.is_zero() => {
                break Launch::Failed(format!("no {ready:?} within {PATIENCE:?}"))
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                break Launch::Failed("it exited".into())
            }
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    match outcome {
        Launch::Failed(why) => {
            let start = tail.len().saturating_sub(5);
            Launch::Failed(format!(
                "{why}; its last lines: {}",
                tail[start..].join(" | ")
            ))
        }
        other => other,
    }
}

/// `start(port_a, port_b)` with fresh ports until its log does not say one
/// was taken (five tries).
pub fn on_ports_to_try<T>(
    mut start: impl FnMut(u16, u16) -> Result<Option<T>, String>,
) -> Result<T, String> {
    for _ in 0..5 {
        if let Some(started) = start(port_to_try(), port_to_try())? {
            return Ok(started);
        }
    }
    Err("five tries each found a port taken".into())
}

/// Debian's etcd (`apt-get install etcd-server`).
pub const ETCD: &str = "/usr/bin/etcd";

/// One etcd member on loopback with a data directory of its own (never
/// the system service), killed and its directory removed when dropped.
pub struct Etcd {
    child: Option<Child>,
    dir: PathBuf,
    pub client_port: u16,
    pub peer_port: u16,
    extra: Vec<String>,
    /// Clients reach it over TLS (its flags in `extra` say how).
    https: bool,
}

impl Etcd {
    /// A member on free ports (others tried when one was taken).
    pub fn start() -> Result<Etcd, String> {
        Etcd::start_with(&[])
    }

    /// A member with more flags (`--election-timeout 200`).
    pub fn start_with(extra: &[&str]) -> Result<Etcd, String> {
        Etcd::start_as(extra, false)
    }

    /// A member whose clients speak TLS: `extra` names its certificate
    /// and key (`--cert-file`, `--key-file`, `--trusted-ca-file`,
    /// `--client-cert-auth`); its URL is `https://`.
    pub fn start_tls(extra: &[&str]) -> Result<Etcd, String> {
        Etcd::start_as(extra, true)
    }

    fn start_as(extra: &[&str], https: bool) -> Result<Etcd, String> {
        // Its fsyncs are cheap in memory, where there is a /dev/shm.
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        on_ports_to_try(|client_port, peer_port| {
            let mut etcd = Etcd {
                child: None,
                dir: base.join(format!(
                    "holdline-etcd-{}-{client_port}",
                    std::process::id()
                )),
                client_port,
                peer_port,
                extra: extra.iter().map(|s| s.to_string()).collect(),
                https,
            };
            Ok(etcd.launch()?.then_some(etcd))
        })
    }

    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// Starts it again on the same ports and data (after [`Etcd::kill`]).
    pub fn restart(&mut self) -> Result<(), String> {
        match self.launch()? {
            true => Ok(()),
            false => Err(format!(
                "etcd's port {} was taken while it was down",
                self.client_port
            )),
        }
    }

    /// Starts the process: false when its log said a port was taken.
    fn launch(&mut self) -> Result<bool, String> {
        let client = self.url();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut cmd = Command::new(ETCD);
        cmd.args(["--name", "test", "--data-dir"])
            .arg(&self.dir)
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("test={peer}")])
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .args(&self.extra);
        match launch(cmd, true, "serving client traffic") {
            Launch::Ready(child) => {
                self.child = Some(child);
                Ok(true)
            }
            Launch::PortTaken => Ok(false),
            Launch::Failed(why) => Err(format!("etcd: {why}")),
        }
    }

    /// SIGKILL: etcd is gone until [`Etcd::restart`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
