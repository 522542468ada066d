//! What the server's tests share: a real `holdline serve` process on a free
//! loopback port, a small blocking RESP client, and the checks for
//! external tools (`redis-cli`, redis-py).

#![allow(dead_code)]

use bytes::BytesMut;
use holdline_resp::{encode_command, Decoder, Value};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub mod cluster;

// Each test binary uses a part of what it is handed.
#[allow(unused_imports)]
pub use holdline_testing::spawn::{self, tool_available, PATIENCE};

/// A file written for one test (a token, a users file) in a folder of its
/// own, removed when dropped.
pub struct TempFile {
    dir: std::path::PathBuf,
    /// The file's path, as a flag takes it.
    pub path: String,
}

impl TempFile {
    pub fn new(name: &str, text: &str) -> TempFile {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static MADE: AtomicUsize = AtomicUsize::new(0);
        // Relaxed: the count only has to be unique.
        let n = MADE.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("holdline-test-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let path = path.to_str().expect("a UTF-8 temp dir").to_owned();
        TempFile { dir, path }
    }

    /// Writes the file again.
    pub fn write(&self, text: &str) {
        std::fs::write(&self.path, text).unwrap();
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A running `holdline serve`, killed when dropped: the shared starter's
/// process (its `child`, `addr` and `metrics` read through it).
pub struct Server(pub spawn::Holdline);

impl std::ops::Deref for Server {
    type Target = spawn::Holdline;

    fn deref(&self) -> &spawn::Holdline {
        &self.0
    }
}

impl std::ops::DerefMut for Server {
    fn deref_mut(&mut self) -> &mut spawn::Holdline {
        &mut self.0
    }
}

impl Server {
    /// Starts `holdline serve --listen 127.0.0.1:0 EXTRA...` and reads the
    /// port it printed.
    pub fn start(extra: &[&str]) -> Server {
        let mut args = vec!["--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        Server::serve(&args)
    }

    /// Starts `holdline serve ARGS...` and reads the address it printed
    /// (and the metrics' address, with `--metrics`).
    pub fn serve(args: &[&str]) -> Server {
        let bin = std::path::Path::new(env!("CARGO_BIN_EXE_holdline"));
        Server(spawn::Holdline::spawn(bin, args).unwrap_or_else(|why| panic!("{why}")))
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn port(&self) -> String {
        self.addr.port().to_string()
    }

    pub fn connect(&self) -> Client {
        Client::connect(self.addr)
    }

    /// The server's resident memory, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }

    /// Asserts that the server's resident memory grew by less than
    /// `slack_kib` since it read `before_kib`.
    pub fn assert_rss_within(&self, before_kib: u64, slack_kib: u64) {
        let after_kib = self.rss_kib();
        assert!(
            after_kib < before_kib + slack_kib,
            "RSS went from {before_kib} KiB to {after_kib} KiB"
        );
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        let rc = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(rc, 0, "kill failed");
    }

    /// Waits for the process to end, answering its exit status.
    pub fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the server did not exit within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A blocking RESP client, as plain as a test needs.
pub struct Client {
    pub stream: TcpStream,
    buf: BytesMut,
    decoder: Decoder,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).unwrap();
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        Client {
            stream,
            buf: BytesMut::new(),
            decoder: Decoder::new(usize::MAX),
        }
    }

    /// Sends a command without reading its answer.
    pub fn send(&mut self, args: &[&str]) {
        let mut out = Vec::new();
        encode_command(args, &mut out);
        self.raw(&out);
    }

    pub fn raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// Sends a command and reads one answer (pushes come first if any).
    pub fn call(&mut self, args: &[&str]) -> Value {
        self.send(args);
        self.read()
    }

    /// One value, or `None` if nothing whole came within `within`.
    pub fn read_within(&mut self, within: Duration) -> Option<Value> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(v) = self.decoder.decode(&mut self.buf).expect("a valid answer") {
                return Some(v);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.stream.set_read_timeout(Some(left)).unwrap();
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => panic!("the server closed the connection"),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return None
                }
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    pub fn read(&mut self) -> Value {
        self.read_within(PATIENCE).expect("an answer in time")
    }

    /// Reads until the server closes; answers what came before.
    pub fn read_to_close(&mut self) -> Vec<Value> {
        let mut values = Vec::new();
        self.stream.set_read_timeout(Some(PATIENCE)).unwrap();
        loop {
            while let Some(v) = self.decoder.decode(&mut self.buf).expect("a valid answer") {
                values.push(v);
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => return values,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return values,
                Err(e) => panic!("read: {e} (the server did not close)"),
            }
        }
    }

    /// `HOLD`/`TRYHOLD` answered a grant: `(lease, fence)`.
    pub fn grant(&mut self, args: &[&str]) -> (i64, i64) {
        match self.call(args) {
            Value::Array(pair) if pair.len() == 2 => {
                (pair[0].as_integer().unwrap(), pair[1].as_integer().unwrap())
            }
            other => panic!("{args:?} answered {other:?}"),
        }
    }

    /// `STATS lock` as (name, count) pairs, whichever protocol.
    pub fn stats(&mut self, lock: &str) -> Vec<(String, i64)> {
        let flat = match self.call(&["STATS", lock]) {
            Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
            Value::Array(items) => items,
            other => panic!("STATS answered {other:?}"),
        };
        flat.chunks(2)
            .map(|kv| {
                (
                    kv[0].as_str().unwrap().to_owned(),
                    kv[1].as_integer().unwrap(),
                )
            })
            .collect()
    }

    pub fn stat(&mut self, lock: &str, name: &str) -> i64 {
        self.stats(lock)
            .into_iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no {name} in STATS"))
            .1
    }

    /// Polls `STATS lock` until `name` reads `want`.
    pub fn await_stat(&mut self, lock: &str, name: &str, want: i64) {
        poll(|| match self.stat(lock, name) {
            got if got == want => Ok(()),
            got => Err(format!("{lock} {name} stayed {got}, not {want}")),
        })
    }
}

/// `key` of `lock` granted to a fresh client, and a second client's
/// `HOLD lock key WAIT wait_ms` sent behind it, not yet answered: the
/// holder, its lease and the waiter.
pub fn queue_behind(
    server: &Server,
    lock: &str,
    key: &str,
    wait_ms: &str,
) -> (Client, i64, Client) {
    let mut holder = server.connect();
    let (lease, _) = holder.grant(&["HOLD", lock, key]);
    let mut waiter = server.connect();
    waiter.send(&["HOLD", lock, key, "WAIT", wait_ms]);
    (holder, lease, waiter)
}

/// The value under `name` in a RESP3 map's pairs.
pub fn map_field(map: &[(Value, Value)], name: &str) -> Option<Value> {
    map.iter()
        .find(|(n, _)| n.as_str() == Some(name))
        .map(|(_, v)| v.clone())
}

/// `GET path` over HTTP/1.1 with `headers` (each ending `\r\n`): the
/// status, the headers' text and the body.
pub fn http_get(addr: &str, path: &str, headers: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    let status = response.split(' ').nth(1).unwrap().parse().unwrap();
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of the headers in {response:?}"));
    (status, head.to_owned(), body.to_owned())
}

/// Calls `probe` every 10 ms until it answers `Ok`, for at most
/// `PATIENCE`; past that, fails with what its last `Err` said.
pub fn poll<T>(mut probe: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let why = match probe() {
            Ok(done) => return done,
            Err(why) => why,
        };
        assert!(Instant::now() < deadline, "{why}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// An error reply's text, or a panic naming what came instead.
pub fn error_text(v: Value) -> String {
    match v {
        Value::Error(text) => text,
        other => panic!("expected an error, got {other:?}"),
    }
}

/// Whether `program args` runs and exits 0.
pub fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Raises this process's descriptor soft limit to at least `want`;
/// answers whether it now is.
pub fn raise_descriptor_limit(want: u64) -> bool {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write or read only the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return false;
        }
        if lim.rlim_cur >= want {
            return true;
        }
        if lim.rlim_max < want {
            return false;
        }
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0
    }
}
