//! The values RESP2 and RESP3 carry, and the protocol version a peer speaks.

use std::fmt;

/// The protocol version spoken on a connection (`HELLO 2` or `HELLO 3`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Proto {
    /// RESP2: strings, errors, integers, bulk strings, arrays; null is `$-1`.
    Resp2,
    /// RESP3: adds maps, sets, pushes, doubles, booleans, big numbers,
    /// verbatim strings and a null of its own.
    Resp3,
}

/// One RESP value.
///
/// Decoding folds the several nulls (`$-1`, `*-1`, `_`) into [`Value::Null`]
/// and blob errors (`!`) into [`Value::Error`]; a verbatim string keeps its
/// text without the three-letter format (it is sent back as `txt`).
#[derive(Clone, PartialEq, Debug)]
pub enum Value {
    /// `+OK`
    Simple(String),
    /// `-ERR text`: the whole line after `-`, kind word included.
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$3\r\nabc`: binary-safe bytes.
    Bulk(Vec<u8>),
    /// `$-1`, `*-1` (RESP2) or `_` (RESP3).
    Null,
    /// `*N`
    Array(Vec<Value>),
    /// `%N`: pairs, in wire order.
    Map(Vec<(Value, Value)>),
    /// `~N`
    Set(Vec<Value>),
    /// `>N`: out-of-band data sent to a RESP3 connection.
    Push(Vec<Value>),
    /// `,1.5`
    Double(f64),
    /// `#t` / `#f`
    Boolean(bool),
    /// `(12345678901234567890`: the digits, as text.
    BigNumber(String),
    /// `=N\r\ntxt:...`: the text after the format.
    Verbatim(String),
}

impl Value {
    /// A bulk string of `bytes`.
    pub fn bulk(bytes: impl Into<Vec<u8>>) -> Value {
        Value::Bulk(bytes.into())
    }

    /// A simple string.
    pub fn simple(text: impl Into<String>) -> Value {
        Value::Simple(text.into())
    }

    /// An error reply; `text` starts with its kind word (`ERR`, `INUSE`...).
    pub fn error(text: impl Into<String>) -> Value {
        Value::Error(text.into())
    }

    /// `+OK`.
    pub fn ok() -> Value {
        Value::Simple("OK".to_owned())
    }

    /// The bytes of a string-like value (bulk, simple, verbatim).
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bulk(b) => Some(b),
            Value::Simple(s) | Value::Verbatim(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    /// The text of a string-like value when it is UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        self.as_bytes().and_then(|b| std::str::from_utf8(b).ok())
    }

    /// The integer of an integer reply, or of a string that spells one.
    pub fn as_integer(&self) -> Option<i64> {
        match self {
            Value::Integer(i) => Some(*i),
            other => other.as_str().and_then(|s| s.parse().ok()),
        }
    }

    /// Whether this is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Value::Error(_))
    }
}

impl fmt::Display for Value {
    /// A readable rendering, in the spirit of `redis-cli`'s.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Simple(s) | Value::Verbatim(s) | Value::BigNumber(s) => f.write_str(s),
            Value::Error(s) => write!(f, "(error) {s}"),
            Value::Integer(i) => write!(f, "(integer) {i}"),
            Value::Bulk(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Value::Null => f.write_str("(nil)"),
            Value::Double(d) => write!(f, "(double) {d}"),
            Value::Boolean(b) => write!(f, "({b})"),
            Value::Array(items) | Value::Set(items) | Value::Push(items) => {
                f.write_str("[")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
            Value::Map(pairs) => {
                f.write_str("{")?;
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}: {v}")?;
                }
                f.write_str("}")
            }
        }
    }
}
