//! The listener: accepting connections within `--max-connections` (a
//! semaphore's permits), one task per connection, and the shutdown on
//! SIGINT or SIGTERM: store closed, every connection told, and the
//! listener waits until each has finished (each holds a sender of a
//! channel whose receiver sees the end once the last one is dropped).

use crate::handler::Handler;
use crate::session::{Session, Shared};
use crate::shutdown::Shutdown;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, watch, Semaphore};
use tracing::{debug, info, warn};

/// How long connections get to write their last answers at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// The accept loop's state.
struct Listener {
    listener: TcpListener,
    shared: Arc<Shared>,
    /// One permit per connection allowed.
    limit: Arc<Semaphore>,
    /// Sends `true` once, at shutdown.
    notify_shutdown: watch::Sender<bool>,
    /// Cloned into every connection; the receiver sees the end once all
    /// connections (and this) dropped theirs.
    done_tx: mpsc::Sender<()>,
}

/// Serves until SIGINT or SIGTERM; then closes the store (waiters
/// `closed`, holders lost), tells every connection, and returns once they
/// have finished (or the grace ran out).
pub async fn run(
    listener: TcpListener,
    shared: Arc<Shared>,
    max_connections: usize,
) -> io::Result<()> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let (notify_shutdown, _) = watch::channel(false);
    let (done_tx, mut done_rx) = mpsc::channel(1);
    let mut server = Listener {
        listener,
        shared,
        limit: Arc::new(Semaphore::new(max_connections)),
        notify_shutdown,
        done_tx,
    };
    tokio::select! {
        _ = server.accept_loop() => {}
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
    }
    info!("shutting down: closing the store");
    let Listener {
        listener,
        shared,
        notify_shutdown,
        done_tx,
        ..
    } = server;
    drop(listener);
    shared.store.close();
    let _ = notify_shutdown.send(true);
    drop(done_tx);
    // `None` once every connection's sender is gone.
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, done_rx.recv()).await;
    Ok(())
}

impl Listener {
    /// Accepts until the task is dropped.
    async fn accept_loop(&mut self) {
        loop {
            match self.listener.accept().await {
                Ok((stream, peer)) => self.admit(stream, peer),
                Err(e) => {
                    // Out of descriptors, most likely: pause rather than spin.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// Serves the connection on a task of its own, or refuses it when
    /// every permit is taken (Redis's answer, then the close).
    fn admit(&self, stream: TcpStream, peer: std::net::SocketAddr) {
        let Ok(permit) = self.limit.clone().try_acquire_owned() else {
            debug!(%peer, "refused: too many connections");
            tokio::spawn(async move {
                let mut stream = stream;
                let _ = stream
                    .write_all(b"-ERR max number of clients reached\r\n")
                    .await;
            });
            return;
        };
        // Answers are small and latency is the product: no Nagle delay.
        let _ = stream.set_nodelay(true);
        let session = Session::new(self.shared.clone());
        let shutdown = Shutdown::new(self.notify_shutdown.subscribe());
        let handler = Handler::new(stream, session, shutdown, self.done_tx.clone());
        debug!(%peer, "connected");
        tokio::spawn(async move {
            handler.run().await;
            drop(permit);
            debug!(%peer, "disconnected");
        });
    }
}
