//! The designs under comparison, each behind [`KeyedLock`].
//!
//! The trait is generic (closures as `impl FnOnce`), so every scenario is
//! monomorphised per design: no dynamic dispatch inside the measured loops.
//! [`AsyncKeyedLock`] adds the async hold of the designs that have one
//! (holdline and dashmap+tokio), for the `async-*` scenarios.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;

/// How a design offers "wait for the key, but no longer than this".
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Deadline {
    /// The design has a native bounded wait.
    Native(&'static str),
    /// The design has none: scenarios that need one report `n/a`.
    Lacks,
}

/// A design, made ready to hold keys by `Default`.
pub trait KeyedLock: Default + Send + Sync + Sized + 'static {
    /// Short name used in tables, CSV and plots.
    const NAME: &'static str;
    /// Waiters are granted the key in arrival order.
    const FIFO: bool;
    const DEADLINE: Deadline;
    /// A single-key baseline: the key is ignored (one lock in all).
    const SINGLE: bool = false;
    /// What happens to an idle key's entry.
    const IDLE: &'static str;

    /// Hold `key` while `f` runs, waiting as long as it takes.
    fn hold<R>(&self, key: &str, f: impl FnOnce() -> R) -> R;
    /// Hold `key` while `f` runs, waiting at most `wait`; `None` when the wait ran out.
    /// Only called when `DEADLINE` is `Native`.
    fn hold_within<R>(&self, key: &str, wait: Duration, f: impl FnOnce() -> R) -> Option<R>;
    /// Give idle keys' memory back, where the design can.
    fn reclaim(&self) {}
}

/// A design whose tasks wait for a key without blocking their thread.
///
/// The hold's body is a plain closure run while the key is held, as in
/// [`KeyedLock::hold`]: the rows measure taking and giving back the key.
pub trait AsyncKeyedLock: KeyedLock {
    /// The async API used, for the rows' notes.
    const ASYNC_API: &'static str;

    /// Hold `key` while `f` runs, the task waiting as long as it takes.
    fn hold_async<R: Send>(
        &self,
        key: &str,
        f: impl FnOnce() -> R + Send,
    ) -> impl Future<Output = R> + Send;

    /// Hold `key` while `f` runs, the task waiting at most `wait`; `None`
    /// when the wait ran out. Needs a runtime with its timer for tokio.
    fn hold_within_async<R: Send>(
        &self,
        key: &str,
        wait: Duration,
        f: impl FnOnce() -> R + Send,
    ) -> impl Future<Output = Option<R>> + Send;
}

// ---------------------------------------------------------------- holdline

pub struct Holdline {
    pub store: holdline::Store,
    pub lock: holdline::Lock,
}

/// A bounded hold's outcome: `None` when the wait ran out (`in use`).
fn within_wait<R>(held: Result<R, holdline::Error>) -> Option<R> {
    match held {
        Ok(r) => Some(r),
        Err(e) if e.kind() == holdline::ErrorKind::InUse => None,
        Err(e) => panic!("holdline bounded hold: {e}"),
    }
}

impl Default for Holdline {
    fn default() -> Self {
        let store = holdline::Store::new();
        let lock = store.lock("bench").open().expect("open lock");
        Holdline { store, lock }
    }
}

impl KeyedLock for Holdline {
    const NAME: &'static str = "holdline";
    const FIFO: bool = true;
    const DEADLINE: Deadline = Deadline::Native("key().wait(d).hold()");
    const IDLE: &'static str = "reclaimed (reclaim_idle)";

    #[inline]
    fn hold<R>(&self, key: &str, f: impl FnOnce() -> R) -> R {
        self.lock.hold(key, |_lease| f()).expect("holdline hold")
    }
    #[inline]
    fn hold_within<R>(&self, key: &str, wait: Duration, f: impl FnOnce() -> R) -> Option<R> {
        within_wait(self.lock.key(key).wait(wait).hold(|_lease| f()))
    }
    fn reclaim(&self) {
        self.store.reclaim_idle();
    }
}

/// A holdline design through a lock opened with one more option: `$name`
/// wraps [`Holdline`], opening its lock through `$open`.
macro_rules! holdline_opened {
    ($(#[$doc:meta])* $name:ident, $shown:literal, fifo: $fifo:literal, $open:expr) => {
        $(#[$doc])*
        pub struct $name(Holdline);

        impl Default for $name {
            fn default() -> Self {
                let store = holdline::Store::new();
                let open: fn(holdline::LockBuilder<'_>) -> holdline::LockBuilder<'_> = $open;
                let lock = open(store.lock("bench")).open().expect("open lock");
                $name(Holdline { store, lock })
            }
        }

        impl KeyedLock for $name {
            const NAME: &'static str = $shown;
            const FIFO: bool = $fifo;
            const DEADLINE: Deadline = Deadline::Native("key().wait(d).hold()");
            const IDLE: &'static str = "reclaimed (reclaim_idle)";

            #[inline]
            fn hold<R>(&self, key: &str, f: impl FnOnce() -> R) -> R {
                self.0.hold(key, f)
            }
            #[inline]
            fn hold_within<R>(&self, key: &str, wait: Duration, f: impl FnOnce() -> R) -> Option<R> {
                self.0.hold_within(key, wait, f)
            }
            fn reclaim(&self) {
                self.0.reclaim();
            }
        }
    };
}

/// The maxHold of [`HoldlineMaxHold`]'s lock.
pub const README_MAX_HOLD: Duration = Duration::from_secs(120);

holdline_opened!(
    /// holdline through a lock opened as README's first example opens it,
    /// with `max_hold(120 s)`: what a maxHold costs beside the plain hold.
    HoldlineMaxHold, "holdline-maxhold", fifo: true, |lock| lock.max_hold(README_MAX_HOLD)
);

holdline_opened!(
    /// holdline through a lock opened with bounded bypass
    /// (`Fairness::BOUNDED`, 1 ms): a running thread may take a free key
    /// ahead of the line while its first waiter is within its bound.
    HoldlineBounded, "holdline-bounded", fifo: false,
    |lock| lock.fairness(holdline::Fairness::BOUNDED)
);

impl AsyncKeyedLock for Holdline {
    const ASYNC_API: &'static str = "hold_async / key().wait(d).hold_async()";

    // Not `async fn`: the signature promises `Send`, which the spawned tasks need.
    #[allow(clippy::manual_async_fn)]
    #[inline]
    fn hold_async<R: Send>(
        &self,
        key: &str,
        f: impl FnOnce() -> R + Send,
    ) -> impl Future<Output = R> + Send {
        async move {
            self.lock
                .hold_async(key, async |_lease| f())
                .await
                .expect("holdline hold_async")
        }
    }

    #[allow(clippy::manual_async_fn)]
    fn hold_within_async<R: Send>(
        &self,
        key: &str,
        wait: Duration,
        f: impl FnOnce() -> R + Send,
    ) -> impl Future<Output = Option<R>> + Send {
        async move {
            let held = self.lock.key(key).wait(wait);
            within_wait(held.hold_async(async |_lease| f()).await)
        }
    }
}

// ------------------------------------------- Mutex<HashMap<String, Arc<Mutex>>>

/// The naive keyed pattern: one std mutex around a map of per-key std mutexes.
#[derive(Default)]
pub struct NaiveStd {
    map: std::sync::Mutex<HashMap<String, Arc<std::sync::Mutex<()>>>>,
}

impl KeyedLock for NaiveStd {
    const NAME: &'static str = "std-map+std";
    const FIFO: bool = false;
    const DEADLINE: Deadline = Deadline::Lacks;
    const IDLE: &'static str = "kept";

    #[inline]
    fn hold<R>(&self, key: &str, f: impl FnOnce() -> R) -> R {
        let m = {
            let mut map = self.map.lock().unwrap();
            match map.get(key) {
                Some(m) => m.clone(),
                None => {
                    let m = Arc::new(std::sync::Mutex::new(()));
                    map.insert(key.to_owned(), m.clone());
                    m
                }
            }
        };
        let _g = m.lock().unwrap();
        f()
    }
    fn hold_within<R>(&self, _key: &str, _wait: Duration, _f: impl FnOnce() -> R) -> Option<R> {
        unreachable!("std::sync::Mutex has no bounded wait")
    }
}

// ------------------------------------------- DashMap<String, Arc<parking_lot::Mutex>>

/// The dashmap pattern: a sharded map of per-key mutexes `M`, an entry
/// kept after its hold.
#[derive(Default)]
pub struct DashMapOf<M> {
    map: DashMap<String, Arc<M>>,
}

impl<M: Default> DashMapOf<M> {
    /// The pattern's lookup: a shared read of the shard when the key is
    /// there, an insert otherwise.
    #[inline]
    fn get(&self, key: &str) -> Arc<M> {
        if let Some(m) = self.map.get(key) {
            return m.value().clone();
        }
        self.map.entry(key.to_owned()).or_default().value().clone()
    }
}

/// The common fast pattern: per-key parking_lot mutexes.
pub type DashPl = DashMapOf<parking_lot::Mutex<()>>;

impl KeyedLock for DashPl {
    const NAME: &'static str = "dashmap+pl";
    const FIFO: bool = false;
    const DEADLINE: Deadline = Deadline::Native("try_lock_for");
    const IDLE: &'static str = "kept";

    #[inline]
    fn hold<R>(&self, key: &str, f: impl FnOnce() -> R) -> R {
        let m = self.get(key);
        let _g = m.lock();
        f()
    }
    #[inline]
    fn hold_within<R>(&self, key: &str, wait: Duration, f: impl FnOnce() -> R) -> Option<R> {
        let m = self.get(key);
        let _g = m.try_lock_for(wait)?;
        Some(f())
    }
}

// ------------------------------------------- DashMap<String, Arc<tokio::sync::Mutex>>

thread_local! {
    /// One current-thread runtime per worker thread, with the timer, used only
    /// for bounded waits (`tokio::time::timeout` around `lock()`).
    static RT: RefCell<Option<tokio::runtime::Runtime>> = const { RefCell::new(None) };
}

fn block_on_with_timer<F: std::future::Future>(fut: F) -> F::Output {
    RT.with(|rt| {
        let mut rt = rt.borrow_mut();
        let rt = rt.get_or_insert_with(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("tokio runtime")
        });
        rt.block_on(fut)
    })
}

/// A fair FIFO lock per key: tokio's mutex (a batch semaphore with an
/// intrusive FIFO waiter list). Plain holds use `blocking_lock()`; bounded
/// waits run `timeout(d, lock())` on a per-thread current-thread runtime.
pub type DashTokio = DashMapOf<tokio::sync::Mutex<()>>;

impl KeyedLock for DashTokio {
    const NAME: &'static str = "dashmap+tokio";
    const FIFO: bool = true;
    const DEADLINE: Deadline = Deadline::Native("timeout(lock())");
    const IDLE: &'static str = "kept";

    #[inline]
    fn hold<R>(&self, key: &str, f: impl FnOnce() -> R) -> R {
        let m = self.get(key);
        let _g = m.blocking_lock();
        f()
    }
    fn hold_within<R>(&self, key: &str, wait: Duration, f: impl FnOnce() -> R) -> Option<R> {
        let m = self.get(key);
        // The timeout is made inside the runtime (it needs its timer).
        let _g =
            block_on_with_timer(async move { tokio::time::timeout(wait, m.lock_owned()).await })
                .ok()?;
        Some(f())
    }
}

impl AsyncKeyedLock for DashTokio {
    const ASYNC_API: &'static str = "lock().await / timeout(d, lock())";

    #[allow(clippy::manual_async_fn)]
    #[inline]
    fn hold_async<R: Send>(
        &self,
        key: &str,
        f: impl FnOnce() -> R + Send,
    ) -> impl Future<Output = R> + Send {
        async move {
            let m = self.get(key);
            let _g = m.lock().await;
            f()
        }
    }

    #[allow(clippy::manual_async_fn)]
    fn hold_within_async<R: Send>(
        &self,
        key: &str,
        wait: Duration,
        f: impl FnOnce() -> R + Send,
    ) -> impl Future<Output = Option<R>> + Send {
        async move {
            let m = self.get(key);
            let _g = tokio::time::timeout(wait, m.lock()).await.ok()?;
            Some(f())
        }
    }
}

// ------------------------------------------- lockable::LockPool<String>

/// The `lockable` crate's `LockPool`: a map mutex taken around each lock
/// and unlock, a tokio mutex per entry, entries removed once unlocked.
/// Its API takes the key by value, so each hold clones the key.
#[derive(Default)]
pub struct Lockable {
    pool: lockable::LockPool<String>,
}

impl KeyedLock for Lockable {
    const NAME: &'static str = "lockable";
    const FIFO: bool = true;
    const DEADLINE: Deadline = Deadline::Native("timeout(async_lock())");
    const IDLE: &'static str = "removed on unlock";

    #[inline]
    fn hold<R>(&self, key: &str, f: impl FnOnce() -> R) -> R {
        let _g = self.pool.blocking_lock(key.to_owned());
        f()
    }
    fn hold_within<R>(&self, key: &str, wait: Duration, f: impl FnOnce() -> R) -> Option<R> {
        let key = key.to_owned();
        let _g = block_on_with_timer(async {
            tokio::time::timeout(wait, self.pool.async_lock(key)).await
        })
        .ok()?;
        Some(f())
    }
}

// ------------------------------------------- single-key baselines

/// Bare `std::sync::Mutex<()>`: one lock, the key ignored.
#[derive(Default)]
pub struct StdSingle(std::sync::Mutex<()>);

impl KeyedLock for StdSingle {
    const NAME: &'static str = "std-1key";
    const FIFO: bool = false;
    const DEADLINE: Deadline = Deadline::Lacks;
    const SINGLE: bool = true;
    const IDLE: &'static str = "-";

    #[inline]
    fn hold<R>(&self, _key: &str, f: impl FnOnce() -> R) -> R {
        let _g = self.0.lock().unwrap();
        f()
    }
    fn hold_within<R>(&self, _key: &str, _wait: Duration, _f: impl FnOnce() -> R) -> Option<R> {
        unreachable!("std::sync::Mutex has no bounded wait")
    }
}

/// Bare `parking_lot::Mutex<()>`: one lock, the key ignored.
#[derive(Default)]
pub struct PlSingle(parking_lot::Mutex<()>);

impl KeyedLock for PlSingle {
    const NAME: &'static str = "pl-1key";
    const FIFO: bool = false;
    const DEADLINE: Deadline = Deadline::Native("try_lock_for");
    const SINGLE: bool = true;
    const IDLE: &'static str = "-";

    #[inline]
    fn hold<R>(&self, _key: &str, f: impl FnOnce() -> R) -> R {
        let _g = self.0.lock();
        f()
    }
    #[inline]
    fn hold_within<R>(&self, _key: &str, wait: Duration, f: impl FnOnce() -> R) -> Option<R> {
        let _g = self.0.try_lock_for(wait)?;
        Some(f())
    }
}

/// The designs by name, as `--design` takes them, in table order.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Design {
    #[value(name = "holdline")]
    Holdline,
    #[value(name = "holdline-maxhold")]
    HoldlineMaxHold,
    #[value(name = "holdline-bounded")]
    HoldlineBounded,
    #[value(name = "std-map+std")]
    NaiveStd,
    #[value(name = "dashmap+pl")]
    DashPl,
    #[value(name = "dashmap+tokio")]
    DashTokio,
    #[value(name = "lockable")]
    Lockable,
    #[value(name = "std-1key")]
    StdSingle,
    #[value(name = "pl-1key")]
    PlSingle,
}

impl Design {
    /// Every design, in table order.
    pub const ALL: [Design; 9] = [
        Design::Holdline,
        Design::HoldlineMaxHold,
        Design::HoldlineBounded,
        Design::NaiveStd,
        Design::DashPl,
        Design::DashTokio,
        Design::Lockable,
        Design::StdSingle,
        Design::PlSingle,
    ];

    /// The design's name in tables, CSV and plots (its type's [`KeyedLock::NAME`]).
    pub fn name(self) -> &'static str {
        crate::for_design!(self, D => D::NAME)
    }

    /// One lock for every key (a baseline, not a keyed design): the
    /// verdict does not count it as a design a user picks instead.
    pub fn single(self) -> bool {
        crate::for_design!(self, D => D::SINGLE)
    }

    /// One of holdline's own designs (the plain hold, or through a lock
    /// with a maxHold): never "the best other" of a verdict line.
    pub fn is_holdline(name: &str) -> bool {
        name.starts_with("holdline")
    }

    /// The design has an async hold ([`AsyncKeyedLock`]): it runs the `async-*` scenarios.
    pub fn has_async(self) -> bool {
        crate::for_async_design!(self, _D => true, else false)
    }
}

/// Calls `$body` with `$d` bound to the type of the [`Design`] `$design`
/// when that design has an async hold ([`AsyncKeyedLock`]); `$other` when not.
#[macro_export]
macro_rules! for_async_design {
    ($design:expr, $d:ident => $body:expr, else $other:expr) => {
        $crate::match_design!($design, $d => $body; Holdline, DashTokio; else $other)
    };
}

/// Calls `$body` with `$d` bound to the type of the [`Design`] `$design`,
/// so that the body is monomorphised per design.
#[macro_export]
macro_rules! for_design {
    ($design:expr, $d:ident => $body:expr) => {
        $crate::match_design!($design, $d => $body;
            Holdline, HoldlineMaxHold, HoldlineBounded, NaiveStd, DashPl, DashTokio, Lockable,
            StdSingle, PlSingle)
    };
}

/// The `match` behind [`for_design!`] and [`for_async_design!`]: one arm
/// per listed variant, each binding `$d` to the type of the variant's
/// name, and `$other` for the rest.
#[macro_export]
#[doc(hidden)]
macro_rules! match_design {
    ($design:expr, $d:ident => $body:expr; $($variant:ident),+ $(; else $other:expr)?) => {
        match $design {
            $($crate::designs::Design::$variant => {
                type $d = $crate::designs::$variant;
                $body
            })+
            $(_ => $other,)?
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn a_designs_flag_name_is_its_table_name() {
        for d in Design::ALL {
            let flag = d.to_possible_value().expect("not skipped");
            assert_eq!(flag.get_name(), d.name());
        }
        assert_eq!(Design::ALL.len(), Design::value_variants().len());
    }

    #[test]
    fn async_holds_are_holdlines_and_tokios() {
        let with: Vec<&str> = Design::ALL
            .iter()
            .filter(|d| d.has_async())
            .map(|d| d.name())
            .collect();
        assert_eq!(with, ["holdline", "dashmap+tokio"]);
    }

    /// Both async holds exclude each other's tasks on one key and give
    /// `None` when a bounded wait runs out behind a holder.
    fn async_hold_excludes_and_times_out<D: AsyncKeyedLock>() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let d = Arc::new(D::default());
        let inside = Arc::new(AtomicUsize::new(0));
        let total = Arc::new(AtomicUsize::new(0));
        rt.block_on(async {
            let tasks: Vec<_> = (0..8)
                .map(|_| {
                    let (d, inside, total) = (d.clone(), inside.clone(), total.clone());
                    tokio::spawn(async move {
                        for _ in 0..200 {
                            d.hold_async("k", || {
                                assert_eq!(inside.fetch_add(1, SeqCst), 0, "two holders");
                                std::thread::yield_now();
                                inside.fetch_sub(1, SeqCst);
                                total.fetch_add(1, SeqCst);
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
        assert_eq!(total.load(SeqCst), 1600);
        // A thread holds the key; a task's 20 ms wait runs out.
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let holder = {
            let d = d.clone();
            std::thread::spawn(move || {
                d.hold("k", || {
                    held_tx.send(()).unwrap();
                    let _ = done_rx.recv_timeout(std::time::Duration::from_secs(30));
                })
            })
        };
        held_rx.recv().unwrap();
        let got = rt.block_on(d.hold_within_async("k", Duration::from_millis(20), || ()));
        assert_eq!(got, None, "{}: a wait behind a holder was granted", D::NAME);
        done_tx.send(()).unwrap();
        holder.join().unwrap();
        let got = rt.block_on(d.hold_within_async("k", Duration::from_secs(10), || 7));
        assert_eq!(got, Some(7));
    }

    #[test]
    fn holdline_async_hold_excludes_and_times_out() {
        async_hold_excludes_and_times_out::<Holdline>();
    }

    #[test]
    fn tokio_async_hold_excludes_and_times_out() {
        async_hold_excludes_and_times_out::<DashTokio>();
    }
}
