//! The designs of the permits scenarios (`semaphore`, `async-semaphore`,
//! `read-mostly`), each behind [`PermitLock`]: holdline's lock of n permits
//! per key, and the per-key semaphores and read-write locks in a `DashMap`
//! that people use instead.
//!
//! As in `designs`, the trait is generic (closures as `impl FnOnce`), so
//! the measured loops are monomorphised per design.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use dashmap::DashMap;

use crate::designs::Design;

/// How many of the key's permits a hold takes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Take {
    /// One: a semaphore's grant, a reader of a read-write lock.
    One,
    /// All of them: a writer of a read-write lock.
    All,
}

/// A design whose keys have several permits, made by [`PermitLock::new`].
pub trait PermitLock: Send + Sync + Sized + 'static {
    /// Short name used in tables, CSV and plots.
    const NAME: &'static str;
    /// Waiters are granted in arrival order.
    const FIFO: bool;
    /// What a hold of one permit calls, and one of all, for the rows' notes.
    const API: [&'static str; 2];

    /// The design with `permits` per key (a read-write lock has no count:
    /// its writer takes all, whatever they are).
    fn new(permits: u32) -> Self;
    /// Hold `take` of `key`'s permits while `f` runs, waiting as long as it takes.
    fn hold<R>(&self, key: &str, take: Take, f: impl FnOnce() -> R) -> R;
}

/// A design whose tasks wait for permits without blocking their thread.
pub trait AsyncPermitLock: PermitLock {
    /// The async API of a hold of one permit, for the rows' notes.
    const ASYNC_API: &'static str;

    /// Hold `take` of `key`'s permits while `f` runs, the task waiting as long as it takes.
    fn hold_async<R: Send>(
        &self,
        key: &str,
        take: Take,
        f: impl FnOnce() -> R + Send,
    ) -> impl Future<Output = R> + Send;
}

// ---------------------------------------------------------------- holdline

/// A holdline lock opened with `.permits(n)`: one permit a hold by
/// default, `.exclusive()` for all.
pub struct HoldlinePermits {
    _store: holdline::Store,
    lock: holdline::Lock,
}

impl PermitLock for HoldlinePermits {
    const NAME: &'static str = "holdline";
    const FIFO: bool = true;
    const API: [&'static str; 2] = ["hold", "key().exclusive().hold()"];

    fn new(permits: u32) -> Self {
        let store = holdline::Store::new();
        let lock = store.lock("bench").permits(permits).open();
        HoldlinePermits {
            lock: lock.expect("open lock"),
            _store: store,
        }
    }

    #[inline]
    fn hold<R>(&self, key: &str, take: Take, f: impl FnOnce() -> R) -> R {
        match take {
            Take::One => self.lock.hold(key, |_lease| f()),
            Take::All => self.lock.key(key).exclusive().hold(|_lease| f()),
        }
        .expect("holdline hold")
    }
}

/// [`HoldlinePermits`] opened with bounded bypass (`Fairness::BOUNDED`,
/// 1 ms): a reader may join readers ahead of a waiting writer while the
/// writer is within its bound.
pub struct HoldlinePermitsBounded(HoldlinePermits);

impl PermitLock for HoldlinePermitsBounded {
    const NAME: &'static str = "holdline-bounded";
    const FIFO: bool = false;
    const API: [&'static str; 2] = HoldlinePermits::API;

    fn new(permits: u32) -> Self {
        let store = holdline::Store::new();
        let lock = store
            .lock("bench")
            .permits(permits)
            .fairness(holdline::Fairness::BOUNDED)
            .open();
        HoldlinePermitsBounded(HoldlinePermits {
            lock: lock.expect("open lock"),
            _store: store,
        })
    }

    #[inline]
    fn hold<R>(&self, key: &str, take: Take, f: impl FnOnce() -> R) -> R {
        self.0.hold(key, take, f)
    }
}

impl AsyncPermitLock for HoldlinePermits {
    const ASYNC_API: &'static str = "hold_async";

    // Not `async fn`: the signature promises `Send`, which the spawned tasks need.
    #[allow(clippy::manual_async_fn)]
    #[inline]
    fn hold_async<R: Send>(
        &self,
        key: &str,
        take: Take,
        f: impl FnOnce() -> R + Send,
    ) -> impl Future<Output = R> + Send {
        async move {
            match take {
                Take::One => self.lock.hold_async(key, async |_lease| f()).await,
                Take::All => {
                    let hold = self.lock.key(key).exclusive();
                    hold.hold_async(async |_lease| f()).await
                }
            }
            .expect("holdline hold_async")
        }
    }
}

// ------------------------------------------- DashMap<String, Arc<M>>

/// The dashmap pattern of `designs::DashMapOf`, for locks made with a
/// count: a sharded map of per-key locks, an entry kept after its hold.
pub struct PerKey<M> {
    map: DashMap<String, Arc<M>>,
    permits: u32,
}

impl<M> PerKey<M> {
    fn with(permits: u32) -> Self {
        PerKey {
            map: DashMap::new(),
            permits,
        }
    }

    /// The pattern's lookup: a shared read of the shard when the key is
    /// there, an insert (made by `make` from the count) otherwise.
    #[inline]
    fn get(&self, key: &str, make: impl FnOnce(u32) -> M) -> Arc<M> {
        if let Some(m) = self.map.get(key) {
            return m.value().clone();
        }
        let entry = self.map.entry(key.to_owned());
        entry
            .or_insert_with(|| Arc::new(make(self.permits)))
            .value()
            .clone()
    }

    /// The permits `take` asks for.
    fn count(&self, take: Take) -> u32 {
        match take {
            Take::One => 1,
            Take::All => self.permits,
        }
    }
}

/// Wakes the thread that made it: the waker of [`block_on`].
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

thread_local! {
    /// One waker per thread, made once: no allocation per wait.
    static UNPARK: Waker = Waker::from(Arc::new(Unpark(std::thread::current())));
}

/// Runs `fut` to completion on this thread, parking it between polls.
/// tokio's `Semaphore` has no blocking acquire; this is what tokio's own
/// `blocking_lock` and `blocking_read` do (a park/unpark `block_on` with a
/// cached waker), so the semaphore's threads wait as the mutex's do.
fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    UNPARK.with(|waker| {
        let mut cx = Context::from_waker(waker);
        loop {
            if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                return v;
            }
            // A wake before the park leaves its token: the park returns at once.
            std::thread::park();
        }
    })
}

/// A FIFO semaphore per key: tokio's (the batch semaphore behind its
/// mutex and read-write lock). Threads acquire through [`block_on`].
pub type TokioSem = PerKey<tokio::sync::Semaphore>;

fn semaphore(permits: u32) -> tokio::sync::Semaphore {
    tokio::sync::Semaphore::new(permits as usize)
}

impl PermitLock for TokioSem {
    const NAME: &'static str = "dashmap+tokio-sem";
    const FIFO: bool = true;
    const API: [&'static str; 2] = [
        "block_on(acquire_many(1)) (park/unpark)",
        "block_on(acquire_many(n)) (park/unpark)",
    ];

    fn new(permits: u32) -> Self {
        PerKey::with(permits)
    }

    #[inline]
    fn hold<R>(&self, key: &str, take: Take, f: impl FnOnce() -> R) -> R {
        let s = self.get(key, semaphore);
        let _p = block_on(s.acquire_many(self.count(take))).expect("semaphore open");
        f()
    }
}

impl AsyncPermitLock for TokioSem {
    const ASYNC_API: &'static str = "acquire_many(1).await";

    #[allow(clippy::manual_async_fn)]
    #[inline]
    fn hold_async<R: Send>(
        &self,
        key: &str,
        take: Take,
        f: impl FnOnce() -> R + Send,
    ) -> impl Future<Output = R> + Send {
        async move {
            let s = self.get(key, semaphore);
            let _p = s
                .acquire_many(self.count(take))
                .await
                .expect("semaphore open");
            f()
        }
    }
}

/// The fast read-write lock per key: parking_lot's (unfair: a thread
/// arriving at a free lock takes it before the woken ones; eventually fair).
pub type PlRw = PerKey<parking_lot::RwLock<()>>;

impl PermitLock for PlRw {
    const NAME: &'static str = "dashmap+pl-rw";
    const FIFO: bool = false;
    const API: [&'static str; 2] = ["read()", "write()"];

    fn new(permits: u32) -> Self {
        PerKey::with(permits)
    }

    #[inline]
    fn hold<R>(&self, key: &str, take: Take, f: impl FnOnce() -> R) -> R {
        let m = self.get(key, |_| parking_lot::RwLock::new(()));
        match take {
            Take::One => {
                let _g = m.read();
                f()
            }
            Take::All => {
                let _g = m.write();
                f()
            }
        }
    }
}

/// A fair (FIFO) read-write lock per key: tokio's. Threads use
/// `blocking_read` / `blocking_write`, as `dashmap+tokio` uses
/// `blocking_lock`: threads against threads, no runtime in between.
pub type TokioRw = PerKey<tokio::sync::RwLock<()>>;

impl PermitLock for TokioRw {
    const NAME: &'static str = "dashmap+tokio-rw";
    const FIFO: bool = true;
    const API: [&'static str; 2] = ["blocking_read()", "blocking_write()"];

    fn new(permits: u32) -> Self {
        PerKey::with(permits)
    }

    #[inline]
    fn hold<R>(&self, key: &str, take: Take, f: impl FnOnce() -> R) -> R {
        let m = self.get(key, |_| tokio::sync::RwLock::new(()));
        match take {
            Take::One => {
                let _g = m.blocking_read();
                f()
            }
            Take::All => {
                let _g = m.blocking_write();
                f()
            }
        }
    }
}

/// The permits scenarios' designs by name, in table order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PermitDesign {
    Holdline,
    HoldlineBounded,
    TokioSem,
    PlRw,
    TokioRw,
}

impl PermitDesign {
    /// The design's name in tables, CSV and plots (its type's [`PermitLock::NAME`]).
    pub fn name(self) -> &'static str {
        match self {
            PermitDesign::Holdline => HoldlinePermits::NAME,
            PermitDesign::HoldlineBounded => HoldlinePermitsBounded::NAME,
            PermitDesign::TokioSem => TokioSem::NAME,
            PermitDesign::PlRw => PlRw::NAME,
            PermitDesign::TokioRw => TokioRw::NAME,
        }
    }

    pub fn fifo(self) -> bool {
        match self {
            PermitDesign::Holdline => HoldlinePermits::FIFO,
            PermitDesign::HoldlineBounded => HoldlinePermitsBounded::FIFO,
            PermitDesign::TokioSem => TokioSem::FIFO,
            PermitDesign::PlRw => PlRw::FIFO,
            PermitDesign::TokioRw => TokioRw::FIFO,
        }
    }

    /// The `--design` that picks it: the keyed mutex design whose map and
    /// crate it uses (`dashmap+tokio` picks both tokio forms).
    pub fn family(self) -> Design {
        match self {
            PermitDesign::Holdline => Design::Holdline,
            PermitDesign::HoldlineBounded => Design::HoldlineBounded,
            PermitDesign::TokioSem | PermitDesign::TokioRw => Design::DashTokio,
            PermitDesign::PlRw => Design::DashPl,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

    /// `threads` threads hold `take` of one key of `permits`, 300 times
    /// each; answers the most holders seen inside at once.
    fn most_inside<D: PermitLock>(permits: u32, threads: usize, take: Take) -> u32 {
        let d = D::new(permits);
        let (inside, most) = (AtomicU32::new(0), AtomicU32::new(0));
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    for _ in 0..300 {
                        d.hold("k", take, || {
                            let now = inside.fetch_add(1, SeqCst) + 1;
                            most.fetch_max(now, SeqCst);
                            std::thread::yield_now();
                            inside.fetch_sub(1, SeqCst);
                        });
                    }
                });
            }
        });
        most.load(SeqCst)
    }

    #[test]
    fn a_semaphore_keeps_its_count_and_an_exclusive_hold_is_alone() {
        assert!(most_inside::<HoldlinePermits>(2, 4, Take::One) <= 2);
        assert!(most_inside::<TokioSem>(2, 4, Take::One) <= 2);
        assert_eq!(most_inside::<HoldlinePermits>(3, 4, Take::All), 1);
        assert_eq!(most_inside::<TokioSem>(3, 4, Take::All), 1);
        assert_eq!(most_inside::<PlRw>(3, 4, Take::All), 1);
        assert_eq!(most_inside::<TokioRw>(3, 4, Take::All), 1);
    }

    #[test]
    fn async_holds_keep_the_count() {
        fn check<D: AsyncPermitLock>() {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .build()
                .unwrap();
            let d = Arc::new(D::new(2));
            let (inside, most) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
            rt.block_on(async {
                let tasks: Vec<_> = (0..8)
                    .map(|_| {
                        let (d, inside, most) = (d.clone(), inside.clone(), most.clone());
                        tokio::spawn(async move {
                            for _ in 0..200 {
                                d.hold_async("k", Take::One, || {
                                    let now = inside.fetch_add(1, SeqCst) + 1;
                                    most.fetch_max(now, SeqCst);
                                    std::thread::yield_now();
                                    inside.fetch_sub(1, SeqCst);
                                })
                                .await;
                                tokio::task::yield_now().await;
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap();
                }
            });
            assert!(most.load(SeqCst) <= 2, "{}", D::NAME);
        }
        check::<HoldlinePermits>();
        check::<TokioSem>();
    }

    #[test]
    fn names_are_distinct_and_holdline_is_the_reference() {
        let names: Vec<&str> = [
            PermitDesign::Holdline,
            PermitDesign::TokioSem,
            PermitDesign::PlRw,
            PermitDesign::TokioRw,
        ]
        .map(PermitDesign::name)
        .to_vec();
        assert_eq!(
            names,
            [
                "holdline",
                "dashmap+tokio-sem",
                "dashmap+pl-rw",
                "dashmap+tokio-rw"
            ]
        );
    }
}
