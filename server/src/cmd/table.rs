//! The command table: each command's name, arity, flags, summary,
//! arguments and options (each option's word, its values and their
//! parser), and the function that parses it into a [`Command`]. Parsing,
//! `COMMAND` (and its COUNT, INFO and DOCS), the metrics' labels and
//! CLIENT LIST's `cmd=` all read this one table, so a command or an
//! option cannot be accepted and left undocumented, or documented and
//! refused. A new command or option is an entry here and its handler.

use super::{admin, cluster, conn, leases, rows};
use crate::parse::{self, unknown_subcommand, Opt, Parse};
use crate::reply::ErrorReply;
use holdline_resp::Value;

/// One parsed command. Byte strings stay bytes until the session checks them.
#[derive(Debug, PartialEq)]
pub enum Command {
    Hold(leases::Hold),
    TryHold(leases::TryHold),
    Reattach(leases::Reattach),
    Release(i64),
    Renew(i64),
    Note(i64, Vec<u8>),
    History(admin::History),
    Put(rows::Put),
    Get(Vec<u8>),
    Del(Vec<Vec<u8>>),
    Stats(Vec<u8>),
    Ping(Option<Vec<u8>>),
    Echo(Vec<u8>),
    Quit,
    Hello(conn::Hello),
    Auth(conn::Auth),
    Client(conn::Client),
    Select(i64),
    Table(Query),
    Info(Option<Vec<u8>>),
    Inspect(Vec<u8>, Vec<u8>),
    Observe(Vec<u8>, Vec<u8>),
    Unobserve(Vec<u8>, Vec<u8>),
    Admin(admin::ClientAdmin),
    Cluster(cluster::Query),
}

/// One positional argument, as `COMMAND DOCS` shows it.
pub struct Arg {
    pub name: &'static str,
    pub kind: &'static str,
    optional: bool,
    /// Whether it may be given several times (the rest of the arguments).
    pub multiple: bool,
}

const fn arg(name: &'static str, kind: &'static str) -> Arg {
    Arg {
        name,
        kind,
        optional: false,
        multiple: false,
    }
}

/// An option with one value.
const fn option(
    token: &'static str,
    value: &'static (&'static str, &'static str),
    parse: fn(&[Vec<u8>]) -> Result<parse::OptValue, ErrorReply>,
) -> Opt {
    Opt {
        token,
        values: std::slice::from_ref(value),
        parse,
    }
}

const MS: &(&str, &str) = &("ms", "integer");

/// HOLD's and TRYHOLD's options but WAIT.
macro_rules! hold_options {
    ($($first:expr),*) => {
        &[
            $($first,)*
            option("TTL", MS, parse::opt_millis),
            option("MAXHOLD", MS, parse::opt_millis),
            option("PERMITS", &("n", "integer"), parse::opt_count),
            option("TAKE", &("m", "integer"), parse::opt_count_or_all),
            option("NOTE", &("text", "string"), parse::opt_bytes),
            option("BYPASS", MS, parse::opt_millis),
            option("SECRET", &("secret", "string"), parse::opt_bytes),
        ]
    };
}

const fn optional(name: &'static str, kind: &'static str) -> Arg {
    Arg {
        name,
        kind,
        optional: true,
        multiple: false,
    }
}

/// What a command's arguments become.
type ParseFn = fn(&mut Parse) -> Result<Command, ErrorReply>;

/// One command.
pub struct Spec {
    /// Lower case, as `COMMAND` and the metrics show it.
    pub name: &'static str,
    /// Redis's arity: the count with the name, negative for "at least".
    pub arity: i64,
    /// Redis's flags; `no_auth` marks a command allowed before AUTH.
    pub flags: &'static [&'static str],
    pub summary: &'static str,
    /// Its positional arguments.
    pub args: &'static [Arg],
    /// Its options, read by [`Parse::options`]: the only option words
    /// it accepts, and every one `COMMAND DOCS` shows.
    pub options: &'static [Opt],
    pub parse: ParseFn,
}

impl Spec {
    /// Whether `count` arguments, the name among them, fit its arity.
    pub fn arity_fits(&self, count: usize) -> bool {
        let count = count as i64;
        match self.arity {
            n if n < 0 => count >= -n,
            n => count == n,
        }
    }

    pub fn allowed_before_auth(&self) -> bool {
        self.flags.contains(&"no_auth")
    }
}

/// Every command, in the order of the metrics' labels.
pub const COMMANDS: &[Spec] = &[
    Spec {
        name: "hold",
        arity: -3,
        flags: &["write", "blocking"],
        summary: "Waits in the key's line (WAIT ms, default 10000) and holds it (TAKE of the lock's PERMITS; NOTE text): answers [lease, fence].",
        args: &[arg("lock", "string"), arg("key", "string")],
        options: hold_options!(option("WAIT", MS, parse::opt_millis)),
        parse: |p| Ok(Command::Hold(leases::Hold::parse(p)?)),
    },
    Spec {
        name: "tryhold",
        arity: -3,
        flags: &["write", "fast"],
        summary: "Holds the key if its permits fit now and nobody waits: [lease, fence], or null.",
        args: &[arg("lock", "string"), arg("key", "string")],
        options: hold_options!(),
        parse: |p| Ok(Command::TryHold(leases::TryHold::parse(p)?)),
    },
    Spec {
        name: "reattach",
        arity: 4,
        flags: &["write", "blocking"],
        summary: "Takes a lease (or a place in line) handed over from another node, by its holder's secret: [lease, fence], as HOLD answers.",
        args: &[arg("lock", "string"), arg("key", "string"), arg("secret", "string")],
        options: &[],
        parse: |p| Ok(Command::Reattach(leases::Reattach::parse(p)?)),
    },
    Spec {
        name: "release",
        arity: 2,
        flags: &["write", "fast"],
        summary: "Lets a lease's key go: OK, or LOST when the lease was lost before.",
        args: &[arg("lease", "integer")],
        options: &[],
        parse: |p| Ok(Command::Release(p.next_int()?)),
    },
    Spec {
        name: "renew",
        arity: 2,
        flags: &["write", "fast"],
        summary: "Renews a lease (every command renews them all): OK, or LOST.",
        args: &[arg("lease", "integer")],
        options: &[],
        parse: |p| Ok(Command::Renew(p.next_int()?)),
    },
    Spec {
        name: "note",
        arity: 3,
        flags: &["write", "fast"],
        summary: "Replaces a lease's note (shown by INSPECT and HISTORY): OK, or LOST.",
        args: &[arg("lease", "integer"), arg("text", "string")],
        options: &[],
        parse: |p| Ok(Command::Note(p.next_int()?, p.next_bytes()?)),
    },
    Spec {
        name: "history",
        arity: -1,
        flags: &["readonly"],
        summary: "Recent grants and ends of leases, newest first (COUNT n, default 100).",
        args: &[optional("lock", "string"), optional("key", "string")],
        options: &[option("COUNT", &("n", "integer"), parse::opt_size)],
        parse: |p| Ok(Command::History(admin::History::parse(p)?)),
    },
    Spec {
        name: "put",
        arity: 6,
        flags: &["write"],
        summary: "Writes a row on behalf of the holder with this fence: OK, or LOST.",
        args: &[
            arg("lock", "string"),
            arg("key", "string"),
            arg("fence", "integer"),
            arg("row", "string"),
            arg("value", "string"),
        ],
        options: &[],
        parse: |p| Ok(Command::Put(rows::Put::parse(p)?)),
    },
    Spec {
        name: "get",
        arity: 2,
        flags: &["readonly", "fast"],
        summary: "A row's value, or null.",
        args: &[arg("row", "string")],
        options: &[],
        parse: |p| Ok(Command::Get(p.next_bytes()?)),
    },
    Spec {
        name: "del",
        arity: -2,
        flags: &["write"],
        summary: "Deletes rows (those whose guarding lock the user may name); the count deleted.",
        args: &[Arg {
            multiple: true,
            ..arg("row", "string")
        }],
        options: &[],
        parse: |p| Ok(Command::Del(rows::del_args(p)?)),
    },
    Spec {
        name: "stats",
        arity: 2,
        flags: &["readonly"],
        summary: "A lock's counters: live_keys held_keys waiters grants timeouts revocations expirations.",
        args: &[arg("lock", "string")],
        options: &[],
        parse: |p| Ok(Command::Stats(p.next_bytes()?)),
    },
    Spec {
        name: "ping",
        arity: -1,
        flags: &["fast"],
        summary: "PONG, or the message.",
        args: &[optional("message", "string")],
        options: &[],
        parse: |p| Ok(Command::Ping(p.next_if_any())),
    },
    Spec {
        name: "echo",
        arity: 2,
        flags: &["fast"],
        summary: "The message.",
        args: &[arg("message", "string")],
        options: &[],
        parse: |p| Ok(Command::Echo(p.next_bytes()?)),
    },
    Spec {
        name: "quit",
        arity: -1,
        flags: &["no_auth", "fast"],
        summary: "Closes the connection, letting its keys go.",
        args: &[],
        options: &[],
        parse: |_| Ok(Command::Quit),
    },
    Spec {
        name: "hello",
        arity: -1,
        flags: &["no_auth", "fast"],
        summary: "Switches the protocol (2 or 3), authenticates, names the connection.",
        args: &[optional("protover", "integer")],
        options: &[
            Opt {
                token: "AUTH",
                values: &[("username", "string"), ("password", "string")],
                parse: parse::opt_pair,
            },
            option("SETNAME", &("clientname", "string"), parse::opt_bytes),
        ],
        parse: |p| Ok(Command::Hello(conn::Hello::parse(p)?)),
    },
    Spec {
        name: "auth",
        arity: -2,
        flags: &["no_auth", "fast"],
        summary: "Authenticates as a user (default when none is named) with its token.",
        args: &[optional("username", "string"), arg("token", "string")],
        options: &[],
        parse: |p| Ok(Command::Auth(conn::Auth::parse(p)?)),
    },
    Spec {
        name: "client",
        arity: -2,
        flags: &[],
        summary: "CLIENT SETNAME, GETNAME, SETINFO, ID; LIST, INFO, KILL, HELP.",
        args: &[arg("subcommand", "string")],
        options: &[],
        parse: client,
    },
    Spec {
        name: "select",
        arity: 2,
        flags: &["fast"],
        summary: "Only database 0 exists.",
        args: &[arg("index", "integer")],
        options: &[],
        parse: |p| Ok(Command::Select(p.next_int()?)),
    },
    Spec {
        name: "command",
        arity: -1,
        flags: &[],
        summary: "This table: COMMAND, COMMAND COUNT, COMMAND INFO, COMMAND DOCS.",
        args: &[optional("subcommand", "string")],
        options: &[],
        parse: |p| Ok(Command::Table(Query::parse(p)?)),
    },
    Spec {
        name: "info",
        arity: -1,
        flags: &[],
        summary: "The server's state by section: server clients stats memory cluster locks.",
        args: &[optional("section", "string")],
        options: &[],
        parse: |p| Ok(Command::Info(p.next_if_any())),
    },
    Spec {
        name: "inspect",
        arity: 3,
        flags: &["readonly"],
        summary: "One key: held, fence, held_for_ms, lease_left_ms, waiters, holders, permits_held, and every holder; null when idle.",
        args: &[arg("lock", "string"), arg("key", "string")],
        options: &[],
        parse: |p| Ok(Command::Inspect(p.next_bytes()?, p.next_bytes()?)),
    },
    Spec {
        name: "observe",
        arity: 3,
        flags: &["readonly", "pubsub"],
        summary: "RESP3: OK, then pushes [observe, lock, key, event, fence, permits, holder, note] for the key's state and every change of its holders.",
        args: &[arg("lock", "string"), arg("key", "string")],
        options: &[],
        parse: |p| Ok(Command::Observe(p.next_bytes()?, p.next_bytes()?)),
    },
    Spec {
        name: "unobserve",
        arity: 3,
        flags: &["readonly", "pubsub"],
        summary: "Stops OBSERVE's pushes for the key: OK.",
        args: &[arg("lock", "string"), arg("key", "string")],
        options: &[],
        parse: |p| Ok(Command::Unobserve(p.next_bytes()?, p.next_bytes()?)),
    },
    Spec {
        name: "cluster",
        arity: -2,
        flags: &[],
        summary: "CLUSTER SLOTS, SHARDS, NODES, INFO, MYID, KEYSLOT, for cluster-aware clients.",
        args: &[arg("subcommand", "string")],
        options: &[],
        parse: |p| Ok(Command::Cluster(cluster::Query::parse(p)?)),
    },
];

/// `CLIENT ...`: the connection's own subcommands, or an operator's.
fn client(p: &mut Parse) -> Result<Command, ErrorReply> {
    let sub = p.next_bytes()?;
    p.subcommand(&sub);
    match admin::ClientAdmin::parse(&sub, p)? {
        Some(admin) => Ok(Command::Admin(admin)),
        None => Ok(Command::Client(conn::Client::parse(&sub, p)?)),
    }
}

/// The command named `name` (any case), and its index in [`COMMANDS`].
pub fn find(name: &[u8]) -> Option<(usize, &'static Spec)> {
    COMMANDS
        .iter()
        .enumerate()
        .find(|(_, spec)| spec.name.as_bytes().eq_ignore_ascii_case(name))
}

/// Every command's name, in the table's order.
pub fn names() -> Vec<&'static str> {
    COMMANDS.iter().map(|spec| spec.name).collect()
}

/// What a `COMMAND` asks.
#[derive(Debug, PartialEq)]
pub enum Query {
    All,
    Count,
    Docs(Vec<Vec<u8>>),
    Info(Vec<Vec<u8>>),
}

impl Query {
    fn parse(p: &mut Parse) -> Result<Query, ErrorReply> {
        let Some(sub) = p.next_if_any() else {
            return Ok(Query::All);
        };
        p.subcommand(&sub);
        match sub.to_ascii_uppercase().as_slice() {
            b"COUNT" => Ok(Query::Count),
            b"DOCS" => Ok(Query::Docs(p.rest())),
            b"INFO" => Ok(Query::Info(p.rest())),
            _ => Err(unknown_subcommand(&sub, "COMMAND")),
        }
    }

    pub fn apply(self) -> Value {
        match self {
            Query::All => info(&[]),
            Query::Count => Value::Integer(COMMANDS.len() as i64),
            Query::Docs(names) => docs(&names),
            Query::Info(names) => info(&names),
        }
    }
}

fn bulk(s: &str) -> Value {
    Value::bulk(s)
}

/// `COMMAND` (all) or `COMMAND INFO names...` (null for an unknown one),
/// in Redis's ten fields.
fn info(names: &[Vec<u8>]) -> Value {
    let one = |spec: &Spec| {
        Value::Array(vec![
            bulk(spec.name),
            Value::Integer(spec.arity),
            Value::Set(spec.flags.iter().map(|&f| Value::simple(f)).collect()),
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
            .map(|n| find(n).map_or(Value::Null, |(_, spec)| one(spec)))
            .collect(),
    )
}

/// `COMMAND DOCS [names...]`: a map from name to its doc; unknown names are
/// left out, as Redis does.
fn docs(names: &[Vec<u8>]) -> Value {
    let one = |spec: &Spec| {
        let options = spec.options.iter().map(option_doc);
        let args = spec.args.iter().map(arg_doc).chain(options).collect();
        (
            bulk(spec.name),
            Value::Map(vec![
                (bulk("summary"), bulk(spec.summary)),
                (bulk("since"), bulk("0.1.0")),
                (bulk("group"), bulk("holdline")),
                (bulk("arguments"), Value::Array(args)),
            ]),
        )
    };
    let pairs = if names.is_empty() {
        COMMANDS.iter().map(one).collect()
    } else {
        names
            .iter()
            .filter_map(|n| find(n))
            .map(|(_, spec)| one(spec))
            .collect()
    };
    Value::Map(pairs)
}

fn arg_doc(a: &Arg) -> Value {
    let mut fields = vec![(bulk("name"), bulk(a.name)), (bulk("type"), bulk(a.kind))];
    let flags: Vec<Value> = [(a.optional, "optional"), (a.multiple, "multiple")]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, flag)| Value::simple(*flag))
        .collect();
    if !flags.is_empty() {
        fields.push((bulk("flags"), Value::Array(flags)));
    }
    Value::Map(fields)
}

/// An option, as Redis documents one: its word and one value (`WAIT ms`),
/// or a block of its values after the word (`AUTH username password`).
fn option_doc(o: &Opt) -> Value {
    let optional = (bulk("flags"), Value::Array(vec![Value::simple("optional")]));
    let value_doc = |(name, kind): &(&str, &str)| {
        Value::Map(vec![(bulk("name"), bulk(name)), (bulk("type"), bulk(kind))])
    };
    let fields = match o.values {
        [(name, kind)] => vec![
            (bulk("name"), bulk(name)),
            (bulk("type"), bulk(kind)),
            (bulk("token"), bulk(o.token)),
            optional,
        ],
        values => vec![
            (bulk("name"), bulk(&o.token.to_ascii_lowercase())),
            (bulk("type"), bulk("block")),
            (bulk("token"), bulk(o.token)),
            optional,
            (
                bulk("arguments"),
                Value::Array(values.iter().map(value_doc).collect()),
            ),
        ],
    };
    Value::Map(fields)
}

/// CLIENT LIST's `cmd=`: the name of the command at `index`, `NULL`
/// before any.
pub fn name_of(index: Option<usize>) -> &'static str {
    index
        .and_then(|i| COMMANDS.get(i))
        .map_or("NULL", |spec| spec.name)
}
