//! The commands' parsing and effects, on a session of their own.

use super::leases::{Hold, TryHold};
use super::*;
use crate::reply::noauth;
use crate::session::{Shared, UNAUTHENTICATED_MAX_FRAME};
use holdline::Store;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// The command `words` spell, or the error's text on the wire.
fn cmd(words: &[&str]) -> Result<Command, String> {
    parse(words.iter().map(|w| w.as_bytes().to_vec()).collect())
        .map(|(_, command)| command)
        .map_err(|e| e.to_string())
}

fn hold(words: &[&str]) -> Result<Hold, String> {
    let mut p = Parse::of("HOLD", words).with_options(table::find(b"hold").unwrap().1.options);
    Hold::parse(&mut p).map_err(|e| e.to_string())
}

#[test]
fn hold_with_options_in_any_order_and_case() {
    let a = hold(&["inv", "9", "maxhold", "500", "Wait", "0", "TTL", "30"]).unwrap();
    let b = hold(&["inv", "9", "TTL", "30", "WAIT", "0", "MAXHOLD", "500"]).unwrap();
    assert_eq!(a, b);
    assert_ne!(a, hold(&["inv", "9"]).unwrap());
    // The defaults are the core's; a TTL left out is marked so (a cluster
    // caps it at its max ttl), one given is kept as given.
    let default = hold(&["inv", "9"]).unwrap();
    assert_eq!(default, hold(&["inv", "9", "WAIT", "10000"]).unwrap());
    let shown = format!("{default:?}");
    assert!(
        shown.contains("wait: 10s") && shown.contains("ttl: 10s"),
        "{shown}"
    );
    assert!(shown.contains("ttl_given: false"), "{shown}");
    let given = format!("{:?}", hold(&["inv", "9", "TTL", "10000"]).unwrap());
    assert!(
        given.contains("ttl: 10s") && given.contains("ttl_given: true"),
        "{given}"
    );
}

#[test]
fn refusals_carry_redis_texts() {
    let not_an_integer = crate::parse::not_an_integer().to_string();
    // Redis's text, then which option and its unit.
    let not_ms = |token: &str| crate::parse::not_milliseconds(token).to_string();
    let (wait_ms, ttl_ms) = (not_ms("WAIT"), not_ms("TTL"));
    let cases: &[(&[&str], &str)] = &[
        (
            &["HOLD", "inv"],
            "ERR wrong number of arguments for 'hold' command",
        ),
        (&["HOLD", "inv", "9", "WAIT"], "ERR syntax error"),
        (
            &["HOLD", "inv", "9", "TTL", "10", "TTL", "20"],
            "ERR syntax error",
        ),
        (&["TRYHOLD", "inv", "9", "WAIT", "1"], "ERR syntax error"),
        (&["HOLD", "inv", "9", "WAIT", "1s"], &wait_ms),
        (&["HOLD", "inv", "9", "TTL", "-5"], &ttl_ms),
        (&["RELEASE", " 1"], &not_an_integer),
        (
            &["RELEASE"],
            "ERR wrong number of arguments for 'release' command",
        ),
        (
            &["RELEASE", "1", "2"],
            "ERR wrong number of arguments for 'release' command",
        ),
        (&["PUT", "l", "k", "-1", "r", "v"], &not_an_integer),
        (
            &["PING", "a", "b"],
            "ERR wrong number of arguments for 'ping' command",
        ),
        (
            &["FROB", "a", "b"],
            "ERR unknown command 'FROB', with args beginning with: 'a' 'b' ",
        ),
        (
            &["CLIENT", "MAINT_NOTIFICATIONS", "on"],
            "ERR unknown subcommand 'MAINT_NOTIFICATIONS'. Try CLIENT HELP.",
        ),
        (
            &["CLIENT", "SETNAME"],
            "ERR wrong number of arguments for 'client|setname' command",
        ),
        (
            &["COMMAND", "COUNT", "x"],
            "ERR wrong number of arguments for 'command|count' command",
        ),
        (
            &["HELLO", "x"],
            "ERR Protocol version is not an integer or out of range",
        ),
        (
            &["HELLO", "3", "AUTH", "only-user"],
            "ERR Syntax error in HELLO option 'AUTH'",
        ),
    ];
    for (words, want) in cases {
        assert_eq!(cmd(words).unwrap_err(), *want, "{words:?}");
    }
    assert!(wait_ms.starts_with(&not_an_integer), "{wait_ms}");
    assert!(
        ttl_ms.ends_with(": TTL takes whole milliseconds (TTL 10000 is 10 s)"),
        "{ttl_ms}"
    );
}

#[test]
fn frames_must_be_arrays_of_bulk_strings() {
    assert!(arguments(Value::simple("PING")).is_err());
    assert!(arguments(Value::Array(vec![Value::Integer(1)])).is_err());
    assert_eq!(
        arguments(Value::Array(vec![Value::bulk("PING")])),
        Ok(vec![b"PING".to_vec()])
    );
}

fn session(token: Option<&str>) -> Session {
    let facts = crate::session::Facts {
        started: std::time::Instant::now(),
        port: 7380,
        tls: false,
        max_clients: 10,
    };
    let users = match token {
        Some(t) => crate::users::Users::token(t.as_bytes().to_vec()),
        None => crate::users::Users::open(),
    };
    let users = crate::users::Directory::new(users, None);
    let shared = Shared::new(Store::new(), users, 1 << 19, facts);
    Session::new(Arc::new(shared), "127.0.0.1:1".parse().unwrap())
}

/// What the command `words` spell answers, as it goes on the wire.
fn run(s: &mut Session, words: &[&str]) -> Value {
    match execute(s, words.iter().map(|w| w.as_bytes().to_vec()).collect()) {
        Step::Reply(reply) | Step::Close(reply) => reply.unwrap_or_else(ErrorReply::into_value),
        Step::Wait(_) => panic!("{words:?} waits"),
    }
}

#[test]
fn a_token_gates_everything_but_hello_with_auth_auth_and_quit() {
    let mut s = session(Some("sekret"));
    assert_eq!(run(&mut s, &["PING"]), noauth().into_value());
    assert_eq!(run(&mut s, &["FROB"]), noauth().into_value());
    let Value::Error(text) = run(&mut s, &["HELLO", "3"]) else {
        panic!("HELLO without the token is refused")
    };
    assert!(text.starts_with("NOAUTH HELLO must be called"), "{text}");
    assert_eq!(
        run(&mut s, &["AUTH", "nope"]),
        conn::wrongpass().into_value()
    );
    assert_eq!(
        run(&mut s, &["HELLO", "3", "AUTH", "default", "sekre"]),
        conn::wrongpass().into_value()
    );
    assert_eq!(s.frame_limit(), UNAUTHENTICATED_MAX_FRAME);
    // The token is the user `default`'s: another name is no user at all.
    assert_eq!(
        run(&mut s, &["AUTH", "anyone", "sekret"]),
        conn::wrongpass().into_value()
    );
    assert_eq!(run(&mut s, &["AUTH", "default", "sekret"]), Value::ok());
    assert_eq!(run(&mut s, &["PING"]), Value::simple("PONG"));
    assert!(matches!(run(&mut s, &["HELLO", "3"]), Value::Map(_)));
    assert_eq!(s.frame_limit(), 1 << 19);
}

#[test]
fn try_hold_release_and_the_lost_second_release() {
    let mut s = session(None);
    let id = grant_id(run(&mut s, &["TRYHOLD", "inv", "9"]));
    assert_eq!(run(&mut s, &["TRYHOLD", "inv", "9"]), Value::Null);
    assert_eq!(
        run(&mut s, &["HOLD", "inv", "9"]),
        Value::error("INVALID lock inv: key \"9\": hold inside a hold of the same key: invalid")
    );
    assert_eq!(run(&mut s, &["RENEW", &id]), Value::ok());
    assert_eq!(run(&mut s, &["RELEASE", &id]), Value::ok());
    assert_eq!(
        run(&mut s, &["RELEASE", &id]),
        Value::Error(format!(
            "INVALID store: lease {id} is not held by this connection: invalid"
        ))
    );
}

fn grant_id(v: Value) -> String {
    let Value::Array(pair) = v else {
        panic!("not granted: {v:?}")
    };
    pair[0].as_integer().unwrap().to_string()
}

#[test]
fn commands_read_keep_leases_alive_past_their_ttl() {
    let mut s = session(None);
    let id = grant_id(run(&mut s, &["TRYHOLD", "inv", "1", "TTL", "1000"]));
    // 3 s of commands read every 100 ms: past the 1 s ttl three times over,
    // which only their renewals can get it through.
    for _ in 0..30 {
        std::thread::sleep(Duration::from_millis(100));
        s.renew_all();
    }
    assert_eq!(run(&mut s, &["RENEW", &id]), Value::ok());
}

#[test]
fn bad_names_and_keys_carry_core_texts() {
    let mut s = session(None);
    let Value::Error(text) = run(&mut s, &["TRYHOLD", "bad name", "k"]) else {
        panic!()
    };
    assert!(text.starts_with("INVALID lock \"bad name\": "), "{text}");
    let Value::Error(text) = run(&mut s, &["TRYHOLD", "inv", "a\nb"]) else {
        panic!()
    };
    assert_eq!(
        text,
        "INVALID lock inv: key \"a\\nb\": the key holds a control character: invalid"
    );
    let Value::Error(text) = run(&mut s, &["TRYHOLD", "inv", "1", "TTL", "0"]) else {
        panic!()
    };
    assert!(text.starts_with("INVALID "), "{text}");
    let not_utf8 = execute(
        &mut s,
        vec![b"TRYHOLD".to_vec(), b"inv".to_vec(), b"\xff".to_vec()],
    );
    let Step::Reply(Err(refusal)) = not_utf8 else {
        panic!()
    };
    assert_eq!(refusal.word, crate::reply::ErrorWord::Invalid);
    assert_eq!(
        refusal.to_string(),
        "INVALID lock inv: key \"\\xff\": the key is not UTF-8: invalid"
    );
}

#[test]
fn try_hold_parses_its_options() {
    let mut p = Parse::of("TRYHOLD", &["l", "k", "ttl", "5"])
        .with_options(table::find(b"tryhold").unwrap().1.options);
    assert!(TryHold::parse(&mut p).is_ok());
}

/// One invocation of every command the server accepts.
const EVERY_COMMAND: &[&[&str]] = &[
    &["HOLD", "l", "k", "WAIT", "0"],
    &["TRYHOLD", "l", "k"],
    &["REATTACH", "l", "k", "0123456789abcdef"],
    &["RELEASE", "1"],
    &["RENEW", "1"],
    &["NOTE", "1", "n"],
    &["HISTORY"],
    &["PUT", "l", "k", "1", "r", "v"],
    &["GET", "r"],
    &["DEL", "r", "s"],
    &["STATS", "l"],
    &["PING"],
    &["ECHO", "m"],
    &["QUIT"],
    &["HELLO", "3"],
    &["AUTH", "user", "token"],
    &["CLIENT", "LIST"],
    &["SELECT", "0"],
    &["COMMAND", "COUNT"],
    &["INFO", "locks"],
    &["INSPECT", "l", "k"],
    &["OBSERVE", "l", "k"],
    &["UNOBSERVE", "l", "k"],
    &["CLUSTER", "MYID"],
];

#[test]
fn command_info_and_docs_answer_every_command_the_parser_accepts() {
    for words in EVERY_COMMAND {
        if let Err(e) = cmd(words) {
            panic!("{words:?} is refused: {e}");
        }
        let name = words[0].to_lowercase();
        let Value::Array(infos) = table::Query::Info(vec![words[0].into()]).apply() else {
            unreachable!()
        };
        let Value::Array(info) = &infos[0] else {
            panic!("COMMAND INFO {name} answers {:?}", infos[0])
        };
        assert_eq!(info[0], Value::bulk(name.as_str()));
        let arity = info[1].as_integer().unwrap();
        let count = words.len() as i64;
        assert!(
            arity == count || (arity < 0 && count >= -arity),
            "{words:?} does not fit arity {arity}"
        );
        let Value::Map(docs) = table::Query::Docs(vec![words[0].into()]).apply() else {
            unreachable!()
        };
        assert_eq!(docs.len(), 1, "COMMAND DOCS {name}");
    }
    // The table holds no command the list above does not try.
    assert_eq!(
        table::Query::Count.apply(),
        Value::Integer(EVERY_COMMAND.len() as i64)
    );
    assert_eq!(
        table::Query::Info(vec![b"nope".to_vec()]).apply(),
        Value::Array(vec![Value::Null])
    );
}

#[test]
fn command_docs_name_hold_options() {
    let Value::Map(pairs) = table::Query::Docs(vec![b"HOLD".to_vec(), b"nope".to_vec()]).apply()
    else {
        unreachable!()
    };
    assert_eq!(pairs.len(), 1);
    assert_eq!(pairs[0].0, Value::bulk("hold"));
    let text = format!("{}", pairs[0].1);
    assert!(
        text.contains("\"WAIT\"") && text.contains("\"MAXHOLD\""),
        "{text}"
    );
}

#[test]
fn only_hello_auth_and_quit_come_before_auth() {
    let before: Vec<&str> = table::COMMANDS
        .iter()
        .filter(|spec| spec.allowed_before_auth())
        .map(|spec| spec.name)
        .collect();
    assert_eq!(before, ["quit", "hello", "auth"]);
}

/// The option words of `name`'s doc (`COMMAND DOCS`): its arguments'
/// tokens.
fn documented_words(docs: &[(Value, Value)], name: &str) -> BTreeSet<String> {
    let (_, Value::Map(doc)) = docs.iter().find(|(n, _)| *n == Value::bulk(name)).unwrap() else {
        unreachable!("a doc is a map")
    };
    let (_, Value::Array(args)) = doc
        .iter()
        .find(|(k, _)| *k == Value::bulk("arguments"))
        .unwrap()
    else {
        unreachable!("arguments are an array")
    };
    let mut words = BTreeSet::new();
    for arg in args {
        let Value::Map(fields) = arg else {
            unreachable!("an argument is a map")
        };
        for (k, v) in fields {
            if let (true, Value::Bulk(token)) = (*k == Value::bulk("token"), v) {
                words.insert(String::from_utf8(token.clone()).unwrap());
            }
        }
    }
    words
}

/// A value of `kind` every parser takes (`protover`: 3).
fn sample(name: &str, kind: &str) -> &'static str {
    match (name, kind) {
        ("protover", _) => "3",
        (_, "integer") => "1",
        _ => "x",
    }
}

/// Walks every command and every option word of any command (and one of
/// none): the words a command's parser accepts, in any case, are exactly
/// those its `COMMAND DOCS` lists. (A command whose last argument takes
/// the rest, DEL's rows, accepts any word as one of them: its documented
/// words must still parse.)
#[test]
fn command_docs_list_every_option_word_the_parser_accepts_and_no_other() {
    let Value::Map(docs) = table::Query::Docs(vec![]).apply() else {
        unreachable!()
    };
    let options: Vec<&crate::parse::Opt> = table::COMMANDS
        .iter()
        .flat_map(|spec| spec.options)
        .collect();
    let mut words: Vec<(&str, Vec<&str>)> = options
        .iter()
        .map(|o| {
            (
                o.token,
                o.values.iter().map(|(n, k)| sample(n, k)).collect(),
            )
        })
        .collect();
    words.push(("FROB", vec!["1"]));
    for spec in table::COMMANDS {
        let positional: Vec<&str> = spec.args.iter().map(|a| sample(a.name, a.kind)).collect();
        let mut accepted = BTreeSet::new();
        for (word, values) in &words {
            for case in [word.to_string(), word.to_ascii_lowercase()] {
                let mut line = vec![spec.name];
                line.extend(&positional);
                line.push(&case);
                line.extend(values);
                if cmd(&line).is_ok() {
                    accepted.insert(word.to_string());
                }
            }
        }
        let documented = documented_words(&docs, spec.name);
        let listed: BTreeSet<String> = spec.options.iter().map(|o| o.token.into()).collect();
        assert_eq!(documented, listed, "{}: COMMAND DOCS", spec.name);
        if spec.args.iter().any(|a| a.multiple) {
            assert!(accepted.is_superset(&documented), "{}", spec.name);
        } else {
            assert_eq!(
                accepted, documented,
                "{}: words its parser accepts",
                spec.name
            );
        }
    }
    // The options the issue found parsed but undocumented.
    assert!(documented_words(&docs, "hold").contains("NOTE"));
    assert!(documented_words(&docs, "tryhold").contains("NOTE"));
    assert!(documented_words(&docs, "hello").contains("AUTH"));
}

#[test]
fn an_option_takes_as_many_values_as_its_table_entry_says() {
    assert!(cmd(&["HELLO", "3", "AUTH", "u", "p", "SETNAME", "n"]).is_ok());
    assert_eq!(
        cmd(&["HELLO", "3", "AUTH", "u"]).unwrap_err(),
        "ERR Syntax error in HELLO option 'AUTH'"
    );
    // HELLO's options may come again, as in Redis; HOLD's may not.
    assert!(cmd(&["HELLO", "3", "SETNAME", "a", "SETNAME", "b"]).is_ok());
    assert_eq!(
        cmd(&["HOLD", "l", "k", "NOTE", "a", "NOTE", "b"]).unwrap_err(),
        "ERR syntax error"
    );
    assert_eq!(
        cmd(&["HISTORY", "l", "k", "COUNT", "-1"]).unwrap_err(),
        "ERR syntax error"
    );
    assert_eq!(
        cmd(&["HISTORY", "l", "k", "extra"]).unwrap_err(),
        "ERR syntax error"
    );
    assert!(cmd(&["HISTORY", "COUNT", "5"]).is_ok());
}

#[test]
fn hold_takes_a_bypass_bound_and_is_fifo_without_one() {
    let bounded = format!("{:?}", hold(&["inv", "9", "BYPASS", "5"]).unwrap());
    assert!(bounded.contains("bypass: Some(5ms)"), "{bounded}");
    let fifo = format!("{:?}", hold(&["inv", "9"]).unwrap());
    assert!(fifo.contains("bypass: None"), "{fifo}");
    let bad = hold(&["inv", "9", "BYPASS", "soon"]).unwrap_err();
    assert!(bad.contains("BYPASS takes whole milliseconds"), "{bad}");
}
