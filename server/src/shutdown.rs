//! The shutdown signal each connection listens for: set once, seen by
//! every connection, including one that starts listening after it was set.

use tokio::sync::watch;

/// One connection's view of the server's shutdown.
pub struct Shutdown {
    /// Whether the signal was seen.
    is_shutdown: bool,
    notify: watch::Receiver<bool>,
}

impl Shutdown {
    pub fn new(notify: watch::Receiver<bool>) -> Shutdown {
        Shutdown {
            is_shutdown: false,
            notify,
        }
    }

    /// Resolves once the server shuts down (at once if it already has; a
    /// server gone without a word counts as shut down). Cancel-safe.
    pub async fn recv(&mut self) {
        if self.is_shutdown {
            return;
        }
        let _ = self.notify.wait_for(|down| *down).await;
        self.is_shutdown = true;
    }
}
