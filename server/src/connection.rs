//! A client's byte stream, framed: reading into an input buffer, decoding
//! RESP frames (resumable, limits checked before anything is buffered, and
//! inline commands), and collecting answers in an output buffer written in
//! one go. Generic over the stream, so a TLS stream serves as a TCP one.

use bytes::BytesMut;
use holdline_resp::{encode, Decoder, Proto, ProtocolError, Value};
use std::io;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Room made for a read, at first. Small: ten thousand idle connections
/// each keep one while they wait for bytes.
const FIRST_READ: usize = 512;
/// Room made for a read at most: a read that filled its room doubles the
/// next one (a pipelining client), up to this.
const MAX_READ: usize = 64 * 1024;
/// An input buffer grown past this (a large frame) is given back once empty.
const KEPT_INPUT_CAPACITY: usize = 4 * 1024;
/// An answer buffer grown past this is given back after it was written.
const KEPT_OUTPUT_CAPACITY: usize = 4 * 1024;

/// A framed stream: frames in, answers out.
pub struct Connection<S> {
    stream: S,
    input: BytesMut,
    /// Room the next read makes (`FIRST_READ` to `MAX_READ`).
    read_size: usize,
    decoder: Decoder,
    output: Vec<u8>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    /// Frames from `stream`, none larger than `max_frame` bytes.
    pub fn new(stream: S, max_frame: usize) -> Connection<S> {
        Connection {
            stream,
            input: BytesMut::new(),
            read_size: FIRST_READ,
            decoder: Decoder::new(max_frame).inline(true),
            // Allocated by the first answer, not by an idle connection.
            output: Vec::new(),
        }
    }

    /// The next whole frame already read, if any.
    pub fn decode(&mut self) -> Result<Option<Value>, ProtocolError> {
        self.decoder.decode(&mut self.input)
    }

    /// Whether bytes are buffered that were not decoded yet.
    pub fn has_input(&self) -> bool {
        !self.input.is_empty()
    }

    /// Drops what was read and not decoded (after a fault: the rest of the
    /// stream means nothing).
    pub fn discard_input(&mut self) {
        self.input.clear();
    }

    pub fn max_frame(&self) -> usize {
        self.decoder.max_frame()
    }

    pub fn set_max_frame(&mut self, max_frame: usize) {
        self.decoder.set_max_frame(max_frame);
    }

    /// Reads more bytes; `Ok(0)` when the client closed. Cancel-safe: what
    /// a cancelled read got stays nowhere, it was never taken.
    pub async fn read_more(&mut self) -> io::Result<usize> {
        if self.input.is_empty() && self.input.capacity() > KEPT_INPUT_CAPACITY {
            self.input = BytesMut::new();
            self.read_size = FIRST_READ;
        }
        if self.input.capacity() - self.input.len() < self.read_size / 2 {
            self.input.reserve(self.read_size);
        }
        let room = self.input.capacity() - self.input.len();
        let n = self.stream.read_buf(&mut self.input).await?;
        if n == room {
            self.read_size = (self.read_size * 2).min(MAX_READ);
        }
        Ok(n)
    }

    /// Queues an answer, written at the next [`flush`](Connection::flush).
    pub fn queue(&mut self, value: &Value, proto: Proto) {
        encode(value, proto, &mut self.output);
    }

    /// Queues bytes already encoded (pushes), after the answers queued.
    pub fn queue_encoded(&mut self, bytes: &[u8]) {
        self.output.extend_from_slice(bytes);
    }

    /// Bytes of answers queued and not written yet.
    pub fn pending_output(&self) -> usize {
        self.output.len()
    }

    /// Writes what the socket takes now, without waiting: answers that
    /// pile up for a client that reads slowly leave memory as fast as it
    /// reads; what it does not read stays queued.
    pub fn write_now(&mut self) -> io::Result<()> {
        use futures_util::FutureExt;
        let mut written = 0;
        while written < self.output.len() {
            match self.stream.write(&self.output[written..]).now_or_never() {
                Some(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                Some(Ok(n)) => written += n,
                Some(Err(e)) => return Err(e),
                None => break,
            }
        }
        self.output.drain(..written);
        if self.output.is_empty() {
            self.output.shrink_to(KEPT_OUTPUT_CAPACITY);
        }
        Ok(())
    }

    /// Writes every queued answer.
    pub async fn flush(&mut self) -> io::Result<()> {
        if self.output.is_empty() {
            return Ok(());
        }
        let written = self.stream.write_all(&self.output).await;
        self.output.clear();
        self.output.shrink_to(KEPT_OUTPUT_CAPACITY);
        written
    }

    /// Writes what is queued, then closes the write side (the client reads
    /// its last answers before the end of the stream).
    pub async fn close(&mut self) {
        let _ = self.flush().await;
        let _ = self.stream.shutdown().await;
    }
}
