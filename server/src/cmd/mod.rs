//! The commands: each parsed from its arguments by a function of its own
//! (through a [`Parse`] cursor, so a missing or extra argument is always an
//! error), then carried out on the connection's [`Session`]. One file per
//! group: `leases` (HOLD, TRYHOLD, RELEASE, RENEW, NOTE), `rows` (PUT, GET,
//! DEL, STATS), `conn` (PING, ECHO, QUIT, HELLO, AUTH, SELECT, CLIENT's own
//! subcommands), `admin` (INFO, INSPECT, HISTORY, CLIENT LIST, KILL, HELP:
//! what operators ask), `watch` (OBSERVE, UNOBSERVE), `cluster` (CLUSTER,
//! for cluster-aware clients) and `table` (the one table of every
//! command and its options, the [`Command`] each parses to, and COMMAND,
//! which shows it). The group files import none of each other but
//! `conn` (which uses `watch`); `table` imports them, and this file the
//! table.

mod admin;
mod cluster;
mod conn;
mod leases;
mod rows;
mod table;
mod watch;

use crate::parse::{shown, Parse};
use crate::reply::{noauth, ErrorReply};
use crate::session::{Session, Step};
use holdline_resp::Value;
pub use table::Command;

/// Carries `command` out on `session`.
fn apply(command: Command, session: &mut Session) -> Step {
    let reply = match command {
        Command::Hold(hold) => return hold.apply(session),
        Command::TryHold(try_hold) => try_hold.apply(session),
        Command::Reattach(reattach) => return reattach.apply(session),
        Command::Release(id) => leases::release(session, id),
        Command::Renew(id) => leases::renew(session, id),
        Command::Note(id, text) => leases::note(session, id, text),
        Command::History(query) => query.apply(session),
        Command::Put(put) => put.apply(session),
        Command::Get(row) => rows::get(session, row),
        Command::Del(rows) => rows::del(session, rows),
        Command::Stats(lock) => rows::stats(session, &lock),
        Command::Ping(None) => Ok(Value::simple("PONG")),
        Command::Ping(Some(msg)) | Command::Echo(msg) => Ok(Value::Bulk(msg)),
        Command::Quit => return Step::Close(Ok(Value::ok())),
        Command::Hello(hello) => hello.apply(session),
        Command::Auth(auth) => auth.apply(session),
        Command::Client(client) => client.apply(session),
        Command::Select(0) => Ok(Value::ok()),
        Command::Select(_) => Err(ErrorReply::err("DB index is out of range")),
        Command::Table(query) => Ok(query.apply()),
        Command::Info(section) => Ok(admin::info(session, section.as_deref())),
        Command::Inspect(lock, key) => admin::inspect(session, &lock, key),
        Command::Observe(lock, key) => watch::observe(session, &lock, key),
        Command::Unobserve(lock, key) => watch::unobserve(session, &lock, key),
        Command::Admin(admin) => admin.apply(session, table::name_of),
        Command::Cluster(query) => query.apply(session),
    };
    Step::Reply(reply)
}

/// The command `args` spell and its table entry's index.
fn parse(args: Vec<Vec<u8>>) -> Result<(usize, Command), ErrorReply> {
    let mut args = args.into_iter();
    let name = args.next().unwrap_or_default();
    let Some((index, spec)) = table::find(&name) else {
        return Err(unknown_command(&name, &mut Parse::new(name.clone(), args)));
    };
    let mut p = Parse::new(name, args);
    p = p.with_options(spec.options);
    if !spec.arity_fits(p.remaining() + 1) {
        return Err(p.wrong_arity());
    }
    let command = (spec.parse)(&mut p)?;
    p.finish()?;
    Ok((index, command))
}

/// Carries out one command read from the connection: parsed, checked
/// against the connection's authentication, applied.
pub fn execute(session: &mut Session, args: Vec<Vec<u8>>) -> Step {
    let (index, command) = match parse(args) {
        Ok(parsed) => parsed,
        // An unauthenticated client learns nothing about commands.
        Err(_) if !session.authenticated => return Step::Reply(Err(noauth())),
        Err(refusal) => return Step::Reply(Err(refusal)),
    };
    if !session.authenticated && !table::COMMANDS[index].allowed_before_auth() {
        return Step::Reply(Err(noauth()));
    }
    session.client.ran(index);
    if let Some(m) = &session.shared.metrics {
        m.command(index);
    }
    match apply(command, session) {
        // A brute force is cut off: its last refusal closes the connection.
        Step::Reply(refused) if session.failed_auths >= conn::MAX_FAILED_AUTHS => {
            Step::Close(refused)
        }
        step => step,
    }
}

/// Every command's name, in the order of the indices [`execute`] counts
/// commands by.
pub fn names() -> Vec<&'static str> {
    table::names()
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
fn unknown_command(name: &[u8], p: &mut Parse) -> ErrorReply {
    let mut text = format!(
        "unknown command '{}', with args beginning with: ",
        shown(name)
    );
    for arg in p.rest().iter().take(8) {
        text.push('\'');
        text.push_str(&shown(arg));
        text.push_str("' ");
    }
    ErrorReply::err(text)
}

#[cfg(test)]
mod tests;
