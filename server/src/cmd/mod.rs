//! The commands: each parsed from its arguments by a function of its own
//! (through a [`Parse`] cursor, so a missing or extra argument is always an
//! error), then carried out on the connection's [`Session`]. One file per
//! group: `leases` (HOLD, TRYHOLD, RELEASE, RENEW), `rows` (PUT, GET,
//! DEL, STATS), `conn` (PING, ECHO, QUIT, HELLO, AUTH, SELECT, CLIENT's own
//! subcommands), `admin` (INFO, INSPECT, CLIENT LIST, INFO, KILL, HELP:
//! what operators ask), `cluster` (CLUSTER, for cluster-aware clients) and
//! `table` (COMMAND, for redis-cli's hints).

mod admin;
mod cluster;
mod conn;
mod leases;
mod rows;
mod table;

use crate::parse::{shown, Parse};
use crate::session::{Session, Step};
use holdline_resp::Value;

/// One parsed command. Byte strings stay bytes until the session checks them.
#[derive(Debug, PartialEq)]
pub enum Command {
    Hold(leases::Hold),
    TryHold(leases::TryHold),
    Release(i64),
    Renew(i64),
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
    Table(table::Query),
    Info(Option<Vec<u8>>),
    Inspect(Vec<u8>, Vec<u8>),
    Admin(admin::ClientAdmin),
    Cluster(cluster::Query),
}

impl Command {
    /// The command `args` spell, or the error line to answer (kind word first).
    pub fn parse(args: Vec<Vec<u8>>) -> Result<Command, String> {
        let mut args = args.into_iter();
        let name = args.next().unwrap_or_default();
        let mut p = Parse::new(&name, args.collect());
        let command = match name.to_ascii_uppercase().as_slice() {
            b"HOLD" => Command::Hold(leases::Hold::parse(&mut p)?),
            b"TRYHOLD" => Command::TryHold(leases::TryHold::parse(&mut p)?),
            b"RELEASE" => Command::Release(p.next_int()?),
            b"RENEW" => Command::Renew(p.next_int()?),
            b"PUT" => Command::Put(rows::Put::parse(&mut p)?),
            b"GET" => Command::Get(p.next_bytes()?),
            b"DEL" => Command::Del(rows::del_args(&mut p)?),
            b"STATS" => Command::Stats(p.next_bytes()?),
            b"PING" => Command::Ping(p.next_if_any()),
            b"ECHO" => Command::Echo(p.next_bytes()?),
            b"QUIT" => Command::Quit,
            b"HELLO" => Command::Hello(conn::Hello::parse(&mut p)?),
            b"AUTH" => Command::Auth(conn::Auth::parse(&mut p)?),
            b"CLIENT" => client(&mut p)?,
            b"SELECT" => Command::Select(p.next_int()?),
            b"COMMAND" => Command::Table(table::Query::parse(&mut p)?),
            b"INFO" => Command::Info(p.next_if_any()),
            b"INSPECT" => Command::Inspect(p.next_bytes()?, p.next_bytes()?),
            b"CLUSTER" => Command::Cluster(cluster::Query::parse(&mut p)?),
            _ => return Err(unknown_command(&name, &mut p)),
        };
        p.finish()?;
        Ok(command)
    }

    /// Its index in [`crate::clients::COMMAND_NAMES`], as CLIENT LIST shows it.
    fn name_index(&self) -> usize {
        match self {
            Command::Hold(_) => 1,
            Command::TryHold(_) => 2,
            Command::Release(_) => 3,
            Command::Renew(_) => 4,
            Command::Put(_) => 5,
            Command::Get(_) => 6,
            Command::Stats(_) => 7,
            Command::Ping(_) => 8,
            Command::Echo(_) => 9,
            Command::Quit => 10,
            Command::Hello(_) => 11,
            Command::Auth(_) => 12,
            Command::Client(_) | Command::Admin(_) => 13,
            Command::Select(_) => 14,
            Command::Table(_) => 15,
            Command::Info(_) => 16,
            Command::Inspect(..) => 17,
            Command::Cluster(_) => 18,
            Command::Del(_) => 19,
        }
    }

    /// Whether the command may run before the client authenticated.
    fn allowed_before_auth(&self) -> bool {
        matches!(self, Command::Hello(_) | Command::Auth(_) | Command::Quit)
    }

    /// Carries the command out on `session`.
    fn apply(self, session: &mut Session) -> Step {
        let reply = match self {
            Command::Hold(hold) => return hold.apply(session),
            Command::TryHold(try_hold) => try_hold.apply(session),
            Command::Release(id) => leases::release(session, id),
            Command::Renew(id) => leases::renew(session, id),
            Command::Put(put) => put.apply(session),
            Command::Get(row) => rows::get(session, row),
            Command::Del(rows) => rows::del(session, rows),
            Command::Stats(lock) => rows::stats(session, &lock),
            Command::Ping(None) => Value::simple("PONG"),
            Command::Ping(Some(msg)) | Command::Echo(msg) => Value::Bulk(msg),
            Command::Quit => return Step::Close(Value::ok()),
            Command::Hello(hello) => hello.apply(session),
            Command::Auth(auth) => auth.apply(session),
            Command::Client(client) => client.apply(session),
            Command::Select(0) => Value::ok(),
            Command::Select(_) => Value::error("ERR DB index is out of range"),
            Command::Table(query) => query.apply(),
            Command::Info(section) => admin::info(session, section.as_deref()),
            Command::Inspect(lock, key) => admin::inspect(session, &lock, key),
            Command::Admin(admin) => admin.apply(session),
            Command::Cluster(query) => query.apply(session),
        };
        Step::Reply(reply)
    }
}

/// Carries out one command read from the connection: parsed, checked
/// against the connection's authentication, applied.
pub fn execute(session: &mut Session, args: Vec<Vec<u8>>) -> Step {
    let command = match Command::parse(args) {
        Ok(c) => c,
        // An unauthenticated client learns nothing about commands.
        Err(_) if !session.authenticated => return Step::Reply(conn::noauth()),
        Err(text) => return Step::Reply(Value::Error(text)),
    };
    if !session.authenticated && !command.allowed_before_auth() {
        return Step::Reply(conn::noauth());
    }
    session.client.ran(command.name_index());
    if let Some(m) = &session.shared.metrics {
        m.command(command.name_index());
    }
    match command.apply(session) {
        // A brute force is cut off: its last refusal closes the connection.
        Step::Reply(refused) if session.failed_auths >= conn::MAX_FAILED_AUTHS => {
            Step::Close(refused)
        }
        step => step,
    }
}

/// `CLIENT ...`: the connection's own subcommands, or an operator's.
fn client(p: &mut Parse) -> Result<Command, String> {
    let sub = p.next_bytes()?;
    p.subcommand(&sub);
    match admin::ClientAdmin::parse(&sub, p)? {
        Some(admin) => Ok(Command::Admin(admin)),
        None => Ok(Command::Client(conn::Client::parse(&sub, p)?)),
    }
}

/// A frame that is not a command at all: the stream cannot be trusted.
#[derive(Debug, PartialEq)]
pub struct NotACommand(pub &'static str);

/// A frame's arguments: an array of bulk strings (inline commands decode
/// to the same). An empty array is no command and is skipped.
pub fn arguments(frame: Value) -> Result<Vec<Vec<u8>>, NotACommand> {
    let Value::Array(items) = frame else {
        return Err(NotACommand("expected an array of bulk strings"));
    };
    items
        .into_iter()
        .map(|v| match v {
            Value::Bulk(b) => Ok(b),
            _ => Err(NotACommand("expected bulk strings in a command")),
        })
        .collect()
}

/// Redis's text, arguments cut short so a huge one is not echoed back.
fn unknown_command(name: &[u8], p: &mut Parse) -> String {
    let mut text = format!(
        "ERR unknown command '{}', with args beginning with: ",
        shown(name)
    );
    for arg in p.rest().iter().take(8) {
        text.push('\'');
        text.push_str(&shown(arg));
        text.push_str("' ");
    }
    text
}

/// Redis's text for a subcommand it does not know.
fn unknown_subcommand(sub: &[u8], command: &str) -> String {
    format!(
        "ERR unknown subcommand '{}'. Try {command} HELP.",
        shown(sub)
    )
}

#[cfg(test)]
mod tests;
