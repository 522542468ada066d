//! The low-level connection is generic RESP: the benchmark harness drives
//! `redis-server` through it. Runs when `redis-server` is on the PATH
//! (Debian package `redis-server`) and says so when it is not.

use holdline_client::{Connection, ErrorKind, Store, Value};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Redis(Child);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_redis() -> Option<(Redis, String)> {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(child) = child else {
        eprintln!("redis-server is not installed: skipped (apt-get install redis-server)");
        return None;
    };
    let redis = Redis(child);
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(&addr).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    Some((redis, addr))
}

const RELEASE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

#[tokio::test(flavor = "current_thread")]
async fn a_store_refuses_redis_at_connect_naming_it() {
    let Some((_redis, addr)) = start_redis() else {
        return;
    };
    let conn = Connection::connect(addr.as_str()).await.unwrap();
    let field = |name: &str| match conn.hello() {
        Value::Map(pairs) => pairs
            .iter()
            .find_map(|(k, v)| (k.as_str() == Some(name)).then(|| v.as_str().unwrap().to_owned())),
        other => panic!("{other:?}"),
    };
    let named = format!("{} {}", field("server").unwrap(), field("version").unwrap());
    assert!(named.starts_with("redis "), "{named}");
    let e = Store::connect(&addr).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert_eq!(
        e.to_string(),
        format!("store: the server at {addr} is {named}, not holdline: invalid")
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_redis_lock_through_the_connection() {
    let Some((_redis, addr)) = start_redis() else {
        return;
    };
    let mut conn = Connection::connect(addr.as_str()).await.unwrap();
    let Value::Map(hello) = conn.hello() else {
        panic!("{:?}", conn.hello())
    };
    assert!(hello
        .iter()
        .any(|(k, v)| k.as_str() == Some("proto") && v.as_integer() == Some(3)));

    let set = ["SET", "lock:k", "token-1", "NX", "PX", "30000"];
    assert_eq!(conn.command(&set).await.unwrap(), Value::simple("OK"));
    assert_eq!(conn.command(&set).await.unwrap(), Value::Null);

    let Value::Bulk(sha) = conn.command(&["SCRIPT", "LOAD", RELEASE]).await.unwrap() else {
        panic!()
    };
    let sha = String::from_utf8(sha).unwrap();
    // Pipelined: a wrong token's release, then the right one's.
    conn.queue(&["EVALSHA", &sha, "1", "lock:k", "token-2"]);
    conn.queue(&["EVALSHA", &sha, "1", "lock:k", "token-1"]);
    conn.flush().await.unwrap();
    assert_eq!(conn.read_reply().await.unwrap(), Value::Integer(0));
    assert_eq!(conn.read_reply().await.unwrap(), Value::Integer(1));
    // An error reply is a value at this layer.
    let reply = conn.command(&["NOSUCHCOMMAND"]).await.unwrap();
    assert!(reply.is_error(), "{reply:?}");
    assert_eq!(
        conn.command(&["PING"]).await.unwrap(),
        Value::simple("PONG")
    );
}
