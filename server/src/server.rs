//! The listener: accepting connections within `--max-connections`, and the
//! shutdown on SIGINT or SIGTERM (store closed, connections told, exit).

use crate::connection;
use crate::session::Shared;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tracing::{debug, info, warn};

/// How long connections get to write their last answers at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Counts a connection for as long as it lives.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves until SIGINT or SIGTERM; then closes the store (waiters
/// `closed`, holders lost), tells every connection, and returns.
pub async fn run(
    listener: TcpListener,
    shared: Arc<Shared>,
    max_connections: usize,
) -> io::Result<()> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let live = Arc::new(AtomicUsize::new(0));
    loop {
        tokio::select! {
            _ = interrupt.recv() => break,
            _ = terminate.recv() => break,
            accepted = listener.accept() => match accepted {
                Ok((mut stream, peer)) => {
                    if live.load(Ordering::Acquire) >= max_connections {
                        debug!(%peer, "refused: too many connections");
                        tokio::spawn(async move {
                            let _ = stream.write_all(b"-ERR max number of clients reached\r\n").await;
                        });
                        continue;
                    }
                    live.fetch_add(1, Ordering::AcqRel);
                    let counted = Counted(live.clone());
                    let shared = shared.clone();
                    let shutdown = shutdown_rx.clone();
                    debug!(%peer, "connected");
                    tokio::spawn(async move {
                        connection::serve(stream, shared, shutdown).await;
                        drop(counted);
                        debug!(%peer, "disconnected");
                    });
                }
                Err(e) => {
                    // Out of descriptors, most likely: pause rather than spin.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    info!("shutting down: closing the store");
    drop(listener);
    shared.store.close();
    let _ = shutdown_tx.send(true);
    let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
    while live.load(Ordering::Acquire) > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}
