//! Turning a decoded frame into a [`Command`]: names, arity, options and
//! numbers, with Redis's error texts for what does not parse.

use holdline_resp::Value;
use std::time::Duration;

/// `ttl` when a command does not give one (SPEC: TTL defaults to 10000 ms).
pub const DEFAULT_TTL: Duration = Duration::from_millis(10_000);
/// `wait` when a HOLD does not give one.
pub const DEFAULT_WAIT: Duration = Duration::from_millis(10_000);

/// How a lock handle is opened: the options a HOLD or TRYHOLD carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LockOptions {
    pub ttl: Duration,
    pub max_hold: Option<Duration>,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: DEFAULT_TTL,
            max_hold: None,
        }
    }
}

/// One parsed command. Byte strings stay bytes until the session checks them.
#[derive(Debug, PartialEq)]
pub enum Command {
    Hold {
        lock: Vec<u8>,
        key: Vec<u8>,
        wait: Duration,
        options: LockOptions,
    },
    TryHold {
        lock: Vec<u8>,
        key: Vec<u8>,
        options: LockOptions,
    },
    Release(i64),
    Renew(i64),
    Put {
        lock: Vec<u8>,
        key: Vec<u8>,
        fence: u64,
        row: Vec<u8>,
        value: Vec<u8>,
    },
    Get(Vec<u8>),
    Stats(Vec<u8>),
    Ping(Option<Vec<u8>>),
    Echo(Vec<u8>),
    Quit,
    Hello {
        proto: Option<i64>,
        auth: Option<(Vec<u8>, Vec<u8>)>,
        setname: Option<Vec<u8>>,
    },
    Auth {
        user: Option<Vec<u8>>,
        token: Vec<u8>,
    },
    ClientSetName(Vec<u8>),
    ClientGetName,
    ClientSetInfo,
    ClientId,
    Select(i64),
    /// `COMMAND`: the command table.
    Table,
    TableCount,
    TableDocs(Vec<Vec<u8>>),
    TableInfo(Vec<Vec<u8>>),
}

impl Command {
    /// Whether the command may run before the client authenticated.
    pub fn allowed_before_auth(&self) -> bool {
        matches!(
            self,
            Command::Hello { .. } | Command::Auth { .. } | Command::Quit
        )
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

/// The command `args` spell, or the error line to answer (kind word first).
pub fn parse(args: Vec<Vec<u8>>) -> Result<Command, String> {
    let mut args = args.into_iter();
    let name = args.next().unwrap_or_default();
    let rest: Vec<Vec<u8>> = args.collect();
    let upper = name.to_ascii_uppercase();
    let arity = |ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(format!(
                "ERR wrong number of arguments for '{}' command",
                String::from_utf8_lossy(&name).to_lowercase()
            ))
        }
    };
    let n = rest.len();
    let mut rest = rest.into_iter();
    let mut next = move || rest.next().unwrap_or_default();
    match upper.as_slice() {
        b"HOLD" => {
            arity(n >= 2)?;
            let (lock, key) = (next(), next());
            let opts: Vec<Vec<u8>> = std::iter::from_fn(|| Some(next())).take(n - 2).collect();
            let (wait, options) = hold_options(&opts, true)?;
            Ok(Command::Hold {
                lock,
                key,
                wait: wait.unwrap_or(DEFAULT_WAIT),
                options,
            })
        }
        b"TRYHOLD" => {
            arity(n >= 2)?;
            let (lock, key) = (next(), next());
            let opts: Vec<Vec<u8>> = std::iter::from_fn(|| Some(next())).take(n - 2).collect();
            let (_, options) = hold_options(&opts, false)?;
            Ok(Command::TryHold { lock, key, options })
        }
        b"RELEASE" => {
            arity(n == 1)?;
            Ok(Command::Release(integer(&next())?))
        }
        b"RENEW" => {
            arity(n == 1)?;
            Ok(Command::Renew(integer(&next())?))
        }
        b"PUT" => {
            arity(n == 5)?;
            let (lock, key, fence) = (next(), next(), next());
            let fence = u64::try_from(integer(&fence)?).map_err(|_| not_an_integer())?;
            Ok(Command::Put {
                lock,
                key,
                fence,
                row: next(),
                value: next(),
            })
        }
        b"GET" => {
            arity(n == 1)?;
            Ok(Command::Get(next()))
        }
        b"STATS" => {
            arity(n == 1)?;
            Ok(Command::Stats(next()))
        }
        b"PING" => {
            arity(n <= 1)?;
            Ok(Command::Ping((n == 1).then(next)))
        }
        b"ECHO" => {
            arity(n == 1)?;
            Ok(Command::Echo(next()))
        }
        b"QUIT" => Ok(Command::Quit),
        b"HELLO" => hello(n, &mut next),
        b"AUTH" => {
            arity(n == 1 || n == 2)?;
            let first = next();
            Ok(if n == 1 {
                Command::Auth {
                    user: None,
                    token: first,
                }
            } else {
                Command::Auth {
                    user: Some(first),
                    token: next(),
                }
            })
        }
        b"CLIENT" => {
            arity(n >= 1)?;
            let sub = next();
            let wrong = || {
                Err(format!(
                    "ERR wrong number of arguments for 'client|{}' command",
                    String::from_utf8_lossy(&sub).to_lowercase()
                ))
            };
            match sub.to_ascii_uppercase().as_slice() {
                b"SETNAME" if n == 2 => Ok(Command::ClientSetName(next())),
                b"GETNAME" if n == 1 => Ok(Command::ClientGetName),
                b"ID" if n == 1 => Ok(Command::ClientId),
                b"SETINFO" if n == 3 => {
                    let attr = next();
                    match attr.to_ascii_uppercase().as_slice() {
                        b"LIB-NAME" | b"LIB-VER" => Ok(Command::ClientSetInfo),
                        _ => Err(format!(
                            "ERR Unrecognized option '{}'",
                            String::from_utf8_lossy(&attr)
                        )),
                    }
                }
                b"SETNAME" | b"GETNAME" | b"ID" | b"SETINFO" => wrong(),
                _ => Err(unknown_subcommand(&sub, "CLIENT")),
            }
        }
        b"SELECT" => {
            arity(n == 1)?;
            Ok(Command::Select(integer(&next())?))
        }
        b"COMMAND" => {
            if n == 0 {
                return Ok(Command::Table);
            }
            let sub = next();
            let names: Vec<Vec<u8>> = std::iter::from_fn(|| Some(next())).take(n - 1).collect();
            match sub.to_ascii_uppercase().as_slice() {
                b"COUNT" if n == 1 => Ok(Command::TableCount),
                b"DOCS" => Ok(Command::TableDocs(names)),
                b"INFO" => Ok(Command::TableInfo(names)),
                b"COUNT" => Err("ERR wrong number of arguments for 'command|count' command".into()),
                _ => Err(unknown_subcommand(&sub, "COMMAND")),
            }
        }
        _ => Err(unknown_command(&name, &mut next, n)),
    }
}

fn hello(n: usize, next: &mut impl FnMut() -> Vec<u8>) -> Result<Command, String> {
    let mut proto = None;
    let mut auth = None;
    let mut setname = None;
    let mut left = n;
    if left > 0 {
        let v = next();
        left -= 1;
        proto = Some(
            integer(&v).map_err(|_| "ERR Protocol version is not an integer or out of range")?,
        );
    }
    while left > 0 {
        let word = next();
        left -= 1;
        match word.to_ascii_uppercase().as_slice() {
            b"AUTH" if left >= 2 => {
                auth = Some((next(), next()));
                left -= 2;
            }
            b"SETNAME" if left >= 1 => {
                setname = Some(next());
                left -= 1;
            }
            _ => {
                return Err(format!(
                    "ERR Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(&word)
                ))
            }
        }
    }
    Ok(Command::Hello {
        proto,
        auth,
        setname,
    })
}

/// `[WAIT ms] [TTL ms] [MAXHOLD ms]`, any order, case-insensitive; the
/// last of a repeated option wins, as Redis's own options do.
fn hold_options(
    opts: &[Vec<u8>],
    wait_allowed: bool,
) -> Result<(Option<Duration>, LockOptions), String> {
    let mut wait = None;
    let mut options = LockOptions::default();
    let mut it = opts.iter();
    while let Some(word) = it.next() {
        let value = it.next().ok_or_else(syntax_error)?;
        let ms = Duration::from_millis(milliseconds(value)?);
        match word.to_ascii_uppercase().as_slice() {
            b"WAIT" if wait_allowed => wait = Some(ms),
            b"TTL" => options.ttl = ms,
            b"MAXHOLD" => options.max_hold = Some(ms),
            _ => return Err(syntax_error()),
        }
    }
    Ok((wait, options))
}

fn syntax_error() -> String {
    "ERR syntax error".to_owned()
}

fn not_an_integer() -> String {
    "ERR value is not an integer or out of range".to_owned()
}

/// A decimal i64, strictly (no spaces, no `+`), as Redis reads numbers.
pub fn integer(arg: &[u8]) -> Result<i64, String> {
    let digits = arg.strip_prefix(b"-").unwrap_or(arg);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(not_an_integer());
    }
    std::str::from_utf8(arg)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(not_an_integer)
}

fn milliseconds(arg: &[u8]) -> Result<u64, String> {
    u64::try_from(integer(arg)?).map_err(|_| not_an_integer())
}

fn unknown_subcommand(sub: &[u8], command: &str) -> String {
    format!(
        "ERR unknown subcommand '{}'. Try {command} HELP.",
        shown(sub)
    )
}

/// Redis's text, arguments cut short so a huge one is not echoed back.
fn unknown_command(name: &[u8], next: &mut impl FnMut() -> Vec<u8>, n: usize) -> String {
    let mut text = format!(
        "ERR unknown command '{}', with args beginning with: ",
        shown(name)
    );
    for _ in 0..n.min(8) {
        text.push('\'');
        text.push_str(&shown(&next()));
        text.push_str("' ");
    }
    text
}

/// An argument echoed in an error: printable ASCII only, at most 128 bytes.
fn shown(arg: &[u8]) -> String {
    arg.iter()
        .take(128)
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                char::from(b)
            } else {
                '?'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(words: &[&str]) -> Result<Command, String> {
        parse(words.iter().map(|w| w.as_bytes().to_vec()).collect())
    }

    #[test]
    fn hold_with_options_in_any_order_and_case() {
        assert_eq!(
            cmd(&["hold", "inv", "9", "maxhold", "500", "Wait", "0", "TTL", "30"]),
            Ok(Command::Hold {
                lock: b"inv".to_vec(),
                key: b"9".to_vec(),
                wait: Duration::ZERO,
                options: LockOptions {
                    ttl: Duration::from_millis(30),
                    max_hold: Some(Duration::from_millis(500)),
                },
            })
        );
        assert_eq!(
            cmd(&["HOLD", "inv", "9"]),
            Ok(Command::Hold {
                lock: b"inv".to_vec(),
                key: b"9".to_vec(),
                wait: DEFAULT_WAIT,
                options: LockOptions::default(),
            })
        );
    }

    #[test]
    fn refusals_carry_redis_texts() {
        assert_eq!(
            cmd(&["HOLD", "inv"]),
            Err("ERR wrong number of arguments for 'hold' command".into())
        );
        assert_eq!(
            cmd(&["HOLD", "inv", "9", "WAIT"]),
            Err("ERR syntax error".into())
        );
        assert_eq!(
            cmd(&["TRYHOLD", "inv", "9", "WAIT", "1"]),
            Err("ERR syntax error".into())
        );
        assert_eq!(
            cmd(&["HOLD", "inv", "9", "WAIT", "1s"]),
            Err(not_an_integer())
        );
        assert_eq!(
            cmd(&["HOLD", "inv", "9", "TTL", "-5"]),
            Err(not_an_integer())
        );
        assert_eq!(cmd(&["RELEASE", " 1"]), Err(not_an_integer()));
        assert_eq!(
            cmd(&["PUT", "l", "k", "-1", "r", "v"]),
            Err(not_an_integer())
        );
        assert_eq!(
            cmd(&["FROB", "a", "b"]),
            Err("ERR unknown command 'FROB', with args beginning with: 'a' 'b' ".into())
        );
        assert_eq!(
            cmd(&["CLIENT", "MAINT_NOTIFICATIONS", "on"]),
            Err("ERR unknown subcommand 'MAINT_NOTIFICATIONS'. Try CLIENT HELP.".into())
        );
        assert_eq!(
            cmd(&["HELLO", "x"]),
            Err("ERR Protocol version is not an integer or out of range".into())
        );
    }

    #[test]
    fn hello_parts() {
        assert_eq!(
            cmd(&["HELLO", "3", "AUTH", "default", "tok", "SETNAME", "me"]),
            Ok(Command::Hello {
                proto: Some(3),
                auth: Some((b"default".to_vec(), b"tok".to_vec())),
                setname: Some(b"me".to_vec()),
            })
        );
        assert!(cmd(&["HELLO", "3", "AUTH", "only-user"]).is_err());
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
}
