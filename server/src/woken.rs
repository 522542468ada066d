//! A future polled again only once something it waits on woke it.
//!
//! A connection's loop selects over the same long-lived futures (the
//! shutdown signal, CLIENT KILL) once or twice for every request, and each
//! poll of one takes its lock to find it still pending. [`Woken`] gives the
//! future a waker of its own, which it registers once; every other poll
//! answers `Pending` from one atomic swap until that waker fires.
//!
//! Invariant: `woken` is true whenever the inner future may have progress
//! to make, so it is never left unpolled after its waker fired: it starts
//! true, the inner waker sets it before waking the task, and a poll
//! registers the task before it takes the flag.

use futures_util::task::AtomicWaker;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// The inner future's waker: a flag, and the task to wake.
struct Flag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Release: pairs with the poll's AcqRel swap, so what the waker's
        // caller wrote before waking is seen by the inner future's poll.
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// `F`, polled only when its own waker has fired since its last poll.
pub struct Woken<F> {
    inner: Pin<Box<F>>,
    flag: Arc<Flag>,
    waker: Waker,
}

impl<F: Future> Woken<F> {
    pub fn new(inner: F) -> Woken<F> {
        let flag = Arc::new(Flag {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        Woken {
            inner: Box::pin(inner),
            waker: Waker::from(flag.clone()),
            flag,
        }
    }
}

impl<F: Future> Future for Woken<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        // The task first, then the flag: a wake between the two finds the
        // task registered, and one before it left the flag set.
        this.flag.task.register(cx.waker());
        // AcqRel: acquires what the waker's caller wrote (see `wake_by_ref`).
        if !this.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        this.inner
            .as_mut()
            .poll(&mut Context::from_waker(&this.waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use tokio::sync::Notify;

    /// Counts its polls and waits on a Notify.
    async fn counted(polls: &AtomicUsize, notify: &Notify) {
        let mut notified = std::pin::pin!(notify.notified());
        std::future::poll_fn(|cx| {
            polls.fetch_add(1, Ordering::Relaxed);
            notified.as_mut().poll(cx)
        })
        .await
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_inner_future_is_polled_once_until_woken_then_finishes() {
        let (polls, notify) = (AtomicUsize::new(0), Notify::new());
        let mut woken = std::pin::pin!(Woken::new(counted(&polls, &notify)));
        for _ in 0..10 {
            let now = futures_util::FutureExt::now_or_never(woken.as_mut());
            assert!(now.is_none());
        }
        assert_eq!(polls.load(Ordering::Relaxed), 1, "polled while not woken");
        notify.notify_one();
        woken.await;
        assert_eq!(polls.load(Ordering::Relaxed), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wake_from_another_thread_reaches_the_task() {
        for _ in 0..200 {
            let notify = Arc::new(Notify::new());
            let inner = {
                let notify = notify.clone();
                async move { notify.notified().await }
            };
            let woken = Woken::new(inner);
            let waker = tokio::spawn(async move {
                tokio::task::yield_now().await;
                notify.notify_one();
            });
            tokio::time::timeout(std::time::Duration::from_secs(10), woken)
                .await
                .expect("the wake was lost");
            waker.await.unwrap();
        }
    }
}
