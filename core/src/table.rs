//! The key table of one lock: key text -> [`Record`], concurrent, growing
//! and shrinking, with idle records reclaimed through `crossbeam-epoch`.
//!
//! 64 shards, chosen by the hash's top bits; each shard has a bucket array of
//! chained records and a mutex that serialises its *writers* (create,
//! retire, resize). Readers take no lock: [`Table::find`] pins the epoch and
//! walks a chain.
//!
//! Invariants:
//! - A key has at most one record reachable from its shard: records are only
//!   created under the shard lock, after an authoritative search under it.
//! - A record in a chain is never `DEAD`: the sweeper marks it `DEAD` (from
//!   exactly idle) and unlinks it in one critical section, then defers its
//!   destruction, so a reader that still sees it sees a live allocation whose
//!   every transition now fails.
//! - A resize relinks records in place. A reader racing it may follow a
//!   `next` into another chain and miss its key (never find a wrong one,
//!   never loop: moved records only point at moved records), so a miss is
//!   only a hint: the caller confirms it under the shard lock.
//! - `floor` only grows: every record's first fence is at least `floor`, and
//!   retiring a record lifts `floor` above every fence it granted, so fences
//!   keep rising across a key's records.
//!
//! Orderings: readers load bucket arrays and links Acquire, pairing with the
//! Release stores that published them; writers, which hold the shard lock,
//! load them Relaxed (the lock orders writers among themselves) and publish
//! with Release.

use crate::record::{Record, Take};
use crate::sync::{lock, Arc, AtomicBool, Mutex, Ordering};
use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned, Shared};
use crossbeam_utils::CachePadded;
use std::hash::BuildHasher;

/// 64 shards; 4 under loom, where each shard's mutex only adds steps.
#[cfg(not(loom))]
const SHARD_BITS: u32 = 6;
#[cfg(loom)]
const SHARD_BITS: u32 = 2;
const SHARDS: usize = 1 << SHARD_BITS;
const MIN_BUCKETS: usize = 8;

pub(crate) struct Table {
    shards: Box<[CachePadded<Shard>]>,
    hasher: RandomHasher,
    /// Records retired by sweeps, waiting for the epoch to let them go:
    /// each batch is freed by a later sweep, on the sweeping thread, once
    /// the epoch ran the batch's deferred note (every reader that could
    /// see its records has unpinned). A user's pin only ever runs a note,
    /// never a million frees.
    pending: Mutex<Vec<Batch>>,
}

/// One sweep's retired records, and the note the epoch sets once they are
/// safe to free.
struct Batch {
    safe: Arc<AtomicBool>,
    records: Garbage,
}

/// The core's hasher for its tables and maps: foldhash, seeded per map at
/// random against chosen-key collisions; fixed under loom, whose models
/// must replay deterministically.
#[cfg(not(loom))]
pub(crate) type RandomHasher = foldhash::fast::RandomState;
#[cfg(loom)]
pub(crate) type RandomHasher = foldhash::fast::FixedState;

struct Shard {
    buckets: Atomic<Buckets>,
    writer: Mutex<ShardWriter>,
}

/// What only the shard's writers touch.
struct ShardWriter {
    len: usize,
    /// The first fence of the next record created here.
    floor: u64,
    /// Grants made here, less the live records' grant marks (wrapping): a
    /// record's grants are its mark less its first fence, so creating one
    /// subtracts its first fence and retiring one adds its final mark, and
    /// the records need not remember their first fence.
    grants_base: u64,
}

/// What [`Table::visit`] shows: a shard (first), then each of its records.
enum Visit<'a> {
    Shard(&'a ShardWriter),
    Record(&'a Record),
}

struct Buckets {
    slots: Box<[Atomic<Record>]>,
}

impl Buckets {
    fn new(n: usize) -> Owned<Buckets> {
        Owned::new(Buckets {
            slots: (0..n).map(|_| Atomic::null()).collect(),
        })
    }
    #[inline]
    fn slot(&self, hash: u64) -> &Atomic<Record> {
        &self.slots[hash as usize & (self.slots.len() - 1)]
    }
}

/// Totals over a table, for `Lock::stats`.
#[derive(Default, Debug, Clone, Copy)]
pub(crate) struct TableTotals {
    pub live: usize,
    pub held: usize,
    pub waiters: usize,
    pub grants: u64,
}

impl Table {
    pub(crate) fn new(fence_floor: u64) -> Table {
        let shards = (0..SHARDS)
            .map(|_| {
                CachePadded::new(Shard {
                    buckets: Atomic::null(),
                    writer: Mutex::new(ShardWriter {
                        len: 0,
                        floor: fence_floor,
                        grants_base: 0,
                    }),
                })
            })
            .collect();
        Table {
            pending: Mutex::new(Vec::new()),
            shards,
            hasher: RandomHasher::default(),
        }
    }

    #[inline]
    pub(crate) fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Shard {
        &self.shards[(hash >> (64 - SHARD_BITS)) as usize]
    }

    /// Lock-free lookup. A miss may be spurious (see the module doc).
    /// Always inlined: it is most of the uncontended hold's path.
    #[inline(always)]
    pub(crate) fn find<'g>(&self, hash: u64, key: &str, guard: &'g Guard) -> Option<&'g Record> {
        find_in_chain(self.chain(hash, guard), hash, key, guard)
    }

    /// The first link of `hash`'s chain: a lookup's first loads, which a
    /// caller may start before other work and finish with
    /// [`find_in_chain`] (over many keys these loads miss the cache).
    #[inline(always)]
    pub(crate) fn chain<'g>(&self, hash: u64, guard: &'g Guard) -> Shared<'g, Record> {
        // Acquire: pairs with the Release that published the array/records.
        let buckets = self.shard(hash).buckets.load(Ordering::Acquire, guard);
        // SAFETY: arrays are retired through the epoch and we are pinned.
        match unsafe { buckets.as_ref() } {
            // Acquire: pairs with the Release stores that linked each record.
            Some(b) => b.slot(hash).load(Ordering::Acquire, guard),
            None => Shared::null(),
        }
    }

    /// Finds the key's record, or creates one that the caller then holds
    /// (answered `true`). Authoritative: runs under the shard lock.
    pub(crate) fn find_or_create<'g>(
        &self,
        hash: u64,
        key: &str,
        take: Take,
        guard: &'g Guard,
    ) -> (&'g Record, Option<u64>) {
        let shard = self.shard(hash);
        let mut w = lock(&shard.writer);
        // Relaxed: writers are ordered by the shard lock.
        let mut buckets = shard.buckets.load(Ordering::Relaxed, guard);
        if buckets.is_null() {
            buckets = Buckets::new(MIN_BUCKETS).into_shared(guard);
            // Release: readers must see the initialised array.
            shard.buckets.store(buckets, Ordering::Release);
        }
        // SAFETY: non-null, and only retired by a writer, which we exclude.
        let b = unsafe { buckets.deref() };
        // Acquire: as every chain walk (the lock orders it anyway).
        let head = b.slot(hash).load(Ordering::Acquire, guard);
        if let Some(r) = find_in_chain(head, hash, key, guard) {
            return (r, None);
        }
        let slot = b.slot(hash);
        let fence = w.floor;
        let record = Owned::new(Record::new_held(hash, key, fence, take));
        w.grants_base = w.grants_base.wrapping_sub(fence);
        // Relaxed: the record is not published yet; the Release store of
        // the slot below publishes it with this link.
        record
            .next
            .store(slot.load(Ordering::Relaxed, guard), Ordering::Relaxed);
        // Release: a reader that finds the record sees it initialised.
        let record = record.into_shared(guard);
        slot.store(record, Ordering::Release);
        w.len += 1;
        if w.len * 2 > b.slots.len() {
            resize(shard, b.slots.len() * 2, guard);
        }
        // SAFETY: just published; it is HELD by the caller, so no sweeper
        // can retire it, and the guard keeps it alive regardless.
        (unsafe { record.deref() }, Some(fence))
    }

    /// Finds the key's record without creating one. Authoritative: a quick
    /// miss is confirmed under the shard lock.
    pub(crate) fn find_authoritative<'g>(
        &self,
        hash: u64,
        key: &str,
        guard: &'g Guard,
    ) -> Option<&'g Record> {
        // A quick hit that is not DEAD is the key's record; a DEAD one may
        // be about to be replaced, so confirm under the lock like a miss.
        if let Some(r) = self.find(hash, key, guard).filter(|r| !r.is_dead()) {
            return Some(r);
        }
        let shard = self.shard(hash);
        let _w = lock(&shard.writer);
        let buckets = shard.buckets.load(Ordering::Relaxed, guard);
        // SAFETY: we are a writer, and pinned.
        let b = unsafe { buckets.as_ref() }?;
        // Acquire: as every chain walk (the lock orders it anyway).
        find_in_chain(
            b.slot(hash).load(Ordering::Acquire, guard),
            hash,
            key,
            guard,
        )
    }

    /// Retires every idle record (free, nobody waiting), and frees the
    /// records of earlier sweeps that the epoch has let go. Answers how
    /// many it retired.
    pub(crate) fn sweep(&self, guard: &Guard) -> usize {
        self.free_safe_batches();
        let mut retired = 0;
        let mut garbage = Garbage(Vec::new());
        for shard in self.shards.iter() {
            // Relaxed peek: an empty shard needs no lock (a racing create is
            // swept next time).
            if shard.buckets.load(Ordering::Relaxed, guard).is_null() {
                continue;
            }
            let mut w = lock(&shard.writer);
            if w.len == 0 {
                continue;
            }
            let buckets = shard.buckets.load(Ordering::Relaxed, guard);
            // SAFETY: non-null (len > 0) and we are the only writer.
            let b = unsafe { buckets.deref() };
            for slot in b.slots.iter() {
                let mut link = slot;
                loop {
                    let p = link.load(Ordering::Relaxed, guard);
                    // SAFETY: records in chains are alive while we are pinned.
                    let Some(r) = (unsafe { p.as_ref() }) else {
                        break;
                    };
                    if r.try_retire() {
                        let next = r.next.load(Ordering::Relaxed, guard);
                        // Release: readers arriving later skip it.
                        link.store(next, Ordering::Release);
                        w.floor = w.floor.max(r.next_fence_after_retire());
                        w.grants_base = w.grants_base.wrapping_add(r.grant_mark());
                        w.len -= 1;
                        retired += 1;
                        garbage.0.push(p.as_raw());
                    } else {
                        link = &r.next;
                    }
                }
            }
            if w.len * 16 < b.slots.len() && b.slots.len() > MIN_BUCKETS {
                let target = (w.len * 4).next_power_of_two().max(MIN_BUCKETS);
                resize(shard, target, guard);
            }
        }
        if !garbage.0.is_empty() {
            self.defer_batch(garbage, guard);
        }
        retired
    }

    /// Hands one sweep's retired records to the epoch as one note (not one
    /// deferred free per record, so the memory comes back after a couple
    /// of advances however many keys went idle); a later sweep frees them
    /// (not this one after its flushes: that would keep every lock's Arc
    /// in the sweeper's hands for longer, and a lock is forgotten only
    /// while nobody else holds one).
    fn defer_batch(&self, records: Garbage, guard: &Guard) {
        let safe = Arc::new(AtomicBool::new(false));
        let note = safe.clone();
        // Release: pairs with `free_safe_batches`' Acquire, so the free
        // comes after every reader the epoch waited for.
        // SAFETY: the closure only sets a flag, valid whenever it runs.
        unsafe { guard.defer_unchecked(move || note.store(true, Ordering::Release)) };
        // The sweep's caller flushes once for every table (`sweep_keys`).
        lock(&self.pending).push(Batch { safe, records });
    }

    /// Frees the batches whose note the epoch has run.
    fn free_safe_batches(&self) {
        let ready: Vec<Batch> = {
            let mut pending = lock(&self.pending);
            if pending.is_empty() {
                return;
            }
            let (ready, waiting) = std::mem::take(&mut *pending)
                .into_iter()
                .partition(|b| b.safe.load(Ordering::Acquire));
            *pending = waiting;
            ready
        };
        for batch in ready {
            // SAFETY: every record in the batch was unlinked under its
            // shard lock, so no new reader can reach it, and the epoch ran
            // the batch's note only once every reader pinned before the
            // unlink had unpinned.
            unsafe { batch.records.free() };
        }
    }

    /// Batches of retired records not freed yet (for sweeps to go on).
    pub(crate) fn pending_batches(&self) -> usize {
        lock(&self.pending).len()
    }

    /// Calls `f` on every live record, under each shard's lock in turn.
    pub(crate) fn for_each(&self, guard: &Guard, mut f: impl FnMut(&Record)) {
        self.visit(guard, |v| {
            if let Visit::Record(r) = v {
                f(r)
            }
        });
    }

    /// Visits each shard's writer state and then its records, under the
    /// shard's lock.
    fn visit(&self, guard: &Guard, mut f: impl FnMut(Visit<'_>)) {
        for shard in self.shards.iter() {
            let w = lock(&shard.writer);
            f(Visit::Shard(&w));
            let buckets = shard.buckets.load(Ordering::Relaxed, guard);
            // SAFETY: we are a writer, and pinned.
            let Some(b) = (unsafe { buckets.as_ref() }) else {
                continue;
            };
            for slot in b.slots.iter() {
                let mut p = slot.load(Ordering::Relaxed, guard);
                // SAFETY: chains hold live records; we are pinned.
                while let Some(r) = unsafe { p.as_ref() } {
                    f(Visit::Record(r));
                    p = r.next.load(Ordering::Relaxed, guard);
                }
            }
        }
    }

    pub(crate) fn totals(&self) -> TableTotals {
        let guard = epoch::pin();
        let mut t = TableTotals::default();
        // Each shard's base and its records are read under its one lock,
        // so no record is made or retired between them.
        self.visit(&guard, |v| match v {
            Visit::Shard(w) => {
                t.live += w.len;
                t.grants = t.grants.wrapping_add(w.grants_base);
            }
            Visit::Record(r) => {
                t.held += usize::from(r.is_held());
                t.waiters += r.waiter_count() as usize;
                t.grants = t.grants.wrapping_add(r.grant_mark());
            }
        });
        t
    }

    pub(crate) fn live(&self) -> usize {
        self.shards.iter().map(|s| lock(&s.writer).len).sum()
    }

    /// The highest of the shards' floors: with no record live, above every
    /// fence the table ever granted.
    pub(crate) fn floor(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| lock(&s.writer).floor)
            .max()
            .unwrap_or(0)
    }
}

/// Records retired by one sweep, freed together once the epoch allows.
struct Garbage(Vec<*const Record>);

// SAFETY: the records are unreachable and owned by this list alone; `Record`
// is `Send`.
unsafe impl Send for Garbage {}

impl Garbage {
    /// # Safety
    /// No reader can reach the records any more (see `free_safe_batches`).
    unsafe fn free(self) {
        for p in self.0 {
            // SAFETY: allocated by `Owned::new`, unlinked, and freed once.
            drop(unsafe { Owned::from_raw(p as *mut Record) });
        }
    }
}

/// The key's record in the chain that starts at `p` (read from a bucket
/// slot, Acquire, by a reader pinned with `guard`).
#[inline(always)]
pub(crate) fn find_in_chain<'g>(
    mut p: Shared<'g, Record>,
    hash: u64,
    key: &str,
    guard: &'g Guard,
) -> Option<&'g Record> {
    // SAFETY: records reachable from a chain are retired through the epoch,
    // and we are pinned.
    while let Some(r) = unsafe { p.as_ref() } {
        if r.hash == hash as u32 && r.key.is(key) {
            return Some(r);
        }
        p = r.next.load(Ordering::Acquire, guard);
    }
    None
}

/// Rebuilds `shard`'s array with `n` buckets. The caller holds its lock.
fn resize(shard: &Shard, n: usize, guard: &Guard) {
    let old = shard.buckets.load(Ordering::Relaxed, guard);
    let new = Buckets::new(n);
    // SAFETY: the caller is the only writer and the array is non-null.
    let old_ref = unsafe { old.deref() };
    for slot in old_ref.slots.iter() {
        let mut p = slot.load(Ordering::Relaxed, guard);
        // SAFETY: live records, pinned.
        while let Some(r) = unsafe { p.as_ref() } {
            let next = r.next.load(Ordering::Relaxed, guard);
            let to = new.slot(u64::from(r.hash));
            // Release: a reader that follows this link into the new chain
            // sees initialised records (they were published already anyway).
            r.next
                .store(to.load(Ordering::Relaxed, guard), Ordering::Release);
            to.store(p, Ordering::Relaxed);
            p = next;
        }
    }
    // Release: readers of the new array see its slots filled.
    shard.buckets.store(new, Ordering::Release);
    // SAFETY: unreachable for new readers; pinned readers keep it alive.
    unsafe { guard.defer_destroy(old) };
}

impl Drop for Table {
    fn drop(&mut self) {
        // Retired records still waiting for the epoch: no reader is left
        // (below), so none can reach them.
        for batch in std::mem::take(&mut *lock(&self.pending)) {
            // SAFETY: `&mut self`, see below.
            unsafe { batch.records.free() };
        }
        // SAFETY: `&mut self`: no reader or writer is left (every hold and
        // lease keeps its lock's table alive through an Arc).
        let guard = unsafe { epoch::unprotected() };
        for shard in self.shards.iter() {
            let buckets = shard.buckets.load(Ordering::Relaxed, guard);
            if buckets.is_null() {
                continue;
            }
            // SAFETY: exclusive access, see above.
            let b = unsafe { buckets.into_owned() };
            for slot in b.slots.iter() {
                let mut p: Shared<'_, Record> = slot.load(Ordering::Relaxed, guard);
                while !p.is_null() {
                    // SAFETY: exclusive access; each record is in one chain.
                    let r = unsafe { p.into_owned() };
                    p = r.next.load(Ordering::Relaxed, guard);
                }
            }
        }
    }
}
