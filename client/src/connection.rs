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
use holdline_resp::{encode_command, Decoder, Value};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, ToSocketAddrs};

/// The largest reply frame a connection accepts (Redis's own bulk limit).
pub const MAX_REPLY_FRAME: usize = 512 << 20;

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
            match self.decoder.decode(&mut self.buf) {
                Ok(Some(v)) => return Ok(v),
                Ok(None) => {}
                Err(e) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("a malformed reply: {e}"),
                    ))
                }
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
    pub async fn connect(addr: impl ToSocketAddrs + fmt::Display) -> Result<Connection, Error> {
        Connection::open(addr, None, None).await
    }

    /// Connects and says `HELLO 3 AUTH default <token>`.
    pub async fn connect_with_token(
        addr: impl ToSocketAddrs + fmt::Display,
        token: &str,
    ) -> Result<Connection, Error> {
        Connection::open(addr, Some(&Auth::default_user(token)), None).await
    }

    /// Connects to `addr`, over TLS when given `tls`, and says `HELLO 3`
    /// (with `AUTH <user> <token>`). A TLS failure, in the handshake or in
    /// an alert that ends the connection before `HELLO` is answered, is
    /// `tls_failed`.
    pub(crate) async fn open(
        addr: impl ToSocketAddrs + fmt::Display,
        auth: Option<&Auth>,
        tls: Option<&Tls>,
    ) -> Result<Connection, Error> {
        let hostport = addr.to_string();
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
        let conn = Connection::new(rd, wr, peer, tls.is_some());
        conn.say_hello(auth, Some(&hostport))
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
        Connection::new(rd, wr, peer, false)
            .say_hello(auth.as_ref(), None)
            .await
    }

    fn new(rd: ReadHalf, wr: WriteHalf, peer: Option<SocketAddr>, tls: bool) -> Connection {
        Connection {
            reader: FrameReader {
                stream: rd,
                buf: BytesMut::with_capacity(READ_CHUNK),
                decoder: Decoder::new(MAX_REPLY_FRAME),
                broken: None,
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

    /// Sends every queued command.
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

    /// The next frame of any kind, pushes included. Cancel-safe.
    pub async fn read_frame(&mut self) -> Result<Value, Error> {
        self.reader
            .read_frame()
            .await
            .map_err(texts::connection_closed)
    }

    /// Sends one command (and anything queued before it) and reads its reply.
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
