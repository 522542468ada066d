//! The streaming decoder: bytes in, whole frames out, with limits checked
//! before anything is buffered or allocated for them.
//!
//! The decoder consumes every complete element (a line, or a bulk string's
//! body) from the buffer as soon as it has it, and keeps the partial frame
//! (the stack of unfinished aggregates, a bulk header waiting for its body,
//! how far it has already searched for a line end) in itself. So a frame
//! that arrives a byte at a time costs one pass over its bytes, not one
//! pass per read, and the caller must keep feeding the same decoder the
//! same stream.

use crate::value::Value;
use bytes::{Buf, BytesMut};
use std::borrow::Cow;
use std::fmt;

/// Aggregates nested deeper than this are refused unless
/// [`Decoder::max_depth`] says otherwise. Commands are one level deep;
/// real replies a handful.
pub const DEFAULT_MAX_DEPTH: usize = 64;

/// The smallest element on the wire (`_\r\n`, `+\r\n`): an aggregate of `n`
/// elements needs at least `3n` more bytes, which bounds what a count may
/// claim before any of its elements arrived.
const MIN_ELEMENT_BYTES: usize = 3;

/// Items reserved up front for an aggregate, whatever its header claims:
/// the rest grows as elements actually arrive.
const MAX_PREALLOCATED_ITEMS: usize = 64;

/// A malformed or oversized frame. The stream cannot be trusted after one:
/// answer `-ERR protocol error: {this}` and close the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError {
    reason: Cow<'static, str>,
    too_large: bool,
}

impl ProtocolError {
    fn new(reason: impl Into<Cow<'static, str>>) -> Self {
        ProtocolError {
            reason: reason.into(),
            too_large: false,
        }
    }

    fn too_large(max_frame: usize) -> Self {
        ProtocolError {
            reason: format!("frame larger than {max_frame} bytes").into(),
            too_large: true,
        }
    }

    /// Whether the frame was refused for its size rather than its form.
    pub fn is_too_large(&self) -> bool {
        self.too_large
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for ProtocolError {}

/// A streaming RESP2/RESP3 decoder with a frame-size limit.
///
/// Call [`decode`](Decoder::decode) whenever new bytes were appended to the
/// buffer; it answers `Ok(None)` until a whole frame is there. After an
/// `Err` the decoder starts afresh, but the stream itself is lost.
#[derive(Debug)]
pub struct Decoder {
    max_frame: usize,
    max_depth: usize,
    inline: bool,
    /// Unfinished aggregates, outermost first.
    stack: Vec<Partial>,
    /// A blob header read, its body not yet all there.
    blob: Option<Blob>,
    /// Bytes of the current frame already consumed from the buffer.
    frame_bytes: usize,
    /// Bytes at the buffer's front already searched for `\n` in vain.
    scanned: usize,
}

#[derive(Debug)]
struct Partial {
    kind: Aggregate,
    /// Elements still to come (a map's pairs count twice).
    left: usize,
    items: Vec<Value>,
}

#[derive(Clone, Copy, Debug)]
enum Aggregate {
    Array,
    Set,
    Push,
    Map,
    /// RESP3 attributes (`|`): read and dropped, as most clients do.
    Attribute,
}

#[derive(Clone, Copy, Debug)]
struct Blob {
    kind: BlobKind,
    len: usize,
}

#[derive(Clone, Copy, Debug)]
enum BlobKind {
    Bulk,
    Error,
    Verbatim,
}

/// What an inline line held.
enum Inline {
    Command(Value),
    Blank,
    Incomplete,
}

/// What one line started.
enum Step {
    /// A whole value (a scalar or an empty aggregate).
    Value(Value),
    /// An aggregate opened, an attribute begun, or a blob awaits its body.
    Pending,
}

impl Decoder {
    /// A decoder refusing any frame over `max_frame` bytes, counted from its
    /// first byte to its last, checked as soon as a header or an unfinished
    /// line shows the frame would exceed it.
    pub fn new(max_frame: usize) -> Decoder {
        Decoder {
            max_frame,
            max_depth: DEFAULT_MAX_DEPTH,
            inline: false,
            stack: Vec::new(),
            blob: None,
            frame_bytes: 0,
            scanned: 0,
        }
    }

    /// Changes the frame limit from the next frame on (a server may allow
    /// larger frames once a client has authenticated).
    pub fn set_max_frame(&mut self, max_frame: usize) {
        self.max_frame = max_frame;
    }

    /// The frame limit in force.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// Refuses aggregates nested deeper than `depth` (default 64).
    pub fn max_depth(mut self, depth: usize) -> Decoder {
        self.max_depth = depth.max(1);
        self
    }

    /// Accepts inline commands, as Redis does for telnet users: a frame
    /// whose first byte is not a RESP type is a line of words split on
    /// spaces and tabs (no quoting), answered as an array of bulk strings.
    /// Blank lines are skipped.
    pub fn inline(mut self, accept: bool) -> Decoder {
        self.inline = accept;
        self
    }

    /// Whether part of a frame has been read and the rest is awaited.
    pub fn is_mid_frame(&self) -> bool {
        self.frame_bytes != 0 || self.blob.is_some() || !self.stack.is_empty()
    }

    /// Consumes one whole frame from `buf`'s front and answers it, or
    /// answers `Ok(None)` when more bytes are needed (the part already
    /// read is kept here, consumed from `buf`).
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Value>, ProtocolError> {
        let result = self.decode_frame(buf);
        if result.is_err() {
            self.reset();
        }
        result
    }

    fn reset(&mut self) {
        self.stack.clear();
        self.blob = None;
        self.frame_bytes = 0;
        self.scanned = 0;
    }

    fn decode_frame(&mut self, buf: &mut BytesMut) -> Result<Option<Value>, ProtocolError> {
        if !self.is_mid_frame() {
            if let Some(command) = whole_command(buf, self.max_frame) {
                self.scanned = 0;
                return Ok(Some(command));
            }
        }
        loop {
            let value = if let Some(blob) = self.blob {
                let need = blob.len + 2;
                if buf.len() < need {
                    // Within the limit (checked at the header): room for
                    // the body now saves regrowing at every read.
                    buf.reserve(need - buf.len());
                    return Ok(None);
                }
                if &buf[blob.len..need] != b"\r\n" {
                    return Err(ProtocolError::new("bulk string not followed by CRLF"));
                }
                let body = buf[..blob.len].to_vec();
                buf.advance(need);
                self.blob = None;
                blob_value(blob.kind, body)?
            } else if self.inline && !self.is_mid_frame() && !buf.is_empty() && !is_type(buf[0]) {
                match self.inline_command(buf)? {
                    Inline::Command(command) => return Ok(Some(command)),
                    Inline::Blank => continue,
                    Inline::Incomplete => return Ok(None),
                }
            } else {
                let Some(line_len) = self.find_line(buf)? else {
                    return Ok(None);
                };
                if line_len < 3 || buf[line_len - 2] != b'\r' {
                    return Err(ProtocolError::new("line not ended by CRLF"));
                }
                let step = self.start(buf[0], &buf[1..line_len - 2])?;
                buf.advance(line_len);
                match step {
                    Step::Value(v) => v,
                    Step::Pending => continue,
                }
            };
            if let Some(frame) = self.place(value) {
                self.frame_bytes = 0;
                return Ok(Some(frame));
            }
        }
    }

    /// The length of the next line with its `\n`, counted into the frame;
    /// `None` while it is incomplete (within the limit).
    fn find_line(&mut self, buf: &BytesMut) -> Result<Option<usize>, ProtocolError> {
        match memchr::memchr(b'\n', &buf[self.scanned..]) {
            Some(i) => {
                let len = self.scanned + i + 1;
                self.scanned = 0;
                self.count(len)?;
                Ok(Some(len))
            }
            None => {
                // Everything buffered belongs to this unfinished line.
                self.scanned = buf.len();
                if self.frame_bytes.saturating_add(buf.len()) > self.max_frame {
                    return Err(ProtocolError::too_large(self.max_frame));
                }
                Ok(None)
            }
        }
    }

    /// Counts `n` more bytes into the frame, refusing it past the limit.
    fn count(&mut self, n: usize) -> Result<(), ProtocolError> {
        self.frame_bytes = self.frame_bytes.saturating_add(n);
        if self.frame_bytes > self.max_frame {
            return Err(ProtocolError::too_large(self.max_frame));
        }
        Ok(())
    }

    /// Refuses a frame whose header already promises more than the limit.
    fn promise(&self, more: usize) -> Result<(), ProtocolError> {
        if self.frame_bytes.saturating_add(more) > self.max_frame {
            return Err(ProtocolError::too_large(self.max_frame));
        }
        Ok(())
    }

    /// A frame's header line: a scalar is whole at once; a blob or an
    /// aggregate starts and is filled by what follows.
    fn start(&mut self, tag: u8, body: &[u8]) -> Result<Step, ProtocolError> {
        let value = match tag {
            b'+' => Value::Simple(text(body)),
            b'-' => Value::Error(text(body)),
            b':' => Value::Integer(integer(body).ok_or(ProtocolError::new("invalid integer"))?),
            b'$' | b'!' | b'=' => return self.start_blob(tag, body),
            b'*' | b'~' | b'>' | b'%' | b'|' => return self.start_aggregate(tag, body),
            b'_' if body.is_empty() => Value::Null,
            b'#' if body == b"t" => Value::Boolean(true),
            b'#' if body == b"f" => Value::Boolean(false),
            b',' => Value::Double(
                std::str::from_utf8(body)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or(ProtocolError::new("invalid double"))?,
            ),
            b'(' if big_number(body) => Value::BigNumber(text(body)),
            b'_' | b'#' | b'(' => return Err(ProtocolError::new("invalid RESP3 scalar")),
            b'?' => return Err(ProtocolError::new("streamed strings are not supported")),
            other => {
                return Err(ProtocolError::new(format!(
                    "unexpected byte {:?} where a type was expected",
                    char::from(other)
                )))
            }
        };
        Ok(Step::Value(value))
    }

    /// `$`, `!` or `=`: a length, then that many bytes (RESP2's null bulk
    /// is whole at once).
    fn start_blob(&mut self, tag: u8, body: &[u8]) -> Result<Step, ProtocolError> {
        let n = integer(body).ok_or(ProtocolError::new("invalid bulk length"))?;
        if n == -1 && tag == b'$' {
            return Ok(Step::Value(Value::Null));
        }
        let len = usize::try_from(n).map_err(|_| ProtocolError::new("invalid bulk length"))?;
        let kind = match tag {
            b'$' => BlobKind::Bulk,
            b'!' => BlobKind::Error,
            _ if len < 4 => return Err(ProtocolError::new("verbatim string without a format")),
            _ => BlobKind::Verbatim,
        };
        self.count(len.saturating_add(2))?;
        self.blob = Some(Blob { kind, len });
        Ok(Step::Pending)
    }

    /// `*`, `~`, `>`, `%` or `|`: a count, then that many elements (twice
    /// as many for a map or attributes), each checked against the limits
    /// before anything is allocated for it.
    fn start_aggregate(&mut self, tag: u8, body: &[u8]) -> Result<Step, ProtocolError> {
        let n = integer(body).ok_or(ProtocolError::new("invalid multibulk length"))?;
        if n == -1 && tag == b'*' {
            return Ok(Step::Value(Value::Null));
        }
        let n = usize::try_from(n).map_err(|_| ProtocolError::new("invalid multibulk length"))?;
        let (kind, elements) = match tag {
            b'*' => (Aggregate::Array, n),
            b'~' => (Aggregate::Set, n),
            b'>' => (Aggregate::Push, n),
            b'%' => (Aggregate::Map, n.saturating_mul(2)),
            _ => (Aggregate::Attribute, n.saturating_mul(2)),
        };
        self.promise(elements.saturating_mul(MIN_ELEMENT_BYTES))?;
        if elements == 0 {
            return Ok(match finish(kind, Vec::new()) {
                Some(v) => Step::Value(v),
                None => Step::Pending,
            });
        }
        if self.stack.len() >= self.max_depth {
            return Err(ProtocolError::new(format!(
                "aggregates nested deeper than {}",
                self.max_depth
            )));
        }
        self.stack.push(Partial {
            kind,
            left: elements,
            items: Vec::with_capacity(elements.min(MAX_PREALLOCATED_ITEMS)),
        });
        Ok(Step::Pending)
    }

    /// Adds a finished value to the innermost aggregate, closing every
    /// aggregate it completes; answers the frame once the outermost closes.
    fn place(&mut self, mut value: Value) -> Option<Value> {
        loop {
            let Some(top) = self.stack.last_mut() else {
                return Some(value);
            };
            top.items.push(value);
            top.left -= 1;
            if top.left > 0 {
                return None;
            }
            let done = self.stack.pop().expect("the top was just seen");
            // An attribute adds nothing to its parent: the value it
            // annotates still comes.
            value = finish(done.kind, done.items)?;
        }
    }

    fn inline_command(&mut self, buf: &mut BytesMut) -> Result<Inline, ProtocolError> {
        let Some(len) = self.find_line(buf)? else {
            return Ok(Inline::Incomplete);
        };
        let line = &buf[..len - 1];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let words: Vec<Value> = crate::inline::split_words(line)
            .map_err(|_| ProtocolError::new("unbalanced quotes in request"))?
            .into_iter()
            .map(Value::Bulk)
            .collect();
        buf.advance(len);
        self.frame_bytes = 0;
        Ok(if words.is_empty() {
            Inline::Blank
        } else {
            Inline::Command(Value::Array(words))
        })
    }
}

/// Arguments a command may have for [`whole_command`] to read it.
const MAX_FAST_ARGS: usize = 16;

/// Most frames a server reads are commands already whole in its buffer:
/// `*N`, then N bulk strings. Such a frame, within `max_frame`, is read
/// here in one pass and consumed, without the resumable machinery. Any
/// other (part of a frame, another shape, more arguments, a malformed or
/// oversized one) answers `None` and consumes nothing: the general path
/// reads it, to the same value or the same error.
fn whole_command(buf: &mut BytesMut, max_frame: usize) -> Option<Value> {
    let bytes = &buf[..];
    let (n, mut at) = length_line(bytes, 0, b'*')?;
    if n == 0 || n > MAX_FAST_ARGS {
        return None;
    }
    let mut bodies = [(0, 0); MAX_FAST_ARGS];
    for body in &mut bodies[..n] {
        let (len, start) = length_line(bytes, at, b'$')?;
        let end = start.checked_add(len)?;
        if bytes.get(end..end.checked_add(2)?) != Some(&b"\r\n"[..]) {
            return None;
        }
        *body = (start, end);
        at = end + 2;
    }
    if at > max_frame {
        return None;
    }
    let items = bodies[..n]
        .iter()
        .map(|&(start, end)| Value::Bulk(bytes[start..end].to_vec()))
        .collect();
    buf.advance(at);
    Some(Value::Array(items))
}

/// `TAG` and a length of at most 18 digits, then CRLF, at `at`: the
/// length and where the line after it starts. `None` for anything else
/// (a sign, a line not all there).
fn length_line(bytes: &[u8], at: usize, tag: u8) -> Option<(usize, usize)> {
    let line = bytes.get(at..)?;
    if line.first() != Some(&tag) {
        return None;
    }
    let digits = line[1..].iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 18 || line.get(1 + digits..3 + digits) != Some(&b"\r\n"[..]) {
        return None;
    }
    let n = line[1..=digits]
        .iter()
        .fold(0, |n, d| n * 10 + usize::from(d - b'0'));
    Some((n, at + 3 + digits))
}

fn is_type(b: u8) -> bool {
    b"+-:$*_,#!=(%~>|?".contains(&b)
}

fn finish(kind: Aggregate, items: Vec<Value>) -> Option<Value> {
    Some(match kind {
        Aggregate::Array => Value::Array(items),
        Aggregate::Set => Value::Set(items),
        Aggregate::Push => Value::Push(items),
        Aggregate::Map => {
            let mut pairs = Vec::with_capacity(items.len() / 2);
            let mut it = items.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                pairs.push((k, v));
            }
            Value::Map(pairs)
        }
        Aggregate::Attribute => return None,
    })
}

fn blob_value(kind: BlobKind, body: Vec<u8>) -> Result<Value, ProtocolError> {
    Ok(match kind {
        BlobKind::Bulk => Value::Bulk(body),
        BlobKind::Error => Value::Error(text(&body)),
        BlobKind::Verbatim => {
            if body[3] != b':' {
                return Err(ProtocolError::new("verbatim string without a format"));
            }
            Value::Verbatim(text(&body[4..]))
        }
    })
}

/// Simple strings are meant to be text; stray bytes are kept visible
/// rather than failing the frame.
fn text(body: &[u8]) -> String {
    String::from_utf8_lossy(body).into_owned()
}

/// A strict decimal: an optional `-`, then 1 to 19 digits, within i64.
fn integer(body: &[u8]) -> Option<i64> {
    let digits = body.strip_prefix(b"-").unwrap_or(body);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(body).ok()?.parse().ok()
}

fn big_number(body: &[u8]) -> bool {
    let digits = body.strip_prefix(b"-").unwrap_or(body);
    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(bytes: &[u8]) -> Result<Option<Value>, ProtocolError> {
        Decoder::new(1 << 20).decode(&mut BytesMut::from(bytes))
    }

    #[test]
    fn scalars() {
        assert_eq!(one(b"+OK\r\n"), Ok(Some(Value::simple("OK"))));
        assert_eq!(one(b"-ERR x y\r\n"), Ok(Some(Value::error("ERR x y"))));
        assert_eq!(one(b":-42\r\n"), Ok(Some(Value::Integer(-42))));
        assert_eq!(one(b"$3\r\na\rb\r\n"), Ok(Some(Value::bulk("a\rb"))));
        assert_eq!(one(b"$0\r\n\r\n"), Ok(Some(Value::bulk(""))));
        assert_eq!(one(b"$-1\r\n"), Ok(Some(Value::Null)));
        assert_eq!(one(b"*-1\r\n"), Ok(Some(Value::Null)));
        assert_eq!(one(b"_\r\n"), Ok(Some(Value::Null)));
        assert_eq!(one(b"#t\r\n"), Ok(Some(Value::Boolean(true))));
        assert_eq!(
            one(b",-inf\r\n"),
            Ok(Some(Value::Double(f64::NEG_INFINITY)))
        );
        assert_eq!(one(b",1.5e3\r\n"), Ok(Some(Value::Double(1500.0))));
        assert_eq!(
            one(b"(-123456789012345678901234567890\r\n"),
            Ok(Some(Value::BigNumber(
                "-123456789012345678901234567890".into()
            )))
        );
        assert_eq!(one(b"!5\r\nERR x\r\n"), Ok(Some(Value::error("ERR x"))));
        assert_eq!(
            one(b"=7\r\ntxt:abc\r\n"),
            Ok(Some(Value::Verbatim("abc".into())))
        );
    }

    #[test]
    fn aggregates() {
        assert_eq!(
            one(b"%2\r\n+a\r\n:1\r\n+b\r\n*2\r\n_\r\n~0\r\n"),
            Ok(Some(Value::Map(vec![
                (Value::simple("a"), Value::Integer(1)),
                (
                    Value::simple("b"),
                    Value::Array(vec![Value::Null, Value::Set(vec![])])
                ),
            ])))
        );
        assert_eq!(
            one(b">1\r\n$4\r\nlost\r\n"),
            Ok(Some(Value::Push(vec![Value::bulk("lost")])))
        );
    }

    #[test]
    fn attributes_are_dropped() {
        assert_eq!(
            one(b"|1\r\n+ttl\r\n:3\r\n*2\r\n|0\r\n:1\r\n:2\r\n"),
            Ok(Some(Value::Array(vec![
                Value::Integer(1),
                Value::Integer(2)
            ])))
        );
    }

    #[test]
    fn frames_come_one_at_a_time() {
        let mut buf = BytesMut::from(&b"+a\r\n:1\r\n+b"[..]);
        let mut d = Decoder::new(100);
        assert_eq!(d.decode(&mut buf), Ok(Some(Value::simple("a"))));
        assert_eq!(d.decode(&mut buf), Ok(Some(Value::Integer(1))));
        assert_eq!(d.decode(&mut buf), Ok(None));
        buf.extend_from_slice(b"\r\n");
        assert_eq!(d.decode(&mut buf), Ok(Some(Value::simple("b"))));
        assert!(buf.is_empty());
    }

    #[test]
    fn malformed_frames() {
        for bad in [
            &b"x\r\n"[..],
            b"$abc\r\n",
            b"$-2\r\n",
            b"$3\r\nabcd\r\n",
            b"*-2\r\n",
            b"*1x\r\n",
            b":12a\r\n",
            b":\r\n",
            b":99999999999999999999\r\n",
            b"#x\r\n",
            b",abc\r\n",
            b"(12a\r\n",
            b"_x\r\n",
            b"=2\r\nab\r\n",
            b"=4\r\nabcd\r\n",
            b"+OK\n",
            b"\n",
            b"$?\r\n",
        ] {
            assert!(
                one(bad).is_err(),
                "{:?} was accepted",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn inline_commands_only_when_asked() {
        let mut d = Decoder::new(100).inline(true);
        let mut buf = BytesMut::from(&b"\r\n  PING\t hi \r\n*1\r\n$4\r\nPING\r\n"[..]);
        let ping_hi = Value::Array(vec![Value::bulk("PING"), Value::bulk("hi")]);
        assert_eq!(d.decode(&mut buf), Ok(Some(ping_hi)));
        assert_eq!(
            d.decode(&mut buf),
            Ok(Some(Value::Array(vec![Value::bulk("PING")])))
        );
        assert!(one(b"PING\r\n").is_err());
        let mut buf = BytesMut::from(&b"PING no end in sight"[..]);
        assert!(Decoder::new(10)
            .inline(true)
            .decode(&mut buf)
            .unwrap_err()
            .is_too_large());
    }
}
