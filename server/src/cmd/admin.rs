//! What operators ask: INFO (Redis's format, so `redis-cli INFO` and
//! redis-py's `info()` read it), INSPECT (one key: held, fence, times,
//! waiters, and its holder), and CLIENT LIST, INFO, KILL and HELP.

use crate::clients::ClientState;
use crate::events::Event;
use crate::parse::{integer, syntax_error, Parse};
use crate::record::{HeldKey, LeaseRecord};
use crate::reply::{key_not_utf8, ErrorReply, Reply};
use crate::session::{Counts, Session};
use holdline_resp::{Proto, Value};
use std::fmt::Write;
use std::time::Duration;

/// INFO's sections, in the order a bare INFO answers them.
const SECTIONS: [&str; 6] = ["server", "clients", "stats", "memory", "cluster", "locks"];

/// `INFO [section ...]`: `# Section` headers and `key:value` lines.
pub fn info(s: &Session, section: Option<&[u8]>) -> Value {
    let wanted = section.map(|b| String::from_utf8_lossy(b).to_ascii_lowercase());
    let all = matches!(
        wanted.as_deref(),
        None | Some("all" | "everything" | "default")
    );
    let mut out = String::new();
    for name in SECTIONS {
        if all || wanted.as_deref() == Some(name) {
            if !out.is_empty() {
                out.push_str("\r\n");
            }
            write_section(s, name, &mut out);
        }
    }
    Value::Verbatim(out)
}

fn write_section(s: &Session, name: &str, out: &mut String) {
    let shared = &s.shared;
    let _ = write!(
        out,
        "# {}{}\r\n",
        name[..1].to_ascii_uppercase(),
        &name[1..]
    );
    let mut line = |k: &str, v: &dyn std::fmt::Display| {
        let _ = write!(out, "{k}:{v}\r\n");
    };
    match name {
        "server" => {
            line("holdline_version", &env!("CARGO_PKG_VERSION"));
            line("redis_version", &"7.0.0");
            line(
                "uptime_in_seconds",
                &shared.facts.started.elapsed().as_secs(),
            );
            line("tcp_port", &shared.facts.port);
            line("process_id", &std::process::id());
            line("tls", &u8::from(shared.facts.tls));
        }
        "clients" => {
            line("connected_clients", &shared.clients.count());
            line("blocked_clients", &shared.clients.blocked());
            line("maxclients", &shared.facts.max_clients);
        }
        "stats" => write_stats(s, &mut line),
        "memory" => line("used_memory_rss", &rss_bytes()),
        "cluster" => write_cluster(s, &mut line),
        _ => write_locks(s, out),
    }
}

/// Redis's `cluster_enabled`, then (in a cluster) who this node is, what
/// it serves and how long its etcd lease surely lives.
fn write_cluster(s: &Session, line: &mut impl FnMut(&str, &dyn std::fmt::Display)) {
    let Some(node) = &s.shared.cluster else {
        line("cluster_enabled", &0);
        return;
    };
    line("cluster_enabled", &1);
    line("cluster_node_id", &node.id);
    line("cluster_advertise", &node.advertise);
    line("cluster_partitions", &node.partitions);
    let served: Vec<String> = node.served().iter().map(|p| p.index.to_string()).collect();
    line("cluster_partitions_served", &served.len());
    line("cluster_partitions_served_list", &served.join(","));
    let left = node.deadline().map_or(0, |d| {
        d.saturating_duration_since(std::time::Instant::now())
            .as_millis()
    });
    line("cluster_lease_left_ms", &left);
}

fn write_stats(s: &Session, line: &mut impl FnMut(&str, &dyn std::fmt::Display)) {
    let c = &s.shared.counts;
    line(
        "total_connections_received",
        &Counts::get(&c.connections_received),
    );
    line(
        "total_commands_processed",
        &Counts::get(&c.commands_processed),
    );
    line(
        "rejected_connections",
        &Counts::get(&c.connections_rejected),
    );
    let mut sums = [0u64; 4];
    for (_, st) in s.shared.locks() {
        for (sum, n) in
            sums.iter_mut()
                .zip([st.grants, st.timeouts, st.revocations, st.expirations])
        {
            *sum += n;
        }
    }
    for (name, n) in ["grants", "timeouts", "revocations", "expirations"]
        .iter()
        .zip(sums)
    {
        line(name, &n);
    }
    line("lost_pushes", &Counts::get(&c.lost_pushes));
    line("audit_dropped_events", &s.shared.history.audit_dropped());
}

/// `lock_NAME:live_keys=3,held_keys=1,...`, one line per lock opened that
/// the user may name.
fn write_locks(s: &Session, out: &mut String) {
    for (name, stats) in s.shared.locks() {
        if s.may_use(name.as_bytes()).is_err() {
            continue;
        }
        let fields: Vec<String> = stats
            .fields()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = write!(out, "lock_{name}:{}\r\n", fields.join(","));
    }
}

/// The process's resident memory in bytes (0 where /proc is missing).
fn rss_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|t| t.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    pages * 4096
}

/// `INSPECT lock key`: a map (a flat array in RESP2), or a null for a key
/// with no state.
pub fn inspect(s: &mut Session, lock: &[u8], key: Vec<u8>) -> Reply {
    let place = s.place(&key)?;
    // A look makes no lock: that would fix its count of permits.
    let Some(lock) = s.lock_if_known(&place, lock)? else {
        return Ok(Value::Null);
    };
    let key = String::from_utf8(key).map_err(|e| key_not_utf8(lock.name(), e.as_bytes()))?;
    let Some(info) = lock.inspect(key.as_str()) else {
        return Ok(Value::Null);
    };
    let ms = |d: Option<Duration>| {
        d.map_or(Value::Null, |d| {
            Value::Integer(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        })
    };
    // A lease handed over shows the fence its holder knows.
    let fence = place.partition().map_or(info.fence, |p| {
        p.orphans.holder_fence(lock.name(), &key, info.fence)
    });
    let mut map = vec![
        (Value::bulk("held"), Value::Boolean(info.held)),
        (
            Value::bulk("fence"),
            Value::Integer(i64::try_from(fence).unwrap_or(i64::MAX)),
        ),
        (Value::bulk("held_for_ms"), ms(info.held_for)),
        (Value::bulk("lease_left_ms"), ms(info.lease_left)),
        (Value::bulk("waiters"), Value::Integer(info.waiters as i64)),
        (Value::bulk("holders"), Value::Integer(info.holders.into())),
        (
            Value::bulk("permits_held"),
            Value::Integer(info.permits_held.into()),
        ),
    ];
    if info.held {
        let holders: Vec<Value> = s
            .shared
            .clients
            .holders_of(&HeldKey::new(lock.name(), &key))
            .iter()
            .map(|(client, by)| holder_map(client, by))
            .collect();
        if let Some(oldest) = holders.first() {
            map.push((Value::bulk("holder"), oldest.clone()));
        }
        map.push((Value::bulk("holder_list"), Value::Array(holders)));
    }
    Ok(Value::Map(map))
}

/// One holder of a key, as INSPECT shows it.
fn holder_map(client: &ClientState, by: &LeaseRecord) -> Value {
    let name = client.name().map_or(Value::Null, Value::Bulk);
    Value::Map(vec![
        (Value::bulk("id"), Value::Integer(client.id as i64)),
        (Value::bulk("name"), name),
        (Value::bulk("addr"), Value::bulk(client.addr.to_string())),
        (Value::bulk("lease"), Value::Integer(by.id as i64)),
        (
            Value::bulk("fence"),
            Value::Integer(i64::try_from(by.fence).unwrap_or(i64::MAX)),
        ),
        (Value::bulk("permits"), Value::Integer(by.permits.into())),
        (Value::bulk("note"), Value::bulk(by.note().to_string())),
    ])
}

/// `HISTORY [lock [key]] [COUNT n]`.
#[derive(Debug, PartialEq)]
pub struct History {
    lock: Option<Vec<u8>>,
    key: Option<Vec<u8>>,
    count: usize,
}

/// Events HISTORY answers when it is not told how many.
const HISTORY_COUNT: usize = 100;

impl History {
    pub fn parse(p: &mut Parse) -> Result<History, ErrorReply> {
        let lock = p.next_unless_option();
        let key = lock.as_ref().and_then(|_| p.next_unless_option());
        let mut given = p.options()?;
        Ok(History {
            lock,
            key,
            count: given.size("COUNT").unwrap_or(HISTORY_COUNT),
        })
    }

    /// The events, newest first, of locks this connection may use.
    pub fn apply(self, s: &mut Session) -> Reply {
        if let Some(lock) = &self.lock {
            s.may_use(lock)?;
        }
        let text = |b: Option<Vec<u8>>| b.map(|b| String::from_utf8_lossy(&b).into_owned());
        let (lock, key) = (text(self.lock), text(self.key));
        let events = s
            .shared
            .history
            .recent(lock.as_deref(), key.as_deref(), self.count, |name| {
                s.may_use(name.as_bytes()).is_ok()
            });
        Ok(Value::Array(events.iter().map(|e| event_map(e)).collect()))
    }
}

/// One event, as HISTORY shows it.
fn event_map(e: &Event) -> Value {
    let int = |n: u64| Value::Integer(i64::try_from(n).unwrap_or(i64::MAX));
    let of = &e.of;
    let name = of.holder.name.clone().map_or(Value::Null, Value::bulk);
    let holder = Value::Map(vec![
        (Value::bulk("id"), int(of.holder.id)),
        (Value::bulk("name"), name),
        (Value::bulk("addr"), Value::bulk(of.holder.addr.clone())),
    ]);
    let mut map = vec![
        (Value::bulk("time_ms"), int(e.time_ms)),
        (Value::bulk("event"), Value::bulk(e.event.word())),
        (Value::bulk("lock"), Value::bulk(of.lock())),
        (Value::bulk("key"), Value::bulk(of.key())),
        (Value::bulk("fence"), int(of.fence)),
        (Value::bulk("permits"), int(of.permits.into())),
        (Value::bulk("lease"), int(of.id)),
        (Value::bulk("holder"), holder),
        (Value::bulk("note"), Value::bulk(e.note.to_string())),
        (Value::bulk("held_ms"), e.held_ms.map_or(Value::Null, int)),
    ];
    if let Some(reason) = e.reason {
        map.push((Value::bulk("reason"), Value::bulk(reason)));
    }
    Value::Map(map)
}

/// CLIENT's operator subcommands.
#[derive(Debug, PartialEq)]
pub enum ClientAdmin {
    List,
    Info,
    Kill(Kill),
    Help,
}

/// Which connection `CLIENT KILL` means.
#[derive(Debug, PartialEq)]
pub enum Kill {
    Id(u64),
    Addr(Vec<u8>),
}

impl ClientAdmin {
    /// `None`: a subcommand of the connection's own (SETNAME, ...).
    pub fn parse(sub: &[u8], p: &mut Parse) -> Result<Option<ClientAdmin>, ErrorReply> {
        Ok(Some(match sub.to_ascii_uppercase().as_slice() {
            b"LIST" => ClientAdmin::List,
            b"INFO" => ClientAdmin::Info,
            b"HELP" => ClientAdmin::Help,
            b"KILL" => ClientAdmin::Kill(kill(p)?),
            _ => return Ok(None),
        }))
    }

    /// `name_of`: the command table's name of a command's index (CLIENT
    /// LIST's `cmd=`).
    pub fn apply(self, s: &mut Session, name_of: fn(Option<usize>) -> &'static str) -> Reply {
        match self {
            ClientAdmin::List => {
                let lines: String = s
                    .shared
                    .clients
                    .all()
                    .iter()
                    .filter(|c| s.sees(c))
                    .map(|c| list_line(s, c, name_of))
                    .collect();
                Ok(Value::Verbatim(lines))
            }
            ClientAdmin::Info => Ok(Value::Verbatim(list_line(s, &s.client, name_of))),
            ClientAdmin::Help => Ok(help()),
            ClientAdmin::Kill(which) => kill_client(s, which),
        }
    }
}

/// `KILL ID n`, `KILL ADDR ip:port`, or Redis's old `KILL ip:port`.
fn kill(p: &mut Parse) -> Result<Kill, ErrorReply> {
    let first = p.next_bytes()?;
    if p.remaining() == 0 {
        return Ok(Kill::Addr(first));
    }
    let value = p.next_bytes()?;
    match first.to_ascii_uppercase().as_slice() {
        b"ID" => u64::try_from(integer(&value)?)
            .map(Kill::Id)
            .map_err(|_| ErrorReply::err("client-id should be greater than 0")),
        b"ADDR" => Ok(Kill::Addr(value)),
        _ => Err(syntax_error()),
    }
}

/// Kills a connection the user sees (its own; an admin's, any), logged
/// with who killed whom; another user's connection is no such client.
fn kill_client(s: &Session, which: Kill) -> Reply {
    let target = match &which {
        Kill::Id(id) => s.shared.clients.get(*id),
        Kill::Addr(addr) => s
            .shared
            .clients
            .all()
            .into_iter()
            .find(|c| c.addr.to_string().as_bytes() == addr.as_slice()),
    };
    let target = target.filter(|c| s.sees(c));
    if let Some(c) = &target {
        tracing::info!(
            killer = s.id(),
            killer_user = s.user.as_ref().map_or("", |u| u.name.as_str()),
            killer_addr = %s.client.addr,
            killed = c.id,
            killed_user = c.user().as_deref().unwrap_or(""),
            killed_addr = %c.addr,
            "CLIENT KILL"
        );
    }
    match (target, which) {
        (Some(client), Kill::Id(_)) => {
            client.kill();
            Ok(Value::Integer(1))
        }
        (Some(client), Kill::Addr(_)) => {
            client.kill();
            Ok(Value::ok())
        }
        (None, Kill::Id(_)) => Ok(Value::Integer(0)),
        (None, Kill::Addr(_)) => Err(ErrorReply::err("No such client")),
    }
}

/// One line of CLIENT LIST, in Redis's `key=value` form plus the leases
/// held and the key waited for (`waiting=LOCK/KEY`).
fn list_line(s: &Session, c: &ClientState, name_of: fn(Option<usize>) -> &'static str) -> String {
    let name = c
        .name()
        .map(|n| String::from_utf8_lossy(&n).into_owned())
        .unwrap_or_default();
    let waiting = c
        .waiting()
        .map(|k| format!("{}/{}", k.lock(), escaped(k.key())));
    let resp = if c.id == s.id() && s.proto == Proto::Resp3 {
        3
    } else {
        2
    };
    let flags = if waiting.is_some() { "b" } else { "N" };
    format!(
        "id={} addr={} laddr=- fd=-1 name={name} age={} idle={} flags={flags} db=0 sub=0 psub=0 multi=-1 cmd={} user={} resp={resp} leases={} waiting={}\n",
        c.id,
        c.addr,
        c.age_secs(),
        c.idle_secs(),
        name_of(c.last_command()),
        c.user().as_deref().unwrap_or(""),
        c.lease_count(),
        waiting.unwrap_or_default(),
    )
}

/// A key in one word: spaces, `=` and anything not printable as `\xNN`.
fn escaped(key: &str) -> String {
    let mut out = String::new();
    for b in key.bytes() {
        if b.is_ascii_graphic() && b != b'=' && b != b'\\' {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

fn help() -> Value {
    let lines = [
        "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GETNAME",
        "    Return the name of the current connection.",
        "ID",
        "    Return the ID of the current connection.",
        "INFO",
        "    Return information about the current client connection.",
        "KILL <ip:port> | KILL ID <client-id> | KILL ADDR <ip:port>",
        "    Close a connection; the keys it holds go to the next in line at once.",
        "LIST",
        "    Return information about client connections, with leases=N and waiting=LOCK/KEY.",
        "SETINFO <LIB-NAME|LIB-VER> <value>",
        "    Accepted and ignored, for clients that send it.",
        "SETNAME <name>",
        "    Assign the name <name> to the current connection.",
        "HELP",
        "    Print this help.",
    ];
    Value::Array(lines.iter().map(|l| Value::simple(*l)).collect())
}
