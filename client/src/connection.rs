//! The low-level connection: one TCP stream (plain, or TLS over it)
//! speaking RESP3, commands in, replies out, pushes to a handler.
//!
//! Generic RESP, so the same code drives holdline and `redis-server` (the
//! benchmark harness sends `SET k v NX PX 30000` and `EVALSHA` through it).
//! Commands are encoded into one reused buffer and written when flushed, so
//! a caller pipelines by queueing several before reading their replies; the
//! only allocation per command is the decoded reply itself.

use crate::error::Error;
use crate::options::{Auth, Tls};
use crate::stream::{self, ReadHalf, WriteHalf};
use crate::texts;
use bytes::BytesMut;
use holdline::ErrorKind;
use holdline_resp::{encode_command, Decoder, Value};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, ToSocketAddrs};

/// The largest reply frame a [`Connection::connect`] accepts (Redis's own
/// bulk limit).
pub const MAX_REPLY_FRAME: usize = 512 << 20;

/// The largest reply a store's connection accepts unless
/// [`ConnectOptions::max_reply_bytes`](crate::ConnectOptions::max_reply_bytes)
/// says otherwise: 64 MiB. A reply whose header announces more fails the
/// connection at once (`reply_too_large`), before any of it is read.
pub const MAX_REPLY_BYTES: usize = 64 << 20;

/// What a connection does with a RESP3 push (its items, the kind first).
pub type PushHandler = Box<dyn FnMut(Vec<Value>) + Send>;

/// One connection to a RESP server (holdline or Redis), after `HELLO 3`.
///
/// ```no_run
/// # async fn demo() -> Result<(), holdline_client::Error> {
/// use holdline_client::{Connection, Value};
///
/// let mut conn = Connection::connect("127.0.0.1:7380").await?;
/// // One round trip:
/// let reply = conn.command(&["HOLD", "invoices", "9"]).await?;
/// // Pipelined: queue several, flush once, read as many replies.
/// conn.queue(&["PING"]);
/// conn.queue(&["ECHO", "hi"]);
/// conn.flush().await?;
/// assert_eq!(conn.read_reply().await?, Value::simple("PONG"));
/// assert_eq!(conn.read_reply().await?, Value::bulk("hi"));
/// # let _ = reply; Ok(()) }
/// ```
pub struct Connection {
    pub(crate) reader: FrameReader,
    pub(crate) writer: FrameWriter,
    hello: Value,
    pushes: Option<PushHandler>,
    peer: Option<SocketAddr>,
    tls: bool,
}

/// The read side: a buffer and the streaming decoder that keeps its place.
pub(crate) struct FrameReader {
    stream: ReadHalf,
    buf: BytesMut,
    decoder: Decoder,
    /// Set once the stream failed: every later read fails the same way.
    broken: Option<(io::ErrorKind, String)>,
    /// `host:port`, as the texts of a server that is not RESP name it.
    hostport: String,
    /// Bytes of the frame being decoded that the decoder consumed already.
    consumed: usize,
}

/// An I/O error's inner error when the server sent what a RESP client
/// cannot take (`not_resp`, `reply_too_large`): its whole text.
#[derive(Debug)]
struct Garbled(String);

impl fmt::Display for Garbled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Garbled {}

/// `tls_failed`'s reason for a TLS server met in plain text.
const SPEAKS_TLS: &str = "the server speaks TLS: connect with rediss:// or a TLS option";

/// Whether `b` starts a RESP2 or RESP3 frame.
fn is_resp_type(b: u8) -> bool {
    b"+-:$*_,#!=(%~>|".contains(&b)
}

/// What the header at the front of `buf` announces, in bytes: a blob's
/// length, an aggregate's count times 3 (6 for a map's pairs), else what
/// is buffered.
fn announced(buf: &[u8]) -> u128 {
    let line = buf.split(|&b| b == b'\r').next().unwrap_or_default();
    let n = line
        .get(1..)
        .and_then(|d| std::str::from_utf8(d).ok())
        .and_then(|d| d.parse::<u128>().ok());
    match (line.first(), n) {
        (Some(b'$' | b'!' | b'='), Some(n)) => n,
        (Some(b'*' | b'~' | b'>'), Some(n)) => n * 3,
        (Some(b'%' | b'|'), Some(n)) => n * 6,
        _ => buf.len() as u128,
    }
}

/// The write side: commands queued in one buffer until flushed.
pub(crate) struct FrameWriter {
    stream: WriteHalf,
    out: Vec<u8>,
}

/// Room kept free in the read buffer before each read.
const READ_CHUNK: usize = 16 << 10;

impl FrameReader {
    /// The next frame of any kind, pushes included. Cancel-safe: bytes read
    /// before a cancellation stay in the buffer for the next call.
    pub(crate) async fn read_frame(&mut self) -> io::Result<Value> {
        if let Some((kind, text)) = &self.broken {
            return Err(io::Error::new(*kind, text.clone()));
        }
        let result = self.read_frame_inner().await;
        if let Err(e) = &result {
            self.broken = Some((e.kind(), e.to_string()));
        }
        result
    }

    async fn read_frame_inner(&mut self) -> io::Result<Value> {
        loop {
            // A frame's first byte tells at once whether it is RESP.
            if !self.decoder.is_mid_frame() && self.buf.first().is_some_and(|&b| !is_resp_type(b)) {
                if let [0x15 | 0x16, 0x03, ..] = self.buf[..] {
                    // A TLS record (an alert, a handshake): a TLS server
                    // answering plain text.
                    let why = io::Error::new(io::ErrorKind::InvalidData, SPEAKS_TLS);
                    let text = texts::tls_failed(&self.hostport, why).to_string();
                    return Err(self.garbled(text));
                }
                return Err(self.garbled(texts::not_resp(&self.hostport, &self.buf)));
            }
            let before = self.buf.len();
            let decoded = self.decoder.decode(&mut self.buf);
            self.consumed += before - self.buf.len();
            match decoded {
                Ok(Some(v)) => {
                    self.consumed = 0;
                    return Ok(v);
                }
                Ok(None) => {}
                // The decoder leaves the header it refused at the front.
                Err(e) if e.is_too_large() => {
                    // What the header announced; when only the frame's
                    // sum is over, that sum.
                    let limit = self.decoder.max_frame();
                    let mut size = announced(&self.buf);
                    if size <= limit as u128 {
                        size += self.consumed as u128;
                    }
                    return Err(self.garbled(texts::reply_too_large(&self.hostport, size, limit)));
                }
                Err(_) => return Err(self.garbled(texts::not_resp(&self.hostport, &self.buf))),
            }
            if self.buf.capacity() - self.buf.len() < READ_CHUNK / 4 {
                self.buf.reserve(READ_CHUNK);
            }
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                ));
            }
        }
    }
}

impl FrameReader {
    fn garbled(&self, text: String) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, Garbled(text))
    }
}

impl FrameWriter {
    pub(crate) fn queue<A: AsRef<[u8]>>(&mut self, args: &[A]) {
        encode_command(args, &mut self.out);
    }

    pub(crate) fn queue_encoded(&mut self, frame: &[u8]) {
        self.out.extend_from_slice(frame);
    }

    pub(crate) async fn flush(&mut self) -> io::Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        let result = self.stream.write_all(&self.out).await;
        self.out.clear();
        result?;
        // TLS may keep the last record back until flushed; TCP's flush
        // does nothing.
        self.stream.flush().await
    }
}

impl Connection {
    /// Connects to `addr` (anything tokio resolves: `"127.0.0.1:7380"`, a
    /// `SocketAddr`) and says `HELLO 3`.
    ///
    /// Fails `closed` when nothing listens there or the connection drops
    /// (`cannot_connect`, `connection_closed` in `clients/texts.json`), or
    /// when nothing is answered within the connect timeout (10 s,
    /// [`CONNECT_TIMEOUT`](crate::CONNECT_TIMEOUT)); `invalid` when the
    /// server wants a token. This generic layer does not ask that the
    /// server be holdline ([`Store::connect`](crate::Store::connect) does).
    pub async fn connect(addr: impl ToSocketAddrs + fmt::Display) -> Result<Connection, Error> {
        let hostport = addr.to_string();
        Connection::open(addr, hostport, None, None, MAX_REPLY_FRAME, false).await
    }

    /// Connects and says `HELLO 3 AUTH default <token>`. Fails as
    /// [`connect`](Connection::connect) does, and `invalid` when the server
    /// refuses the token.
    pub async fn connect_with_token(
        addr: impl ToSocketAddrs + fmt::Display,
        token: &str,
    ) -> Result<Connection, Error> {
        let hostport = addr.to_string();
        let auth = Auth::default_user(token);
        Connection::open(addr, hostport, Some(&auth), None, MAX_REPLY_FRAME, false).await
    }

    /// Connects to `addr`, over TLS when given `tls`, and says `HELLO 3`
    /// (with `AUTH <user> <token>`). A TLS failure, in the handshake or in
    /// an alert that ends the connection before `HELLO` is answered, is
    /// `tls_failed`. A reply over `max_reply` bytes fails the connection
    /// (`reply_too_large`); with `holdline_only`, a `HELLO` answered by
    /// another server fails it too (`not_holdline`).
    pub(crate) async fn open(
        addr: impl ToSocketAddrs,
        hostport: String,
        auth: Option<&Auth>,
        tls: Option<&Tls>,
        max_reply: usize,
        holdline_only: bool,
    ) -> Result<Connection, Error> {
        let tcp = TcpStream::connect(&addr)
            .await
            .map_err(|e| texts::cannot_connect(&hostport, e))?;
        // Small frames, one per round trip: do not let Nagle hold them back.
        tcp.set_nodelay(true).map_err(texts::connection_closed)?;
        let peer = tcp.peer_addr().ok();
        let (rd, wr) = match tls {
            None => stream::plain(tcp),
            Some(tls) => stream::tls(tls, tcp)
                .await
                .map_err(|e| texts::tls_failed(&hostport, e))?,
        };
        let conn = Connection::new(rd, wr, peer, tls.is_some(), &hostport, max_reply);
        conn.say_hello(auth, Some(&hostport), holdline_only)
            .await
            .map_err(|e| match e.io_error() {
                Some(io) if tls.is_some() && stream::is_tls_failure(io) => {
                    let reason = io::Error::new(io.kind(), io.to_string());
                    texts::tls_failed(&hostport, reason)
                }
                _ => e,
            })
    }

    /// Takes a connected stream and says `HELLO 3` (with `AUTH default
    /// <token>` when given one). A server that wants a token and got none,
    /// or refused it, fails here, kind [`ErrorKind::Invalid`](crate::ErrorKind).
    pub async fn from_stream(stream: TcpStream, token: Option<&str>) -> Result<Connection, Error> {
        stream.set_nodelay(true).map_err(texts::connection_closed)?;
        let peer = stream.peer_addr().ok();
        let (rd, wr) = stream::plain(stream);
        let auth = token.map(Auth::default_user);
        let hostport = peer.map_or_else(|| "?".to_owned(), |p| p.to_string());
        Connection::new(rd, wr, peer, false, &hostport, MAX_REPLY_FRAME)
            .say_hello(auth.as_ref(), None, false)
            .await
    }

    fn new(
        rd: ReadHalf,
        wr: WriteHalf,
        peer: Option<SocketAddr>,
        tls: bool,
        hostport: &str,
        max_reply: usize,
    ) -> Connection {
        Connection {
            reader: FrameReader {
                stream: rd,
                buf: BytesMut::with_capacity(READ_CHUNK),
                decoder: Decoder::new(max_reply),
                broken: None,
                hostport: hostport.to_owned(),
                consumed: 0,
            },
            writer: FrameWriter {
                stream: wr,
                out: Vec::with_capacity(256),
            },
            hello: Value::Null,
            pushes: None,
            peer,
            tls,
        }
    }

    /// `HELLO 3`; a refusal other than the token's is `connect_refused`
    /// naming `hostport` when it is known, else the server's line.
    async fn say_hello(
        mut self,
        auth: Option<&Auth>,
        hostport: Option<&str>,
        holdline_only: bool,
    ) -> Result<Connection, Error> {
        let reply = match auth {
            Some(Auth { user, token }) => {
                self.command(&["HELLO", "3", "AUTH", user.as_str(), token.as_str()])
                    .await?
            }
            None => self.command(&["HELLO", "3"]).await?,
        };
        if let Value::Error(text) = &reply {
            return Err(hello_refused(text, hostport));
        }
        if let (true, Some(hostport)) = (holdline_only, hostport) {
            check_holdline(&reply, hostport)?;
        }
        self.hello = reply;
        Ok(self)
    }

    /// The server's answer to `HELLO` (a map with `server`, `version`, `proto`...).
    pub fn hello(&self) -> &Value {
        &self.hello
    }

    /// Where RESP3 pushes go from now on (they are dropped without one).
    pub fn set_push_handler(&mut self, handler: impl FnMut(Vec<Value>) + Send + 'static) {
        self.pushes = Some(Box::new(handler));
    }

    /// Queues a command (its arguments as bulk strings); nothing is sent
    /// until [`flush`](Connection::flush).
    pub fn queue<A: AsRef<[u8]>>(&mut self, args: &[A]) {
        self.writer.queue(args);
    }

    /// Sends every queued command. Fails `closed` when the connection
    /// is gone (the commands may or may not have reached the server).
    pub async fn flush(&mut self) -> Result<(), Error> {
        self.writer.flush().await.map_err(texts::connection_closed)
    }

    /// The next reply, in command order. Pushes that arrive first go to the
    /// push handler. An error reply is `Ok(Value::Error(..))`: this layer is
    /// generic RESP ([`Error::from_reply`] reads one as holdline's).
    /// Cancel-safe.
    pub async fn read_reply(&mut self) -> Result<Value, Error> {
        loop {
            match self.read_frame().await? {
                Value::Push(items) => {
                    if let Some(handler) = &mut self.pushes {
                        handler(items);
                    }
                }
                reply => return Ok(reply),
            }
        }
    }

    /// The next frame of any kind, pushes included. Cancel-safe. Fails
    /// `closed` when the connection ends, or when the server sends bytes
    /// that are not RESP or a frame past the reply limit (the connection
    /// is of no more use then).
    pub async fn read_frame(&mut self) -> Result<Value, Error> {
        self.reader.read_frame().await.map_err(read_failed)
    }

    /// Sends one command (and anything queued before it) and reads its
    /// reply. An error reply is `Ok(Value::Error(..))`; the call fails
    /// only as [`flush`](Connection::flush) and
    /// [`read_reply`](Connection::read_reply) do.
    pub async fn command<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Value, Error> {
        self.queue(args);
        self.flush().await?;
        self.read_reply().await
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.peer)
            .field("tls", &self.tls)
            .field("queued_bytes", &self.writer.out.len())
            .finish()
    }
}

/// A failed read: the server's bytes that are no RESP (or a reply over the
/// limit) say so in their own text; anything else is `connection_closed`.
pub(crate) fn read_failed(e: io::Error) -> Error {
    let text = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<Garbled>())
        .map(|g| g.0.clone());
    match text {
        Some(text) => Error::with_io(ErrorKind::Closed, text, e),
        None => texts::connection_closed(e),
    }
}

/// `HELLO`'s answer names the server: another than holdline fails the
/// connection, `invalid`, with the name and version it gave.
fn check_holdline(hello: &Value, hostport: &str) -> Result<(), Error> {
    let field = |name: &str| -> Option<String> {
        let pairs: Vec<(&Value, &Value)> = match hello {
            Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
            // RESP2's flat array of fields and values.
            Value::Array(flat) => flat.chunks_exact(2).map(|p| (&p[0], &p[1])).collect(),
            _ => Vec::new(),
        };
        pairs
            .into_iter()
            .find_map(|(k, v)| (text_of(k)? == name).then(|| text_of(v)).flatten())
    };
    match field("server") {
        Some(server) if server == "holdline" => Ok(()),
        Some(server) => {
            let named = match field("version") {
                Some(version) => format!("{server} {version}"),
                None => server,
            };
            Err(texts::not_holdline(hostport, Some(&named)))
        }
        None => Err(texts::not_holdline(hostport, None)),
    }
}

/// A string value's text (bulk, simple or verbatim).
fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::Simple(s) | Value::Verbatim(s) => Some(s.clone()),
        _ => None,
    }
}

/// What a refused `HELLO` means: no token, a wrong one, or (from a
/// server that is not holdline) whatever it said.
fn hello_refused(text: &str, hostport: Option<&str>) -> Error {
    match (text.split(' ').next(), hostport) {
        (Some("NOAUTH"), _) => texts::token_missing(),
        (Some("WRONGPASS"), _) => texts::token_refused(),
        // Any other refusal: the server's connection limit, say.
        (_, Some(hostport)) => texts::connect_refused(hostport, text),
        (_, None) => Error::from_reply(text),
    }
}
