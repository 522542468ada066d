//! RESP2 and RESP3: the values, a streaming decoder and an encoder.
//!
//! The wire format of `holdline serve` and of its clients. The decoder is
//! built for a server facing untrusted peers: it keeps its place between
//! reads (a frame arriving byte by byte is parsed once, not from its start
//! at every read), checks a whole frame's size against a limit *before*
//! buffering or allocating for it (a `$999999999` header is refused, not
//! allocated), and bounds nesting depth.
//!
//! ```
//! use bytes::BytesMut;
//! use holdline_resp::{encode, encode_command, Decoder, Proto, Value};
//!
//! let mut wire = Vec::new();
//! encode_command(&["HOLD", "invoices", "9"], &mut wire);
//! let mut buf = BytesMut::from(&wire[..]);
//! let mut decoder = Decoder::new(1 << 19);
//! let frame = decoder.decode(&mut buf).unwrap().unwrap();
//! assert_eq!(
//!     frame,
//!     Value::Array(vec![Value::bulk("HOLD"), Value::bulk("invoices"), Value::bulk("9")])
//! );
//!
//! let mut out = Vec::new();
//! encode(&Value::Array(vec![Value::Integer(1), Value::Integer(42)]), Proto::Resp3, &mut out);
//! assert_eq!(out, b"*2\r\n:1\r\n:42\r\n");
//! ```
//!
//! Module map, bottom-up (each module uses only those above it; checked by
//! `tests/module_graph.rs`):
//! - `value`: the values RESP2 and RESP3 carry, and the protocol version a
//!   peer speaks; `slot`: a key's hash slot, as Redis Cluster computes it;
//!   `inline`: inline commands (a line of words) split as Redis splits them;
//! - `decode`: the streaming decoder, bytes in, whole frames out, limits
//!   checked before anything is buffered; `encode`: writing values and
//!   commands to the wire.

#![warn(missing_docs)]

mod decode;
mod encode;
mod inline;
pub mod slot;
mod value;

pub use decode::{Decoder, ProtocolError, DEFAULT_MAX_DEPTH};
pub use encode::{encode, encode_command};
pub use value::{Proto, Value};
