//! Connecting as a user (`holdline serve --users`): the user in the
//! address and as an option, the `HELLO 3 AUTH USER TOKEN` said, bad names
//! refused with the shared texts, and `NOPERM` (a lock the user may not
//! name) as kind invalid with the server's line, told apart by
//! `is_no_perm`; against a scripted server, then a real one.

mod common;

use bytes::BytesMut;
use common::{expected_text, Server, PATIENCE};
use holdline_client::{ConnectOptions, ErrorKind, Store, Value};
use holdline_resp::{encode, Decoder, Proto};
use std::sync::{Arc, Mutex};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

const NOPERM: &str = "NOPERM user team-b may not use lock \"payments\"";

/// A scripted server: records every `HELLO`'s arguments; refuses every
/// command about the lock `payments` with `NOPERM`, grants a `HOLD` of
/// any other, answers `CLUSTER SLOTS` as a single server does.
struct Scripted {
    addr: String,
    hellos: Arc<Mutex<Vec<Vec<String>>>>,
}

impl Scripted {
    async fn start() -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let hellos = Arc::new(Mutex::new(Vec::new()));
        let seen = hellos.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(serve(sock, seen.clone()));
            }
        });
        Scripted { addr, hellos }
    }

    /// The `HELLO`s said so far, each joined with spaces; forgets them.
    fn hellos(&self) -> Vec<String> {
        let mut hellos = self.hellos.lock().unwrap();
        hellos.drain(..).map(|args| args.join(" ")).collect()
    }
}

async fn serve(mut sock: TcpStream, hellos: Arc<Mutex<Vec<Vec<String>>>>) {
    let mut dec = Decoder::new(1 << 20);
    let mut buf = BytesMut::new();
    loop {
        let Some(cmd) = common::next_command(&mut sock, &mut dec, &mut buf).await else {
            return;
        };
        let reply = match cmd[0].as_str() {
            "HELLO" => {
                hellos.lock().unwrap().push(cmd.clone());
                Value::Map(vec![
                    (Value::bulk("server"), Value::bulk("holdline")),
                    (Value::bulk("proto"), Value::Integer(3)),
                ])
            }
            "PING" => Value::simple("PONG"),
            "CLUSTER" => Value::error("ERR This instance has cluster support disabled"),
            _ if cmd.get(1).map(String::as_str) == Some("payments") => Value::error(NOPERM),
            "HOLD" | "TRYHOLD" => Value::Array(vec![Value::Integer(1), Value::Integer(5)]),
            "RELEASE" => Value::ok(),
            other => panic!("unexpected {other}"),
        };
        let mut out = Vec::new();
        encode(&reply, Proto::Resp3, &mut out);
        if sock.write_all(&out).await.is_err() {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_says_the_user_and_the_token() {
    let server = Scripted::start().await;
    let addr = server.addr.clone();
    let cases = [
        (format!("redis://alice:tok@{addr}"), ConnectOptions::new()),
        (format!("rediss://x@{addr}"), ConnectOptions::new()),
        (format!("redis://:tok@{addr}"), ConnectOptions::new()),
        (format!("redis://default:tok@{addr}"), ConnectOptions::new()),
        (addr.clone(), ConnectOptions::new().token("tok")),
        (addr.clone(), ConnectOptions::new().user("bob").token("t2")),
        (
            format!("redis://alice:tok@{addr}"),
            ConnectOptions::new().user("bob"),
        ),
        (
            format!("redis://alice:tok@{addr}"),
            ConnectOptions::new().token("t2"),
        ),
        (
            format!("redis://:tok@{addr}"),
            ConnectOptions::new().user("team-b.ops:1@x"),
        ),
        (addr.clone(), ConnectOptions::new()),
    ];
    let expected = [
        Some("HELLO 3 AUTH alice tok"),
        None, // a bare user name: bad_address, nothing dialled
        Some("HELLO 3 AUTH default tok"),
        Some("HELLO 3 AUTH default tok"),
        Some("HELLO 3 AUTH default tok"),
        Some("HELLO 3 AUTH bob t2"),
        Some("HELLO 3 AUTH bob tok"),
        Some("HELLO 3 AUTH alice t2"),
        Some("HELLO 3 AUTH team-b.ops:1@x tok"),
        Some("HELLO 3"),
    ];
    for ((url, options), want) in cases.into_iter().zip(expected) {
        let connected = timeout(PATIENCE, Store::connect_with(&url, options))
            .await
            .unwrap();
        match want {
            Some(want) => {
                let store = connected.unwrap_or_else(|e| panic!("{url}: {e}"));
                // Every pooled connection says the same.
                let lock = store.lock("team-a.jobs").open().unwrap();
                let held = lock.acquire("k").await.unwrap();
                let other = lock.acquire("k2").await.unwrap();
                drop((held, other));
                let hellos = server.hellos();
                assert!(hellos.len() >= 2, "{url}: {hellos:?}");
                assert!(hellos.iter().all(|h| h == want), "{url}: {hellos:?}");
            }
            None => {
                let e = connected.unwrap_err();
                assert_eq!(e.kind(), ErrorKind::Invalid);
                assert!(server.hellos().is_empty());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_user_names_are_refused_with_the_shared_texts() {
    let server = Scripted::start().await;
    for bad in ["al ice", "al%20ice", "é", "nobody"] {
        let url = if bad == "nobody" {
            // A user with no token.
            format!("redis://{bad}@{}", server.addr)
        } else {
            format!("redis://{bad}:tok@{}", server.addr)
        };
        let e = Store::connect(&url).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{url}");
        let shown = holdline::wire::shown_key(&url);
        assert_eq!(
            e.to_string(),
            expected_text("bad_address", &[("address", &shown)])
        );
    }
    let long = "u".repeat(65);
    for bad in ["al ice", "", "a/b", "é", long.as_str()] {
        let options = ConnectOptions::new().user(bad).token("tok");
        let e = Store::connect_with(&server.addr, options)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid);
        let shown = holdline::wire::shown_key(bad);
        assert_eq!(
            e.to_string(),
            expected_text("bad_user", &[("user", &shown)])
        );
    }
    let options = ConnectOptions::new().user("alice");
    let e = Store::connect_with(&server.addr, options)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert_eq!(
        e.to_string(),
        expected_text("user_without_token", &[("user", "\"alice\"")])
    );
    assert!(server.hellos().is_empty(), "nothing said HELLO");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noperm_is_invalid_with_the_servers_text_from_any_command() {
    let server = Scripted::start().await;
    let url = format!("redis://team-b:tok@{}", server.addr);
    let store = Store::connect(&url).await.unwrap();
    let payments = store.lock("payments").open().unwrap();
    let check = |what: &str, e: holdline_client::Error| {
        assert_eq!(e.kind(), ErrorKind::Invalid, "{what}");
        assert_eq!(e.to_string(), NOPERM, "{what}");
        assert!(e.is_no_perm(), "{what}");
        assert!(!e.is_connection(), "{what}");
    };
    let ran = timeout(PATIENCE, payments.hold("k", async |_| ()))
        .await
        .unwrap();
    check("HOLD", ran.unwrap_err());
    check(
        "TRYHOLD",
        payments.try_hold("k", async |_| ()).await.unwrap_err(),
    );
    check("INSPECT", payments.inspect("k").await.unwrap_err());
    check("STATS", payments.stats().await.unwrap_err());
    let put = store.put_fenced(&payments, "k", 5, "row", b"v").await;
    check("PUT", put.unwrap_err());
    // The connection is fine: a lock the user may use is granted.
    let jobs = store.lock("team-a.jobs").open().unwrap();
    assert_eq!(jobs.hold("k", async |l| l.fence()).await.unwrap(), 5);
    // Other refusals are not NOPERM.
    let e = holdline_client::Error::from_reply("ERR unknown command 'NOPE'");
    assert!(!e.is_no_perm());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_server_with_users_checks_each_users_locks() {
    let server = Server::start_with_users(
        "alice alice-token-0123456789 locks=team-a.*\nroot root-token-0123456789 admin\n",
    );
    let url = format!("redis://alice:alice-token-0123456789@{}", server.addr);
    let alice = timeout(PATIENCE, Store::connect(&url))
        .await
        .unwrap()
        .unwrap();
    let jobs = alice.lock("team-a.jobs").open().unwrap();
    let fence = timeout(PATIENCE, jobs.hold("k", async |l| l.fence()))
        .await
        .unwrap()
        .unwrap();
    assert!(fence > 0);
    let payments = alice.lock("payments").open().unwrap();
    let e = timeout(PATIENCE, payments.hold("k", async |_| ()))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert_eq!(
        e.to_string(),
        "NOPERM user alice may not use lock \"payments\""
    );
    assert!(e.is_no_perm());
    // The explicit option, and an admin, who may use any lock.
    let options = ConnectOptions::new()
        .user("root")
        .token("root-token-0123456789");
    let root = Store::connect_with(&server.addr, options).await.unwrap();
    let payments = root.lock("payments").open().unwrap();
    assert!(payments.hold("k", async |l| l.fence()).await.unwrap() > 0);
    // A wrong token, and a user the server does not know.
    for url in [
        format!("redis://alice:wrong-token-0123456789@{}", server.addr),
        format!("redis://mallory:alice-token-0123456789@{}", server.addr),
    ] {
        let e = Store::connect(&url).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid);
        assert_eq!(e.to_string(), expected_text("token_refused", &[]));
    }
}
