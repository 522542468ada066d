//! The page on the `--metrics` listener: `/api/state` as JSON, and `/`
//! rendered by a real headless browser (Debian's `chromium`): a held key
//! with a note and two waiters shows, and is gone once released.

mod common;

use common::{runs, tool_available, Client, Server, PATIENCE};
use holdline_resp::Value;
use serde_json::Value as Json;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Shown as text, never as markup: the page must escape it.
const NOTE: &str = "<b>rebuild</b> index 7 on worker-3";

/// `GET path`: the status, the headers' text and the body.
fn get(addr: &str, path: &str) -> (u16, String, String) {
    common::http_get(addr, path, "")
}

fn state(metrics: &str) -> Json {
    let (status, _, body) = get(metrics, "/api/state");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// Polls `/api/state` until `ok` holds; answers that state.
fn await_state(metrics: &str, what: &str, ok: impl Fn(&Json) -> bool) -> Json {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let s = state(metrics);
        if ok(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "never {what}: {s}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `lock key`'s entry among `held`, if listed.
fn held<'a>(s: &'a Json, lock: &str, key: &str) -> Option<&'a Json> {
    s["held"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["lock"] == lock && h["key"] == key)
}

/// A key held with [`NOTE`] and two connections waiting in its line.
struct Line {
    holder: Client,
    lease: i64,
    waiters: [Client; 2],
}

fn hold_with_two_waiters(server: &Server, metrics: &str, key: &str) -> Line {
    let mut holder = server.connect();
    assert_eq!(holder.call(&["CLIENT", "SETNAME", "indexer"]), Value::ok());
    // A ttl far past the test's length: the holder sends nothing while a
    // browser loads the page, which on a loaded machine takes seconds.
    let (lease, _) = holder.grant(&["HOLD", "jobs", key, "NOTE", NOTE, "TTL", "600000"]);
    // One at a time, so the line's order is the array's (release_all
    // reads their grants in that order).
    let join = |n: u64| {
        let mut w = server.connect();
        w.send(&["HOLD", "jobs", key, "WAIT", "60000", "TTL", "600000"]);
        await_state(metrics, "a waiter in line", |s| {
            held(s, "jobs", key).is_some_and(|h| h["waiters"] == n)
        });
        w
    };
    let waiters = [join(1), join(2)];
    Line {
        holder,
        lease,
        waiters,
    }
}

/// Releases the key, then each waiter's grant in turn: every hold ends.
fn release_all(line: Line) {
    let Line {
        mut holder,
        lease,
        waiters,
    } = line;
    assert_eq!(holder.call(&["RELEASE", &lease.to_string()]), Value::ok());
    for mut w in waiters {
        let lease = match w.read() {
            Value::Array(pair) => pair[0].as_integer().unwrap(),
            other => panic!("a waiter got {other:?}"),
        };
        assert_eq!(w.call(&["RELEASE", &lease.to_string()]), Value::ok());
    }
}

fn start() -> (Server, String) {
    let server = Server::serve(&["--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0"]);
    let metrics = server.metrics.expect("it printed the metrics' address");
    (server, metrics.to_string())
}

#[test]
fn api_state_shows_a_held_key_its_note_and_its_line() {
    let (server, metrics) = start();
    let line = hold_with_two_waiters(&server, &metrics, "index-7");
    let s = state(&metrics);
    let h = held(&s, "jobs", "index-7").expect("the key is held");
    assert_eq!(h["holders"].as_array().unwrap().len(), 1, "{h}");
    let holder = &h["holders"][0];
    assert_eq!(holder["note"], NOTE);
    assert_eq!(holder["name"], "indexer");
    assert!(holder["client"].as_u64().is_some() && holder["lease"].as_u64().is_some());
    assert!(holder["fence"].as_u64().unwrap() > 0);
    assert!(
        h["held_for_ms"].is_u64() && h["lease_left_ms"].is_u64(),
        "{h}"
    );
    let first = &s["lines"][0];
    assert_eq!(
        (&first["lock"], &first["key"]),
        (&"jobs".into(), &"index-7".into())
    );
    assert_eq!(first["waiters"], 2);
    let jobs = s["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "jobs");
    assert_eq!(jobs.expect("the lock is listed")["held_keys"], 1);
    assert_eq!(s["history"][0]["event"], "granted");
    assert!(s.get("cluster").is_none(), "no cluster: {s}");

    release_all(line);
    let s = await_state(&metrics, "the key free", |s| {
        held(s, "jobs", "index-7").is_none() && s["lines"].as_array().unwrap().is_empty()
    });
    let released = s["history"].as_array().unwrap().iter();
    assert_eq!(released.filter(|e| e["event"] == "released").count(), 3);

    let (status, head, body) = get(&metrics, "/");
    assert_eq!(status, 200);
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/html"),
        "{head}"
    );
    assert!(body.contains("api/state") && !body.contains("http://") && !body.contains("https://"));
}

/// The rendered DOM of `http://metrics/` after chromium ran its script
/// for a few seconds of virtual time (the page fetches its data at once).
fn dump_dom(metrics: &str, profile: &str) -> String {
    let mut child = Command::new("chromium")
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            &format!("--user-data-dir={profile}"),
            "--virtual-time-budget=3000",
            "--dump-dom",
            &format!("http://{metrics}/"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut dom = String::new();
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let _ = out.read_to_string(&mut dom);
        dom
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish within a minute");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap()
}

/// The opening tags of the `<tr>` rows whose class starts with `class`.
fn rows<'a>(dom: &'a str, class: &str) -> Vec<&'a str> {
    let wanted = format!("class=\"{class}");
    dom.match_indices("<tr ")
        .map(|(at, _)| &dom[at..at + dom[at..].find('>').unwrap()])
        .filter(|tag| tag.contains(&wanted))
        .collect()
}

#[test]
fn the_page_in_headless_chromium_shows_the_holder_its_note_and_its_waiters() {
    if !tool_available(
        "chromium (Debian's chromium)",
        runs("chromium", &["--version"]),
    ) {
        return;
    }
    let (server, metrics) = start();
    // A profile of its own: tests running at once share no profile lock.
    let temp = common::TempFile::new("profile-marker", "");
    let dir = std::path::Path::new(&temp.path).parent().unwrap();
    let profile = dir.join("chromium").to_str().unwrap().to_owned();
    let line = hold_with_two_waiters(&server, &metrics, "index-7");
    let dom = dump_dom(&metrics, &profile);
    let key = "data-key=\"index-7\"";
    for (kind, what) in [("holder", "held row"), ("line", "line")] {
        assert!(
            rows(&dom, kind)
                .iter()
                .any(|r| r.contains(key) && r.contains("data-waiters=\"2\"")),
            "no {what} of index-7 with 2 waiters in\n{dom}"
        );
    }
    // The note is text: its markup shows escaped, never as markup.
    assert!(
        dom.contains("&lt;b&gt;rebuild&lt;/b&gt; index 7 on worker-3"),
        "no note in\n{dom}"
    );
    assert!(!dom.contains("<b>rebuild</b>"), "the note ran as markup");
    assert!(
        dom.contains(">indexer<") || dom.contains(" indexer<"),
        "{dom}"
    );

    release_all(line);
    await_state(&metrics, "the key free", |s| {
        held(s, "jobs", "index-7").is_none()
    });
    let dom = dump_dom(&metrics, &profile);
    assert!(dom.contains("Nothing is held"), "{dom}");
    assert!(
        !rows(&dom, "holder").iter().any(|r| r.contains(key)),
        "index-7 still shows held in\n{dom}"
    );
    assert!(
        rows(&dom, "line").is_empty(),
        "a line still shows in\n{dom}"
    );
    assert!(
        rows(&dom, "event").iter().any(|r| r.contains(key)),
        "the history shows no event of index-7 in\n{dom}"
    );
}
