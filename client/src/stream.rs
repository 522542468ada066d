//! The bytes under a connection: plain TCP, or TLS over it, split into a
//! read half and a write half (the connection's task reads and writes
//! from one loop, never both at once).

use crate::options::Tls;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// The read half of a connection's stream.
pub(crate) enum ReadHalf {
    Tcp(OwnedReadHalf),
    Tls(tokio::io::ReadHalf<TlsStream<TcpStream>>),
}

/// The write half of a connection's stream.
pub(crate) enum WriteHalf {
    Tcp(OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<TlsStream<TcpStream>>),
}

/// A connected socket, as it is.
pub(crate) fn plain(tcp: TcpStream) -> (ReadHalf, WriteHalf) {
    let (rd, wr) = tcp.into_split();
    (ReadHalf::Tcp(rd), WriteHalf::Tcp(wr))
}

/// A connected socket after a TLS handshake that checked the server's
/// certificate against `tls`. Early data (0-RTT) stays off: a replayed
/// early command could be read by the server later than it was sent.
pub(crate) async fn tls(tls: &Tls, tcp: TcpStream) -> io::Result<(ReadHalf, WriteHalf)> {
    let connector = TlsConnector::from(tls.config.clone());
    let stream = connector.connect(tls.name.clone(), tcp).await?;
    let (rd, wr) = tokio::io::split(stream);
    Ok((ReadHalf::Tls(rd), WriteHalf::Tls(wr)))
}

/// Whether `e` is TLS's own failure (an alert, a certificate refused),
/// not the socket's.
pub(crate) fn is_tls_failure(e: &io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.is::<tokio_rustls::rustls::Error>())
}

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ReadHalf::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            ReadHalf::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteHalf::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            WriteHalf::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(s) => Pin::new(s).poll_flush(cx),
            WriteHalf::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            WriteHalf::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
