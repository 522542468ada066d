//! Per-key introspection: [`Lock::inspect`] and the [`KeyInfo`] it answers.
//!
//! It reads the key's record (state word, fence, line length) without
//! taking the key or its line lock, so it never changes who holds the key
//! or the order of its line. Times come from the store's registry of timed
//! leases (see `Leases::timed` in `driver.rs`, one per shard): a lease with a maxHold
//! or a ttl read the clock at its grant anyway, so only those leases are
//! listed there, and a plain closure hold (no maxHold) pays nothing for
//! this: its `held_for` is `None`. A closure hold with a maxHold reads no
//! clock either: its times come from its slot in the store's maxHold
//! watch (`hold_watch`), counted from when the watch first saw it.

use crate::key::{check_key, IntoKey, KeyBuf};
use crate::lock::Lock;
use crate::record::Record;
use crate::record_ref::grant_addr;
use crossbeam_epoch as epoch;
use std::time::Duration;

/// A snapshot of one key; from [`Lock::inspect`].
///
/// Taken without stopping anyone: a key changing hands while it is read
/// may show the incoming grant's fence a moment before it is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyInfo {
    /// Whether the key has a holder (a revoked holder whose closure still
    /// runs does not count: its permits have gone back to the key).
    pub held: bool,
    /// While held, the highest fence among the current grants (for a lock
    /// of one permit, the one its lease's [`fence`](crate::Lease::fence)
    /// answers); while free, the fence of the last grant. Every later
    /// grant's fence is greater.
    pub fence: u64,
    /// How long the longest-held current grant has been held (to the
    /// millisecond), when its lease has a timer: a lock opened with
    /// `max_hold`, or a handle-style lease ([`Lock::acquire`]). `None` when
    /// the key is free, and for a closure hold without `max_hold`, whose
    /// uncontended path reads no clock. A closure hold with `max_hold`
    /// reads none either: its time counts from when the store's timer
    /// first saw it, at most a tick (1 ms) after its grant while the
    /// timer runs on time, and exact for a hold that found the timer
    /// idle; its maxHold counts from the same moment.
    pub held_for: Option<Duration>,
    /// How long that lease has left before it is revoked at its maxHold or
    /// runs out at its ttl, whichever comes first (a renewal pushes the ttl
    /// back). `None` when the key is free or its lease has no timer (as for
    /// `held_for`).
    pub lease_left: Option<Duration>,
    /// How many threads and tasks wait in the key's line (the holders not
    /// counted).
    pub waiters: usize,
    /// How many leases hold the key (at most 1 for a lock of one permit).
    pub holders: u32,
    /// How many of the key's permits they hold in all.
    pub permits_held: u32,
}

impl Lock {
    /// A snapshot of `key`: whether it is held, the current grant's fence,
    /// how long it has been held, how long its lease has left, and how many
    /// wait for it. `None` when the key has no state: never used, or idle
    /// and already reclaimed (an idle key lingers until the next sweep,
    /// about a second, answering `held: false`). An invalid key has no state.
    ///
    /// It takes nothing: the holder, the line and its order are as they were.
    ///
    /// ```
    /// use holdline::Store;
    /// use std::time::Duration;
    ///
    /// let store = Store::new();
    /// let jobs = store.lock("jobs").max_hold(Duration::from_secs(60)).open()?;
    /// assert_eq!(jobs.inspect("job-1"), None);
    /// jobs.hold("job-1", |lease| {
    ///     let info = jobs.inspect("job-1").unwrap();
    ///     assert!(info.held);
    ///     assert_eq!(info.fence, lease.fence());
    ///     assert_eq!(info.waiters, 0);
    ///     assert!(info.lease_left.unwrap() <= Duration::from_secs(60));
    /// })?;
    /// assert!(!jobs.inspect("job-1").unwrap().held);
    /// # Ok::<(), holdline::Error>(())
    /// ```
    pub fn inspect<'k, K: IntoKey<'k>>(&self, key: K) -> Option<KeyInfo> {
        let mut buf = KeyBuf::new();
        let text = key.into_key().text(&mut buf);
        check_key(&self.shared.name, text).ok()?;
        let table = &self.shared.table;
        let hash = table.hash(text);
        let guard = epoch::pin();
        // Authoritative: a quick miss is confirmed under the shard lock,
        // which makes nothing and takes nothing from the key.
        let record = table.find_authoritative(hash, text, &guard)?;
        Some(self.info_of(record))
    }

    fn info_of(&self, record: &Record) -> KeyInfo {
        let waiters = record.waiter_count() as usize;
        let holders = record.holders(0);
        match (holders.oldest, holders.newest) {
            (Some(oldest), Some(newest)) => {
                let now = self.store.clock.now_ms();
                let timing = match self.store.timer.timed_lease(grant_addr(record), oldest) {
                    Some(lease) => Some(lease.timing(now)),
                    // A closure hold with a maxHold, timed by the watch.
                    None => self
                        .store
                        .watch
                        .timing(record, oldest, now)
                        .map(|(held, left)| {
                            (
                                Duration::from_millis(held),
                                Some(Duration::from_millis(left)),
                            )
                        }),
                };
                KeyInfo {
                    held: true,
                    fence: newest,
                    held_for: timing.map(|t| t.0),
                    lease_left: timing.and_then(|t| t.1),
                    waiters,
                    holders: holders.count,
                    permits_held: holders.permits,
                }
            }
            // Free: every record was made by a grant, so there was a last one.
            _ => KeyInfo {
                held: false,
                fence: holders.latest,
                held_for: None,
                lease_left: None,
                waiters,
                holders: 0,
                permits_held: 0,
            },
        }
    }
}
