//! A lease granted by the server, and its loss signal.
//!
//! The connection's background task marks a lease lost the moment the
//! server pushes `lost` for it, or the connection drops; the [`Signal`]
//! wakes both async waiters (`aborted()`) and threads (`wait_timeout`).

use crate::error::Error;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::Notify;

/// What a lease, its signals and its connection's task share.
pub(crate) struct LeaseShared {
    pub(crate) id: i64,
    pub(crate) fence: u64,
    pub(crate) lock: Arc<str>,
    pub(crate) key: Box<str>,
    /// Why it was lost, once it was.
    lost: OnceLock<Error>,
    /// Wakes `aborted()` futures.
    notify: Notify,
    /// Wakes threads in `wait_timeout`; the flag mirrors `lost`.
    lost_flag: Mutex<bool>,
    lost_cv: Condvar,
}

impl LeaseShared {
    pub(crate) fn new(id: i64, fence: u64, lock: Arc<str>, key: Box<str>) -> Arc<LeaseShared> {
        Arc::new(LeaseShared {
            id,
            fence,
            lock,
            key,
            lost: OnceLock::new(),
            notify: Notify::new(),
            lost_flag: Mutex::new(false),
            lost_cv: Condvar::new(),
        })
    }

    /// Marks the lease lost (the first reason wins) and wakes every waiter.
    pub(crate) fn mark_lost(&self, why: Error) {
        if self.lost.set(why).is_err() {
            return;
        }
        *self.lost_flag.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.lost_cv.notify_all();
        self.notify.notify_waiters();
    }

    pub(crate) fn lost_error(&self) -> Option<&Error> {
        self.lost.get()
    }
}

/// The lease a `hold` closure runs under (and that a
/// [`HeldLease`](crate::HeldLease) derefs to).
pub struct Lease {
    pub(crate) shared: Arc<LeaseShared>,
}

impl Lease {
    /// The fencing token: greater than every earlier grant's of this key.
    pub fn fence(&self) -> u64 {
        self.shared.fence
    }

    /// The key, as text.
    pub fn key(&self) -> &str {
        &self.shared.key
    }

    /// The lock's name.
    pub fn lock_name(&self) -> &str {
        &self.shared.lock
    }

    /// The server's id of this lease (what `RENEW` and `RELEASE` name).
    pub fn id(&self) -> i64 {
        self.shared.id
    }

    /// Whether the lease was lost: the server reported it revoked, run out
    /// or its store closed, or the connection dropped.
    pub fn is_lost(&self) -> bool {
        self.shared.lost.get().is_some()
    }

    /// `Err` of kind `Lost` once the lease is lost, with the server's text.
    pub fn check(&self) -> Result<(), Error> {
        match self.shared.lost.get() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// A handle that aborts when the lease is lost.
    pub fn signal(&self) -> Signal {
        Signal {
            shared: self.shared.clone(),
        }
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("lock", &self.shared.lock)
            .field("key", &self.shared.key)
            .field("fence", &self.shared.fence)
            .field("lost", &self.is_lost())
            .finish()
    }
}

/// A lease's loss signal: cheap to clone, usable from any task or thread,
/// alive after the lease ended. It aborts only on a loss, never on a
/// normal release.
#[derive(Clone)]
pub struct Signal {
    shared: Arc<LeaseShared>,
}

impl Signal {
    /// Whether the lease was lost.
    pub fn is_aborted(&self) -> bool {
        self.shared.lost.get().is_some()
    }

    /// Why the lease was lost (the server's text), once it was.
    pub fn lost_error(&self) -> Option<Error> {
        self.shared.lost.get().cloned()
    }

    /// Resolves once the lease is lost (pending forever otherwise).
    pub fn aborted(&self) -> impl Future<Output = ()> + Send + 'static {
        let shared = self.shared.clone();
        async move {
            loop {
                let notified = shared.notify.notified();
                tokio::pin!(notified);
                // Registered before the check, so a loss between the two
                // still wakes us.
                notified.as_mut().enable();
                if shared.lost.get().is_some() {
                    return;
                }
                notified.await;
            }
        }
    }

    /// Blocks the thread until the lease is lost or `timeout` passes;
    /// answers whether it was lost. For work handed to a thread.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let flag = self
            .shared
            .lost_flag
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let (flag, _) = self
            .shared
            .lost_cv
            .wait_timeout_while(flag, timeout, |lost| !*lost)
            .unwrap_or_else(|p| p.into_inner());
        *flag
    }
}

impl fmt::Debug for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signal")
            .field("aborted", &self.is_aborted())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdline::ErrorKind;

    fn lease() -> Lease {
        Lease {
            shared: LeaseShared::new(1, 7, "l".into(), "k".into()),
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_loss_wakes_futures_and_threads_once() {
        let lease = lease();
        let signal = lease.signal();
        assert!(!signal.is_aborted());
        assert!(lease.check().is_ok());
        let waiting = tokio::spawn(signal.aborted());
        let thread_signal = signal.clone();
        let thread =
            std::thread::spawn(move || thread_signal.wait_timeout(Duration::from_secs(30)));
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        lease.shared.mark_lost(Error::new(ErrorKind::Lost, "first"));
        lease
            .shared
            .mark_lost(Error::new(ErrorKind::Lost, "second"));
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("aborted() resolves")
            .unwrap();
        assert!(thread.join().unwrap());
        assert!(lease.is_lost() && signal.is_aborted());
        assert_eq!(lease.check().unwrap_err().to_string(), "first");
        // Resolves at once after the fact, too.
        signal.aborted().await;
    }

    #[test]
    fn without_a_loss_wait_timeout_answers_false() {
        let lease = lease();
        assert!(!lease.signal().wait_timeout(Duration::from_millis(20)));
    }
}
