//! A cursor over one command's arguments: each step takes the next
//! argument as what it must be (bytes, an integer) and fails
//! with Redis's text when it is missing or malformed; `finish` fails when
//! any is left over. So no command reads past its arguments, or ignores
//! some, by accident.

use crate::reply::ErrorReply;
use std::time::Duration;
use std::vec::IntoIter;

/// A command's arguments after its name.
pub struct Parse {
    /// The command's name as sent, lower-cased, for error texts
    /// (`hold`, or `client|setname` for a subcommand).
    name: String,
    args: IntoIter<Vec<u8>>,
}

impl Parse {
    /// The cursor over `args`, named `name` in its error texts.
    pub fn new(name: &[u8], args: Vec<Vec<u8>>) -> Parse {
        Parse {
            name: String::from_utf8_lossy(name).to_lowercase(),
            args: args.into_iter(),
        }
    }

    /// The same cursor, named as the subcommand `sub` of this command.
    pub fn subcommand(&mut self, sub: &[u8]) {
        self.name = format!(
            "{}|{}",
            self.name,
            String::from_utf8_lossy(sub).to_lowercase()
        );
    }

    /// Arguments not taken yet.
    pub fn remaining(&self) -> usize {
        self.args.len()
    }

    /// The next argument, as bytes.
    pub fn next_bytes(&mut self) -> Result<Vec<u8>, ErrorReply> {
        self.args.next().ok_or_else(|| self.wrong_arity())
    }

    /// The next argument, if any.
    pub fn next_if_any(&mut self) -> Option<Vec<u8>> {
        self.args.next()
    }

    /// The next argument as a decimal `i64`.
    pub fn next_int(&mut self) -> Result<i64, ErrorReply> {
        integer(&self.next_bytes()?)
    }

    /// Every argument left, taken.
    pub fn rest(&mut self) -> Vec<Vec<u8>> {
        self.args.by_ref().collect()
    }

    /// Fails when arguments are left over.
    pub fn finish(&self) -> Result<(), ErrorReply> {
        if self.args.len() == 0 {
            Ok(())
        } else {
            Err(self.wrong_arity())
        }
    }

    /// Redis's text for a missing or extra argument.
    pub fn wrong_arity(&self) -> ErrorReply {
        ErrorReply::err(format!(
            "wrong number of arguments for '{}' command",
            self.name
        ))
    }
}

pub fn syntax_error() -> ErrorReply {
    ErrorReply::err("syntax error")
}

pub fn not_an_integer() -> ErrorReply {
    ErrorReply::err("value is not an integer or out of range")
}

/// A decimal i64, strictly (no spaces, no `+`), as Redis reads numbers.
pub fn integer(arg: &[u8]) -> Result<i64, ErrorReply> {
    let digits = arg.strip_prefix(b"-").unwrap_or(arg);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(not_an_integer());
    }
    std::str::from_utf8(arg)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(not_an_integer)
}

/// A count of milliseconds: a decimal integer, not negative.
pub fn milliseconds(arg: &[u8]) -> Result<Duration, ErrorReply> {
    let n = u64::try_from(integer(arg)?).map_err(|_| not_an_integer())?;
    Ok(Duration::from_millis(n))
}

/// An argument echoed in an error: printable ASCII only, at most 128 bytes.
pub fn shown(arg: &[u8]) -> String {
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

    fn parse(words: &[&str]) -> Parse {
        Parse::new(
            b"HOLD",
            words.iter().map(|w| w.as_bytes().to_vec()).collect(),
        )
    }

    #[test]
    fn a_missing_or_extra_argument_fails_with_redis_text() {
        let mut p = parse(&["a"]);
        assert_eq!(p.next_bytes().unwrap(), b"a");
        let arity = "ERR wrong number of arguments for 'hold' command";
        assert_eq!(p.next_bytes().unwrap_err().to_string(), arity);
        assert!(p.finish().is_ok());
        let p = parse(&["a", "b"]);
        assert_eq!(p.finish().unwrap_err().to_string(), arity);
        let mut p = parse(&[]);
        p.subcommand(b"SetName");
        assert_eq!(
            p.wrong_arity().to_string(),
            "ERR wrong number of arguments for 'hold|setname' command"
        );
    }

    #[test]
    fn numbers_are_strict() {
        for bad in ["", " 1", "+1", "1s", "99999999999999999999"] {
            assert_eq!(
                parse(&[bad]).next_int().unwrap_err(),
                not_an_integer(),
                "{bad:?}"
            );
        }
        assert_eq!(parse(&["-5"]).next_int().unwrap(), -5);
        assert_eq!(milliseconds(b"-5").unwrap_err(), not_an_integer());
        assert_eq!(milliseconds(b"250").unwrap(), Duration::from_millis(250));
    }
}
