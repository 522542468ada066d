//! Transactions: the store's one writer over a small in-memory table.
//!
//! `store.tx(f)` takes the table's mutex, so transactions of one store run
//! one at a time. `f` reads through [`Tx`] and its writes are buffered in it:
//! they are applied when `f` answers `Ok` and dropped when it answers `Err`
//! or panics, so the table never holds half a transaction (and a panic
//! leaves the store usable). A fenced write is checked when made and again
//! at commit: it is accepted only while the key is held by the grant bearing
//! that fence, and never over a row written with a newer fence. The first
//! fenced write binds a row to its lock and key (its guard): fences of
//! different keys are not comparable, so a fenced write under any other
//! guard is refused `invalid` until the row is deleted.

use crate::ctx;
use crate::error::{shown_key, Error, ErrorKind};
use crate::key::{check_key, IntoKey, KeyBuf};
use crate::lease::Core;
use crate::lock::Lock;
use crate::sync::{lock, Mutex, Ordering};
use std::collections::BTreeMap;

#[derive(Default)]
pub(crate) struct Rows {
    map: BTreeMap<String, Row>,
    /// The rows' names and values, in bytes.
    bytes: usize,
}

#[derive(Clone)]
struct Row {
    value: Vec<u8>,
    /// The fence of the row's last fenced write (0: none).
    fence: u64,
    /// The lock and key whose grants' fences guard it: bound by its first
    /// fenced write, kept by plain writes.
    guard: Option<Box<(String, String)>>,
}

/// A fenced write to re-check at commit.
struct FencedWrite {
    lock: Lock,
    key: String,
    fence: u64,
}

/// A transaction in progress: the view `f` gets in
/// [`Store::tx`](crate::Store::tx) and [`Store::tx_with`](crate::Store::tx_with).
///
/// Reads see the table as it stood when the transaction began, plus this
/// transaction's own writes. Writes ([`put`](Tx::put),
/// [`put_fenced`](Tx::put_fenced), [`delete`](Tx::delete)) are buffered
/// here and reach the table only when the closure answers `Ok` (commit);
/// an `Err` or a panic drops them all (rollback). A fenced write is
/// checked when made and again at commit, so a lease lost in between fails
/// the commit (`lost`) and nothing is written.
///
/// ```
/// use holdline::Store;
///
/// #[derive(Debug, PartialEq)]
/// enum ShopError {
///     CardDeclined,
///     Store(holdline::ErrorKind),
/// }
/// impl From<holdline::Error> for ShopError {
///     fn from(e: holdline::Error) -> Self {
///         ShopError::Store(e.kind())
///     }
/// }
///
/// let store = Store::new();
/// // Commit: `Ok` makes every write visible.
/// store.tx(|tx| {
///     tx.put("stock:apples", "3");
///     // The transaction sees its own writes before they commit.
///     assert_eq!(tx.get("stock:apples"), Some(&b"3"[..]));
///     Ok(())
/// })?;
///
/// // Rollback: an `Err` of your own drops every write.
/// let sold: Result<(), ShopError> = store.tx_with(|tx| {
///     tx.put("stock:apples", "2");
///     tx.put("order:1", "1 apple");
///     Err(ShopError::CardDeclined) // card declined
/// });
/// assert_eq!(sold, Err(ShopError::CardDeclined));
///
/// let (stock, order) = store.tx(|tx| {
///     Ok((tx.get("stock:apples").map(<[u8]>::to_vec), tx.get("order:1").is_some()))
/// })?;
/// assert_eq!(stock.as_deref(), Some(&b"3"[..]));
/// assert!(!order);
/// # Ok::<(), holdline::Error>(())
/// ```
pub struct Tx<'s> {
    rows: &'s Rows,
    store_id: usize,
    /// Buffered writes: `None` deletes.
    writes: BTreeMap<String, Option<Row>>,
    fenced: Vec<FencedWrite>,
}

impl Tx<'_> {
    fn row(&self, key: &str) -> Option<&Row> {
        match self.writes.get(key) {
            Some(w) => w.as_ref(),
            None => self.rows.map.get(key),
        }
    }

    /// The row's value, as this transaction sees it.
    pub fn get(&self, key: &str) -> Option<&[u8]> {
        self.row(key).map(|r| r.value.as_slice())
    }

    /// Bytes the committed rows take (names and values), as the
    /// transaction began: a writer can cap the table's size with it.
    pub fn committed_bytes(&self) -> usize {
        self.rows.bytes
    }

    /// The fence of the row's last fenced write, if any.
    pub fn fence_of(&self, key: &str) -> Option<u64> {
        self.row(key).map(|r| r.fence).filter(|&f| f != 0)
    }

    /// Writes a row (keeping the fence and guard it remembers).
    pub fn put(&mut self, key: &str, value: impl Into<Vec<u8>>) {
        let (fence, guard) = self
            .row(key)
            .map_or((0, None), |r| (r.fence, r.guard.clone()));
        self.writes.insert(
            key.to_owned(),
            Some(Row {
                value: value.into(),
                fence,
                guard,
            }),
        );
    }

    /// The lock and key that guard the row (its first fenced write's), if any.
    pub fn guard_of(&self, key: &str) -> Option<(&str, &str)> {
        let guard = self.row(key)?.guard.as_deref()?;
        Some((guard.0.as_str(), guard.1.as_str()))
    }

    /// Deletes a row.
    pub fn delete(&mut self, key: &str) {
        self.writes.insert(key.to_owned(), None);
    }

    /// Writes a row on behalf of the holder of `lock_key` in `lock` whose
    /// lease bears `fence`. Fails `lost` unless that grant still holds the
    /// key, or when the row was written with a newer fence; fails
    /// `invalid` when another lock or key guards the row (its first fenced
    /// write bound it: fences of different keys are not comparable).
    pub fn put_fenced<'k, K: IntoKey<'k>>(
        &mut self,
        lock: &Lock,
        lock_key: K,
        fence: u64,
        key: &str,
        value: impl Into<Vec<u8>>,
    ) -> Result<(), Error> {
        let mut buf = KeyBuf::new();
        let text = lock_key.into_key().text(&mut buf);
        check_key(lock.name(), text)?;
        if lock.store.id() != self.store_id {
            return Err(
                Error::new(ErrorKind::Invalid, "the lock belongs to another store")
                    .for_key(lock.name(), text),
            );
        }
        if let Some((guard_lock, guard_key)) = self.guard_of(key) {
            if (guard_lock, guard_key) != (lock.name(), text) {
                let why = format!(
                    "row {key:?} is guarded by lock {guard_lock} key {}",
                    shown_key(guard_key)
                );
                return Err(Error::new(ErrorKind::Invalid, why).for_key(lock.name(), text));
            }
        }
        check_fence(lock, text, fence)?;
        if let Some(newer) = self.row(key).map(|r| r.fence).filter(|&f| f > fence) {
            return Err(Error::lost(format!(
                "row {key:?} was written with a newer fence ({newer} > {fence})"
            ))
            .for_key(lock.name(), text));
        }
        let guard = Some(Box::new((lock.name().to_owned(), text.to_owned())));
        self.writes.insert(
            key.to_owned(),
            Some(Row {
                value: value.into(),
                fence,
                guard,
            }),
        );
        self.fenced.push(FencedWrite {
            lock: lock.clone(),
            key: text.to_owned(),
            fence,
        });
        Ok(())
    }
}

fn check_fence(lock: &Lock, key: &str, fence: u64) -> Result<(), Error> {
    let holders = lock.holders(key, fence);
    let why = match holders.newest {
        _ if holders.asked_holds => return Ok(()),
        None => format!("the key is not held (fence {fence})"),
        Some(_) if fence > holders.latest => format!("fence {fence} was never granted"),
        Some(newest) if newest > fence => {
            format!("a newer grant holds the key (fence {newest} > {fence})")
        }
        // Several permits: a later grant came and went; older ones hold.
        Some(_) => format!("the grant of fence {fence} has ended"),
    };
    Err(Error::lost(why).for_key(lock.name(), key))
}

/// Runs `f` as the store's one writer; commits its writes when it answers
/// `Ok`, drops them when it answers `Err` (the caller's own error type, any
/// of the store's errors converted into it) or panics.
pub(crate) fn run<R, E: From<Error>>(
    store: &Core,
    rows: &Mutex<Rows>,
    f: impl FnOnce(&mut Tx<'_>) -> Result<R, E>,
) -> Result<R, E> {
    // Acquire: pairs with close's SeqCst store; a tx racing close may run
    // once more, as a call that began before it.
    if store.closed.load(Ordering::Acquire) {
        return Err(Error::closed().into());
    }
    // Nested transactions, of this store or another, are refused: of this
    // one they would deadlock, of two stores they could lock in opposite
    // orders on two threads.
    if ctx::in_tx() {
        return Err(Error::new(ErrorKind::Invalid, "a transaction inside a transaction").into());
    }
    let _mark = ctx::enter_tx();
    let mut rows = lock(rows);
    let (value, writes, fenced) = {
        let mut tx = Tx {
            rows: &rows,
            store_id: store.id(),
            writes: BTreeMap::new(),
            fenced: Vec::new(),
        };
        let value = f(&mut tx)?;
        (value, tx.writes, tx.fenced)
    };
    for w in &fenced {
        check_fence(&w.lock, &w.key, w.fence)?;
    }
    if store.closed.load(Ordering::Acquire) {
        return Err(Error::closed().into());
    }
    for (k, w) in writes {
        let size = k.len();
        let old = match w {
            Some(row) => {
                rows.bytes += size + row.value.len();
                rows.map.insert(k, row)
            }
            None => rows.map.remove(&k),
        };
        if let Some(old) = old {
            rows.bytes -= size + old.value.len();
        }
    }
    Ok(value)
}
