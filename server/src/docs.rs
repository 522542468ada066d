//! The command table behind `COMMAND`, `COMMAND INFO` and `COMMAND DOCS`,
//! so `redis-cli` can show argument hints for HOLD and the rest.

use holdline_resp::Value;

struct Arg {
    name: &'static str,
    kind: &'static str,
    /// The option word before the value (`WAIT`), if any.
    token: Option<&'static str>,
    optional: bool,
}

const fn arg(name: &'static str, kind: &'static str) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: false,
    }
}

const fn option(name: &'static str, token: &'static str) -> Arg {
    Arg {
        name,
        kind: "integer",
        token: Some(token),
        optional: true,
    }
}

const fn optional(name: &'static str, kind: &'static str) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: true,
    }
}

struct Doc {
    name: &'static str,
    /// Redis's arity: the count with the name, negative for "at least".
    arity: i64,
    summary: &'static str,
    args: &'static [Arg],
}

const COMMANDS: &[Doc] = &[
    Doc {
        name: "hold",
        arity: -3,
        summary: "Waits in the key's line (WAIT ms, default 10000) and holds it: answers [lease, fence].",
        args: &[
            arg("lock", "string"),
            arg("key", "string"),
            option("ms", "WAIT"),
            option("ms", "TTL"),
            option("ms", "MAXHOLD"),
        ],
    },
    Doc {
        name: "tryhold",
        arity: -3,
        summary: "Holds the key if it is free now: [lease, fence], or null when held.",
        args: &[
            arg("lock", "string"),
            arg("key", "string"),
            option("ms", "TTL"),
            option("ms", "MAXHOLD"),
        ],
    },
    Doc {
        name: "release",
        arity: 2,
        summary: "Lets a lease's key go: OK, or LOST when the lease was lost before.",
        args: &[arg("lease", "integer")],
    },
    Doc {
        name: "renew",
        arity: 2,
        summary: "Renews a lease (every command renews them all): OK, or LOST.",
        args: &[arg("lease", "integer")],
    },
    Doc {
        name: "put",
        arity: 6,
        summary: "Writes a row on behalf of the holder with this fence: OK, or LOST.",
        args: &[
            arg("lock", "string"),
            arg("key", "string"),
            arg("fence", "integer"),
            arg("row", "string"),
            arg("value", "string"),
        ],
    },
    Doc {
        name: "get",
        arity: 2,
        summary: "A row's value, or null.",
        args: &[arg("row", "string")],
    },
    Doc {
        name: "del",
        arity: -2,
        summary: "Deletes rows (those whose guarding lock the user may name); the count deleted.",
        args: &[arg("row", "string")],
    },
    Doc {
        name: "stats",
        arity: 2,
        summary: "A lock's counters: live_keys held_keys waiters grants timeouts revocations expirations.",
        args: &[arg("lock", "string")],
    },
    Doc {
        name: "ping",
        arity: -1,
        summary: "PONG, or the message.",
        args: &[optional("message", "string")],
    },
    Doc {
        name: "echo",
        arity: 2,
        summary: "The message.",
        args: &[arg("message", "string")],
    },
    Doc {
        name: "quit",
        arity: -1,
        summary: "Closes the connection, letting its keys go.",
        args: &[],
    },
    Doc {
        name: "hello",
        arity: -1,
        summary: "Switches the protocol (2 or 3), authenticates, names the connection.",
        args: &[optional("protover", "integer")],
    },
    Doc {
        name: "auth",
        arity: -2,
        summary: "Authenticates with the server's token (the user name is ignored).",
        args: &[optional("username", "string"), arg("token", "string")],
    },
    Doc {
        name: "client",
        arity: -2,
        summary: "CLIENT SETNAME, GETNAME, SETINFO, ID.",
        args: &[arg("subcommand", "string")],
    },
    Doc {
        name: "select",
        arity: 2,
        summary: "Only database 0 exists.",
        args: &[arg("index", "integer")],
    },
    Doc {
        name: "command",
        arity: -1,
        summary: "This table: COMMAND, COMMAND COUNT, COMMAND INFO, COMMAND DOCS.",
        args: &[],
    },
];

fn bulk(s: &str) -> Value {
    Value::bulk(s)
}

fn find(name: &[u8]) -> Option<&'static Doc> {
    COMMANDS
        .iter()
        .find(|d| d.name.as_bytes().eq_ignore_ascii_case(name))
}

/// `COMMAND COUNT`.
pub fn count() -> Value {
    Value::Integer(COMMANDS.len() as i64)
}

/// `COMMAND` (all) or `COMMAND INFO names...` (null for an unknown one).
pub fn info(names: &[Vec<u8>]) -> Value {
    let one = |d: &Doc| {
        Value::Array(vec![
            bulk(d.name),
            Value::Integer(d.arity),
            Value::Set(vec![]),
            Value::Integer(0),
            Value::Integer(0),
            Value::Integer(0),
            Value::Set(vec![]),
            Value::Set(vec![]),
            Value::Array(vec![]),
            Value::Array(vec![]),
        ])
    };
    if names.is_empty() {
        return Value::Array(COMMANDS.iter().map(one).collect());
    }
    Value::Array(
        names
            .iter()
            .map(|n| find(n).map_or(Value::Null, one))
            .collect(),
    )
}

/// `COMMAND DOCS [names...]`: a map from name to its doc; unknown names are
/// left out, as Redis does.
pub fn docs(names: &[Vec<u8>]) -> Value {
    let one = |d: &Doc| {
        let args = d
            .args
            .iter()
            .map(|a| {
                let mut fields = vec![(bulk("name"), bulk(a.name)), (bulk("type"), bulk(a.kind))];
                if let Some(token) = a.token {
                    fields.push((bulk("token"), bulk(token)));
                }
                if a.optional {
                    fields.push((bulk("flags"), Value::Array(vec![Value::simple("optional")])));
                }
                Value::Map(fields)
            })
            .collect();
        (
            bulk(d.name),
            Value::Map(vec![
                (bulk("summary"), bulk(d.summary)),
                (bulk("since"), bulk("0.1.0")),
                (bulk("group"), bulk("holdline")),
                (bulk("arguments"), Value::Array(args)),
            ]),
        )
    };
    let pairs = if names.is_empty() {
        COMMANDS.iter().map(one).collect()
    } else {
        names.iter().filter_map(|n| find(n)).map(one).collect()
    };
    Value::Map(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_name_holds_options() {
        let Value::Map(pairs) = docs(&[b"HOLD".to_vec(), b"nope".to_vec()]) else {
            unreachable!()
        };
        assert_eq!(pairs.len(), 1);
        assert_eq!(pairs[0].0, bulk("hold"));
        let text = format!("{}", pairs[0].1);
        assert!(
            text.contains("\"WAIT\"") && text.contains("\"MAXHOLD\""),
            "{text}"
        );
    }

    #[test]
    fn every_parsed_command_is_documented() {
        for d in COMMANDS {
            assert!(find(&d.name.to_ascii_uppercase().into_bytes()).is_some());
        }
        assert_eq!(info(&[b"nope".to_vec()]), Value::Array(vec![Value::Null]));
    }
}
