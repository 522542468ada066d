//! A server several teams share (`--users`): each user names only its
//! locks (NOPERM otherwise, for every command that names one), sees and
//! kills only its own connections, reads only its locks in INFO; a brute
//! force is cut off; SIGHUP reads the users again (a token rotated, a
//! user removed: their connections closed); `sha256:HEX` tokens.

mod common;

use common::{error_text, Client, Server, TempFile};
use holdline_resp::Value;
use std::time::Duration;

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789";
const ROOT: &str = "root-token-0123456789";

fn teams() -> (Server, TempFile) {
    let file = TempFile::new(
        "users",
        &format!(
            "# two teams and an operator\n\
         alice {ALICE} locks=team-a.*\n\
         bob   {BOB} locks=team-b.*,shared\n\
         root  {ROOT} admin\n"
        ),
    );
    let server = Server::start(&["--users", &file.path]);
    (server, file)
}

fn login(server: &Server, user: &str, token: &str) -> Client {
    let mut c = server.connect();
    assert_eq!(c.call(&["AUTH", user, token]), Value::ok(), "{user}");
    c
}

fn text(v: Value) -> String {
    match v {
        Value::Bulk(b) => String::from_utf8(b).unwrap(),
        Value::Verbatim(t) | Value::Simple(t) => t,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_user_names_only_its_locks_and_every_command_says_noperm() {
    let (server, _file) = teams();
    let mut alice = login(&server, "alice", ALICE);
    let mut bob = login(&server, "bob", BOB);
    let (_, fence) = alice.grant(&["HOLD", "team-a.jobs", "k"]);
    let (_, bob_fence) = bob.grant(&["HOLD", "team-b.jobs", "k"]);
    assert_eq!(
        bob.call(&[
            "PUT",
            "team-b.jobs",
            "k",
            &bob_fence.to_string(),
            "b-row",
            "1"
        ]),
        Value::ok()
    );
    let refused = |lock: &str| format!("NOPERM user alice may not use lock {lock:?}");
    let fence = fence.to_string();
    let denied: [&[&str]; 7] = [
        &["HOLD", "team-b.jobs", "k"],
        &["TRYHOLD", "payments", "k"],
        &["STATS", "team-b.jobs"],
        &["INSPECT", "team-b.jobs", "k"],
        &["PUT", "team-b.jobs", "k", &fence, "r", "v"],
        &["GET", "b-row"],
        &["DEL", "b-row"],
    ];
    for command in denied {
        let on_row = matches!(command[0], "GET" | "DEL");
        let lock = if on_row { "team-b.jobs" } else { command[1] };
        assert_eq!(
            error_text(alice.call(command)),
            refused(lock),
            "{command:?}"
        );
    }
    // Bob's lock and row are untouched; alice's own work goes on.
    assert_eq!(bob.call(&["GET", "b-row"]), Value::bulk("1"));
    assert!(matches!(
        alice.call(&["STATS", "team-a.jobs"]),
        Value::Array(_) | Value::Map(_)
    ));
    let info = text(alice.call(&["INFO", "locks"]));
    assert!(
        info.contains("lock_team-a.jobs:") && !info.contains("team-b"),
        "{info}"
    );
    let info = text(login(&server, "root", ROOT).call(&["INFO", "locks"]));
    assert!(
        info.contains("lock_team-a.jobs:") && info.contains("lock_team-b.jobs:"),
        "{info}"
    );
}

#[test]
fn a_user_lists_and_kills_only_its_own_connections_and_an_admin_any() {
    let (server, _file) = teams();
    let mut alice = login(&server, "alice", ALICE);
    let mut bob = login(&server, "bob", BOB);
    let bob_id = bob
        .call(&["CLIENT", "ID"])
        .as_integer()
        .unwrap()
        .to_string();
    let (_, fence) = bob.grant(&["HOLD", "team-b.jobs", "k"]);
    let list = text(alice.call(&["CLIENT", "LIST"]));
    assert_eq!(list.lines().count(), 1, "{list}");
    assert!(
        list.contains("user=alice") && !list.contains("user=bob"),
        "{list}"
    );
    // Bob's connection is no client alice knows of.
    assert_eq!(
        alice.call(&["CLIENT", "KILL", "ID", &bob_id]),
        Value::Integer(0)
    );
    assert_eq!(bob.call(&["PING"]), Value::Simple("PONG".into()));
    let mut root = login(&server, "root", ROOT);
    let list = text(root.call(&["CLIENT", "LIST"]));
    assert_eq!(list.lines().count(), 3, "{list}");
    assert_eq!(
        root.call(&["CLIENT", "KILL", "ID", &bob_id]),
        Value::Integer(1)
    );
    let (_, next) = root.grant(&["HOLD", "team-b.jobs", "k", "WAIT", "10000"]);
    assert!(next > fence, "the killed holder's key went to the next");
}

#[test]
fn the_tenth_wrong_auth_closes_the_connection() {
    let (server, _file) = teams();
    let mut c = server.connect();
    let wrong = "WRONGPASS invalid username-password pair or user is disabled.";
    for _ in 0..9 {
        assert_eq!(error_text(c.call(&["AUTH", "alice", BOB])), wrong);
    }
    c.send(&["AUTH", "alice", "guess-number-ten-0123"]);
    assert_eq!(c.read_to_close(), [Value::Error(wrong.into())]);
    // Another connection still authenticates (by name, and through HELLO).
    let mut hello = server.connect();
    let map = hello.call(&["HELLO", "3", "AUTH", "alice", ALICE]);
    assert!(matches!(map, Value::Map(_)), "{map:?}");
    assert_eq!(
        error_text(server.connect().call(&["PING"])),
        "NOAUTH Authentication required."
    );
}

#[test]
fn sighup_reads_the_users_again_and_a_rotated_token_takes_effect() {
    let (server, file) = teams();
    let mut before = login(&server, "alice", ALICE);
    let mut bob = login(&server, "bob", BOB);
    let mut root = login(&server, "root", ROOT);
    let rotated = "alice-token-ROTATED-0123";
    file.write(&format!(
        "alice {rotated} locks=team-a.*\nroot {ROOT} admin\n"
    ));
    server.signal(libc::SIGHUP);
    let deadline = std::time::Instant::now() + common::PATIENCE;
    loop {
        let mut c = server.connect();
        if c.call(&["AUTH", "alice", rotated]) == Value::ok() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new token never worked"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let wrong = "WRONGPASS invalid username-password pair or user is disabled.";
    assert_eq!(
        error_text(server.connect().call(&["AUTH", "alice", ALICE])),
        wrong
    );
    assert_eq!(
        error_text(server.connect().call(&["AUTH", "bob", BOB])),
        wrong
    );
    // The connections of a user removed or given another token are
    // closed; the others stay.
    assert_eq!(before.read_to_close(), []);
    assert_eq!(bob.read_to_close(), []);
    assert_eq!(root.call(&["PING"]), Value::Simple("PONG".into()));
    // A bad file keeps the users there were.
    file.write("alice short\n");
    server.signal(libc::SIGHUP);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        server.connect().call(&["AUTH", "alice", rotated]),
        Value::ok()
    );
}

#[test]
fn a_sha256_token_admits_the_token_it_hashes() {
    // printf %s alice-token-0123456789 | sha256sum
    let hashed = "sha256:965b04f03a8200d4bff70f6df635c1d4d3e9c9a1d164d415efc95b9304bfbaf2";
    let file = TempFile::new("users", &format!("alice {hashed} locks=team-a.*\n"));
    let server = Server::start(&["--users", &file.path]);
    let mut alice = login(&server, "alice", ALICE);
    alice.grant(&["TRYHOLD", "team-a.jobs", "k"]);
    let wrong = "WRONGPASS invalid username-password pair or user is disabled.";
    assert_eq!(
        error_text(server.connect().call(&["AUTH", "alice", hashed])),
        wrong
    );
    assert_eq!(
        error_text(server.connect().call(&["AUTH", "alice", BOB])),
        wrong
    );
    let short = TempFile::new("users", "alice sha256:1ee27d\n");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_holdline"))
        .args(["serve", "--listen", "127.0.0.1:0", "--users", &short.path])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "holdline: --users {}: line 1: user alice: sha256: needs the 64 hex digits \
             of the token's SHA-256\n",
            short.path
        )
    );
}

#[test]
fn a_bad_users_file_stops_the_start_naming_its_line() {
    let file = TempFile::new("users", "alice alice-token-0123456789\nbob short\n");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_holdline"))
        .args(["serve", "--listen", "127.0.0.1:0", "--users", &file.path])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "--users {}: line 2: user bob: a token of at least 16 bytes",
            file.path
        )),
        "{err}"
    );
}
