//! A cursor over one command's arguments: each step takes the next
//! argument as what it must be (bytes, an integer) and fails
//! with Redis's text when it is missing or malformed; `finish` fails when
//! any is left over. So no command reads past its arguments, or ignores
//! some, by accident.
//!
//! A command's options (`WAIT ms`, `NOTE text`, ...) are [`Opt`]s of its
//! entry in the command table: the cursor carries them, and
//! [`Parse::options`] reads every option word the table lists for the
//! command, and no other, into [`Given`] values.

use crate::reply::ErrorReply;
use std::time::Duration;
use std::vec::IntoIter;

/// A command's arguments after its name.
pub struct Parse {
    /// The command's name as sent, and its subcommand's once known: for
    /// error texts only, so lower-cased only when one is made.
    name: Vec<u8>,
    sub: Option<Vec<u8>>,
    args: IntoIter<Vec<u8>>,
    /// The options its table entry lists.
    options: &'static [Opt],
}

/// One option of a command: its word, the values after it (their names
/// and types, as `COMMAND DOCS` shows them; their count is its arity),
/// and what its values become.
pub struct Opt {
    /// Upper case; matched in any case.
    pub token: &'static str,
    /// Each value's name and type (`("ms", "integer")`).
    pub values: &'static [(&'static str, &'static str)],
    pub parse: fn(&[Vec<u8>]) -> Result<OptValue, ErrorReply>,
}

impl Opt {
    /// How many values follow the word.
    pub fn arity(&self) -> usize {
        self.values.len()
    }
}

/// What an option's values became.
#[derive(Clone, Debug, PartialEq)]
pub enum OptValue {
    Millis(Duration),
    /// A count that fits a `u32` (the core judges its range).
    Count(u32),
    /// `ALL`, where a count may be.
    All,
    Size(usize),
    Bytes(Vec<u8>),
    Pair(Vec<u8>, Vec<u8>),
}

/// How [`Parse::options_with`] treats an option word.
pub struct OptionRules {
    /// The refusal of a word that is no option (or lacks its values).
    pub refuse: fn(&[u8]) -> ErrorReply,
    /// Whether an option may be given again (the last one counts).
    pub repeats: bool,
}

/// Redis's rules for most commands: an unknown or incomplete option, or
/// one given twice (which one was meant?), is `ERR syntax error`.
pub const STRICT: OptionRules = OptionRules {
    refuse: |_| syntax_error(),
    repeats: false,
};

/// The options a command was given, by word.
#[derive(Debug, Default)]
pub struct Given {
    found: Vec<(&'static str, OptValue)>,
}

impl Given {
    /// The value of option `token`, taken.
    pub fn take(&mut self, token: &str) -> Option<OptValue> {
        let at = self.found.iter().position(|(t, _)| *t == token)?;
        Some(self.found.swap_remove(at).1)
    }

    pub fn millis(&mut self, token: &str) -> Option<Duration> {
        match self.take(token)? {
            OptValue::Millis(d) => Some(d),
            other => unreachable!("{token} is no duration: {other:?}"),
        }
    }

    pub fn count(&mut self, token: &str) -> Option<u32> {
        match self.take(token)? {
            OptValue::Count(n) => Some(n),
            other => unreachable!("{token} is no count: {other:?}"),
        }
    }

    pub fn size(&mut self, token: &str) -> Option<usize> {
        match self.take(token)? {
            OptValue::Size(n) => Some(n),
            other => unreachable!("{token} is no size: {other:?}"),
        }
    }

    pub fn bytes(&mut self, token: &str) -> Option<Vec<u8>> {
        match self.take(token)? {
            OptValue::Bytes(b) => Some(b),
            other => unreachable!("{token} is no text: {other:?}"),
        }
    }

    pub fn pair(&mut self, token: &str) -> Option<(Vec<u8>, Vec<u8>)> {
        match self.take(token)? {
            OptValue::Pair(a, b) => Some((a, b)),
            other => unreachable!("{token} is no pair: {other:?}"),
        }
    }
}

impl Parse {
    /// The cursor over `args`, named `name` in its error texts.
    pub fn new(name: Vec<u8>, args: IntoIter<Vec<u8>>) -> Parse {
        Parse {
            name,
            sub: None,
            args,
            options: &[],
        }
    }

    /// The name error texts give the command, lower-cased: `hold`, or
    /// `client|setname` for a subcommand.
    fn shown_name(&self) -> String {
        let name = String::from_utf8_lossy(&self.name).to_lowercase();
        match &self.sub {
            Some(sub) => format!("{name}|{}", String::from_utf8_lossy(sub).to_lowercase()),
            None => name,
        }
    }

    /// The same cursor, reading `options` (its table entry's).
    pub fn with_options(mut self, options: &'static [Opt]) -> Parse {
        self.options = options;
        self
    }

    /// The option of this command that `word` names, if any.
    fn option(&self, word: &[u8]) -> Option<&'static Opt> {
        let options: &'static [Opt] = self.options;
        options
            .iter()
            .find(|o| o.token.as_bytes().eq_ignore_ascii_case(word))
    }

    /// The next argument, unless it is none or one of the command's
    /// option words (a positional argument that may be left out).
    pub fn next_unless_option(&mut self) -> Option<Vec<u8>> {
        let next = self.args.as_slice().first()?;
        if self.option(next).is_some() {
            return None;
        }
        self.args.next()
    }

    /// Every argument left, read as the command's options ([`STRICT`]).
    pub fn options(&mut self) -> Result<Given, ErrorReply> {
        self.options_with(&STRICT)
    }

    /// Every argument left, read as the command's options, in any order
    /// and case, under `rules`.
    pub fn options_with(&mut self, rules: &OptionRules) -> Result<Given, ErrorReply> {
        let mut given = Given::default();
        while let Some(word) = self.args.next() {
            let Some(opt) = self.option(&word) else {
                return Err((rules.refuse)(&word));
            };
            if self.args.len() < opt.arity() {
                return Err((rules.refuse)(&word));
            }
            let value = (opt.parse)(&self.args.as_slice()[..opt.arity()]).map_err(|err| {
                // `TTL 10s` is a common first try: say which option and its unit.
                match opt.values {
                    [("ms", _)] => not_milliseconds(opt.token),
                    _ => err,
                }
            })?;
            if opt.arity() > 0 {
                self.args.nth(opt.arity() - 1);
            }
            if given.take(opt.token).is_some() && !rules.repeats {
                return Err(syntax_error());
            }
            given.found.push((opt.token, value));
        }
        Ok(given)
    }

    /// The same cursor, named as the subcommand `sub` of this command.
    pub fn subcommand(&mut self, sub: &[u8]) {
        self.sub = Some(sub.to_vec());
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
            self.shown_name()
        ))
    }
}

pub fn syntax_error() -> ErrorReply {
    ErrorReply::err("syntax error")
}

pub fn not_an_integer() -> ErrorReply {
    ErrorReply::err("value is not an integer or out of range")
}

/// An option of milliseconds given something else (`TTL 10s`): Redis's
/// text, then the option and its unit. Durations on the wire stay whole
/// milliseconds, as Redis's `PX`: one spelling for every client to send.
pub fn not_milliseconds(token: &str) -> ErrorReply {
    ErrorReply::err(format!(
        "value is not an integer or out of range: {token} takes whole milliseconds ({token} 10000 is 10 s)"
    ))
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

/// An option's value: milliseconds.
pub fn opt_millis(values: &[Vec<u8>]) -> Result<OptValue, ErrorReply> {
    milliseconds(&values[0]).map(OptValue::Millis)
}

/// An option's value: a count of permits (any `u32`).
pub fn opt_count(values: &[Vec<u8>]) -> Result<OptValue, ErrorReply> {
    count(&values[0]).map(OptValue::Count)
}

/// An option's value: a count, or `ALL`.
pub fn opt_count_or_all(values: &[Vec<u8>]) -> Result<OptValue, ErrorReply> {
    if values[0].eq_ignore_ascii_case(b"ALL") {
        return Ok(OptValue::All);
    }
    opt_count(values)
}

/// An option's value: a size, not negative (else a syntax error).
pub fn opt_size(values: &[Vec<u8>]) -> Result<OptValue, ErrorReply> {
    let n = integer(&values[0])?;
    usize::try_from(n)
        .map(OptValue::Size)
        .map_err(|_| syntax_error())
}

/// An option's value: bytes, as given.
pub fn opt_bytes(values: &[Vec<u8>]) -> Result<OptValue, ErrorReply> {
    Ok(OptValue::Bytes(values[0].clone()))
}

/// An option's two values, as given.
pub fn opt_pair(values: &[Vec<u8>]) -> Result<OptValue, ErrorReply> {
    Ok(OptValue::Pair(values[0].clone(), values[1].clone()))
}

/// A count: any `u32`.
pub fn count(arg: &[u8]) -> Result<u32, ErrorReply> {
    u32::try_from(integer(arg)?).map_err(|_| not_an_integer())
}

/// Redis's text for a subcommand it does not know.
pub fn unknown_subcommand(sub: &[u8], command: &str) -> ErrorReply {
    ErrorReply::err(format!(
        "unknown subcommand '{}'. Try {command} HELP.",
        shown(sub)
    ))
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
impl Parse {
    /// The cursor command `name` gets for `words`, without its options.
    pub fn of(name: &str, words: &[&str]) -> Parse {
        let args: Vec<Vec<u8>> = words.iter().map(|w| w.as_bytes().to_vec()).collect();
        Parse::new(name.as_bytes().to_vec(), args.into_iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &[&str]) -> Parse {
        Parse::of("HOLD", words)
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
