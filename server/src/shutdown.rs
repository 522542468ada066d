//! The shutdown signal each connection listens for: set once, seen by
//! every connection, including one that starts listening after it was set.

use tokio::sync::watch;

/// One connection's view of the server's shutdown.
pub struct Shutdown {
    notify: watch::Receiver<bool>,
}

impl Shutdown {
    pub fn new(notify: watch::Receiver<bool>) -> Shutdown {
        Shutdown { notify }
    }

    /// Resolves once the server shuts down (at once if it already has; a
    /// server gone without a word counts as shut down). A connection waits
    /// for it once, for its whole life, so it is consumed.
    pub async fn recv(mut self) {
        let _ = self.notify.wait_for(|down| *down).await;
    }
}
