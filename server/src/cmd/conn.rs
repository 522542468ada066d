//! The connection's own commands, as Redis answers them, so that clients
//! connect with their default options: HELLO, AUTH, CLIENT, SELECT (PING,
//! ECHO and QUIT need no more than their parse).

use crate::parse::{integer, unknown_subcommand, OptionRules, Parse};
use crate::reply::{ErrorReply, ErrorWord, Reply};
use crate::session::Session;
use holdline_resp::{Proto, Value};

/// `HELLO [protover [AUTH user pass] [SETNAME name]]` (its options are
/// the command table's).
#[derive(Debug, PartialEq)]
pub struct Hello {
    proto: Option<i64>,
    auth: Option<(Vec<u8>, Vec<u8>)>,
    setname: Option<Vec<u8>>,
}

impl Hello {
    pub fn parse(p: &mut Parse) -> Result<Hello, ErrorReply> {
        let mut proto = None;
        if let Some(v) = p.next_if_any() {
            let bad = "Protocol version is not an integer or out of range";
            proto = Some(integer(&v).map_err(|_| ErrorReply::err(bad))?);
        }
        // As Redis: an option may come again (the last counts).
        let mut given = p.options_with(&OptionRules {
            refuse: |word| {
                ErrorReply::err(format!(
                    "Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(word)
                ))
            },
            repeats: true,
        })?;
        Ok(Hello {
            proto,
            auth: given.pair("AUTH"),
            setname: given.bytes("SETNAME"),
        })
    }

    /// Authenticates (when it carries AUTH), names, switches protocol and
    /// answers the server's map. A server that wants a token refuses a
    /// HELLO without it, as Redis does, so a client learns at connect.
    pub fn apply(self, s: &mut Session) -> Reply {
        let proto = match self.proto {
            None => s.proto,
            Some(2) => Proto::Resp2,
            Some(3) => Proto::Resp3,
            Some(_) => {
                let what = "unsupported protocol version";
                return Err(ErrorReply::new(ErrorWord::NoProto, what));
            }
        };
        if let Some((user, token)) = self.auth {
            authenticate(s, Some(&user), &token)?;
        }
        if !s.authenticated {
            return Err(ErrorReply::new(ErrorWord::NoAuth, HELLO_NOAUTH));
        }
        if let Some(name) = self.setname {
            set_name(s, name)?;
        }
        if proto == Proto::Resp2 {
            super::watch::unobserve_all(s);
        }
        s.proto = proto;
        Ok(hello_map(s, proto))
    }
}

fn hello_map(s: &Session, proto: Proto) -> Value {
    let proto_number = match proto {
        Proto::Resp2 => 2,
        Proto::Resp3 => 3,
    };
    let mut map = vec![
        (Value::bulk("server"), Value::bulk("holdline")),
        (
            Value::bulk("version"),
            Value::bulk(env!("CARGO_PKG_VERSION")),
        ),
        (Value::bulk("proto"), Value::Integer(proto_number)),
        (Value::bulk("id"), Value::Integer(s.id() as i64)),
        (Value::bulk("mode"), Value::bulk("standalone")),
        (Value::bulk("role"), Value::bulk("master")),
        (Value::bulk("modules"), Value::Array(vec![])),
    ];
    // A node that hands leases over, and takes them (`SECRET`, REATTACH).
    if s.shared.cluster.is_some() && !crate::cluster::takes_no_handover() {
        map.push((Value::bulk("handover"), Value::Integer(1)));
    }
    Value::Map(map)
}

/// `AUTH [user] token`.
#[derive(Debug, PartialEq)]
pub struct Auth {
    user: Option<Vec<u8>>,
    token: Vec<u8>,
}

impl Auth {
    pub fn parse(p: &mut Parse) -> Result<Auth, ErrorReply> {
        let first = p.next_bytes()?;
        Ok(match p.next_if_any() {
            None => Auth {
                user: None,
                token: first,
            },
            Some(token) => Auth {
                user: Some(first),
                token,
            },
        })
    }

    pub fn apply(self, s: &mut Session) -> Reply {
        if !s.shared.wants_token() && self.user.is_none() {
            // Redis's answer, so a misconfigured client notices.
            return Err(ErrorReply::err(
                "AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
            ));
        }
        authenticate(s, self.user.as_deref(), &self.token)?;
        Ok(Value::ok())
    }
}

/// AUTHs a connection may get wrong: the last refusal closes it.
pub const MAX_FAILED_AUTHS: u32 = 10;

/// Failed AUTHs logged at most this often, server-wide (a brute force must
/// not flood the log); the rest are counted in the next line.
const FAILURE_LOG_EVERY_MS: u64 = 1000;

/// Authenticates `s` as `user` (`default` when none) by `token`, or
/// counts and logs the failure and answers WRONGPASS. On a server
/// without authentication, anyone is `default` already.
fn authenticate(s: &mut Session, user: Option<&[u8]>, token: &[u8]) -> Result<(), ErrorReply> {
    if !s.shared.wants_token() {
        return Ok(());
    }
    match s.shared.users.now().authenticate(user, token) {
        Some(user) => {
            s.authenticated_as(user);
            Ok(())
        }
        None => {
            s.failed_auths += 1;
            log_failed_auth(s, user);
            Err(wrongpass())
        }
    }
}

/// Logs a failed AUTH with the address and the user name tried, at most
/// once a second server-wide, counting those not logged.
fn log_failed_auth(s: &Session, user: Option<&[u8]>) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST_MS: AtomicU64 = AtomicU64::new(0);
    static UNLOGGED: AtomicU64 = AtomicU64::new(0);
    let now = s.shared.facts.started.elapsed().as_millis() as u64 + FAILURE_LOG_EVERY_MS;
    // Relaxed: a rate limit for log lines; a race logs one line more or less.
    let last = LAST_MS.load(Ordering::Relaxed);
    if now < last + FAILURE_LOG_EVERY_MS
        || LAST_MS
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        UNLOGGED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let user = String::from_utf8_lossy(user.unwrap_or(b"default"));
    tracing::warn!(
        addr = %s.client.addr,
        client = s.id(),
        %user,
        failures = s.failed_auths,
        not_logged_since = UNLOGGED.swap(0, Ordering::Relaxed),
        "AUTH refused"
    );
}

/// `CLIENT SETNAME | GETNAME | ID | SETINFO`.
#[derive(Debug, PartialEq)]
pub enum Client {
    SetName(Vec<u8>),
    GetName,
    Id,
    SetInfo,
}

impl Client {
    pub fn parse(sub: &[u8], p: &mut Parse) -> Result<Client, ErrorReply> {
        let client = match sub.to_ascii_uppercase().as_slice() {
            b"SETNAME" => Client::SetName(p.next_bytes()?),
            b"GETNAME" => Client::GetName,
            b"ID" => Client::Id,
            b"SETINFO" => {
                let attr = p.next_bytes()?;
                p.next_bytes()?;
                match attr.to_ascii_uppercase().as_slice() {
                    b"LIB-NAME" | b"LIB-VER" => Client::SetInfo,
                    _ => {
                        return Err(ErrorReply::err(format!(
                            "Unrecognized option '{}'",
                            String::from_utf8_lossy(&attr)
                        )))
                    }
                }
            }
            _ => return Err(unknown_subcommand(sub, "CLIENT")),
        };
        Ok(client)
    }

    pub fn apply(self, s: &mut Session) -> Reply {
        Ok(match self {
            Client::SetName(name) => set_name(s, name).map(|()| Value::ok())?,
            Client::GetName => s.client.name().map_or(Value::Null, Value::Bulk),
            Client::Id => Value::Integer(s.id() as i64),
            Client::SetInfo => Value::ok(),
        })
    }
}

fn set_name(s: &mut Session, name: Vec<u8>) -> Result<(), ErrorReply> {
    if !name.iter().all(|&b| (b'!'..=b'~').contains(&b)) {
        return Err(ErrorReply::err(
            "Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    s.client.set_name((!name.is_empty()).then_some(name));
    // The events of its later leases name it anew.
    s.holder = None;
    Ok(())
}

const HELLO_NOAUTH: &str = "HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time";

pub fn wrongpass() -> ErrorReply {
    let what = "invalid username-password pair or user is disabled.";
    ErrorReply::new(ErrorWord::WrongPass, what)
}
