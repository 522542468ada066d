//! The clients users already have: `redis-cli` (Debian's redis-tools) and
//! redis-py, with their default options, drive HOLD, TRYHOLD, RELEASE and
//! STATS. Missing tools skip with a note, or fail under
//! `HOLDLINE_REQUIRE_TOOLS=1` (CI).

mod common;

use common::{Server, PATIENCE};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;

fn redis_cli_present() -> bool {
    common::tool_available("redis-cli", common::runs("redis-cli", &["--version"]))
}

/// One-shot `redis-cli --no-raw -p PORT ARGS...`: its output, trimmed.
fn redis_cli(server: &Server, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["--no-raw", "-p", &server.port()])
        .args(args)
        .output()
        .expect("run redis-cli");
    assert!(out.status.success(), "redis-cli {args:?} failed: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A `redis-cli` fed commands one line at a time on one connection.
struct Session {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Session {
    fn start(server: &Server) -> Session {
        let mut child = Command::new("redis-cli")
            .args(["--no-raw", "-p", &server.port()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run redis-cli");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                if tx.send(line.unwrap()).is_err() {
                    break;
                }
            }
        });
        Session {
            child,
            stdin,
            lines,
        }
    }

    /// Sends `command` and answers the next `n` lines it prints.
    fn run(&mut self, command: &str, n: usize) -> Vec<String> {
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
        (0..n)
            .map(|_| {
                self.lines
                    .recv_timeout(PATIENCE)
                    .expect("redis-cli answered")
            })
            .collect()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `1) (integer) 42` -> 42
fn integer_line(line: &str) -> i64 {
    line.rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("{line:?}"))
}

#[test]
fn redis_cli_drives_hold_tryhold_release_and_stats() {
    if !redis_cli_present() {
        return;
    }
    let server = Server::start(&[]);
    let mut holder = Session::start(&server);
    let grant = holder.run("HOLD invoices 9", 2);
    let lease = integer_line(&grant[0]);
    let fence = integer_line(&grant[1]);
    assert!(
        grant[0].starts_with("1) (integer) ") && grant[1].starts_with("2) (integer) "),
        "{grant:?}"
    );

    assert_eq!(redis_cli(&server, &["TRYHOLD", "invoices", "9"]), "(nil)");
    assert_eq!(
        redis_cli(&server, &["HOLD", "invoices", "9", "WAIT", "0"]),
        "(error) INUSE lock invoices: key \"9\": held past the hold's wait: in use"
    );
    // Fourteen lines: redis-cli pads the indexes to two columns.
    let stats = holder.run("STATS invoices", 14);
    assert_eq!(stats[0].trim(), "1) \"live_keys\"");
    assert_eq!(stats[2].trim(), "3) \"held_keys\"");
    assert_eq!(stats[3].trim(), "4) (integer) 1");

    // A redis-cli waiting in line gets the key when the holder lets go.
    let waiter = Command::new("redis-cli")
        .args([
            "--no-raw",
            "-p",
            &server.port(),
            "HOLD",
            "invoices",
            "9",
            "WAIT",
            "20000",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    server.connect().await_stat("invoices", "waiters", 1);
    assert_eq!(holder.run(&format!("RELEASE {lease}"), 1), ["OK"]);
    let out = waiter.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(integer_line(lines[1]) > fence, "{text}");

    // RESP3 (`-3`): STATS is a map.
    let map = redis_cli(&server, &["-3", "STATS", "invoices"]);
    assert!(map.starts_with("1# \"live_keys\" => (integer) "), "{map}");
    assert_eq!(
        holder.run(&format!("RELEASE {lease}"), 1),
        [format!(
            "(error) INVALID store: lease {lease} is not held by this connection: invalid"
        )]
    );
}

#[test]
fn redis_py_with_default_options() {
    let present = common::runs("python3", &["-c", "import redis"]);
    if !common::tool_available("python3 with the redis module (pip install redis)", present) {
        return;
    }
    let server = Server::start(&[]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/redis_py_client.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(server.port())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "redis-py checks failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
