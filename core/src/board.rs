//! An election's board: the term it names now, a version bumped by every
//! change, and who waits for the next change. One per lock and election
//! name, kept (weakly) by the lock's `LockShared`, so it sits below it;
//! `election` builds campaigns, leaderships and observers on it.
//!
//! The board knows a term's lease only as a [`TermLease`] (whether it was
//! lost), so it needs nothing above it; `election` gives it the lease.
//!
//! Invariants:
//! - every change of the term bumps `version` and wakes every waiter, and
//!   only a change takes a task's waker off the board;
//! - so a waker registered at version `v` is still on the board while the
//!   version is `v`: an observer's [`Registration`] at the current
//!   version names its own waker, which it replaces rather than adds to
//!   (one waker per pending observer, however often it is polled).

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::task::Waker;
use std::time::Instant;

/// A lock's boards, by election name: weak, so a board lives as long as
/// some election, leadership or observer of it.
pub(crate) type Boards = Mutex<HashMap<Box<str>, Weak<Board>>>;

/// What the board needs of a term's lease. Dropping it undoes whatever it
/// registered with the lease (its loss's waker).
pub(crate) trait TermLease: Send {
    /// Whether the lease was lost (revoked, run out, its store closed).
    fn is_lost(&self) -> bool;
}

/// One election's shared state.
pub(crate) struct Board {
    pub(crate) term: Mutex<Term>,
    /// Threads waiting for a change (`Observer::next_timeout`).
    pub(crate) changed: Condvar,
}

#[derive(Default)]
pub(crate) struct Term {
    pub(crate) leader: Option<Named>,
    /// Bumped by every change (a leader named, proclaimed or gone).
    pub(crate) version: u64,
    /// Tasks waiting for a change (`Observer::next`), at most one each.
    wakers: Vec<Waker>,
}

/// The term the board names.
pub(crate) struct Named {
    pub(crate) note: String,
    pub(crate) fence: u64,
    pub(crate) since: Instant,
    pub(crate) lease: Box<dyn TermLease>,
}

/// Where a pending task's waker sits on the board: its index in the list,
/// at the version it was put there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Registration {
    version: u64,
    at: usize,
}

/// Holds `m`. Nothing panics while the board is held; a poisoned board is
/// a board.
pub(crate) fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Board {
    /// The board of `name` among `boards`, made if none is alive.
    pub(crate) fn of(boards: &Boards, name: &str) -> Arc<Board> {
        let mut map = locked(boards);
        if let Some(board) = map.get(name).and_then(Weak::upgrade) {
            return board;
        }
        map.retain(|_, b| b.strong_count() > 0);
        let board = Arc::new(Board {
            term: Mutex::new(Term::default()),
            changed: Condvar::new(),
        });
        map.insert(name.into(), Arc::downgrade(&board));
        board
    }

    /// Bumps the version and wakes every waiter (`term` is held).
    pub(crate) fn changed(&self, term: &mut Term) {
        term.version += 1;
        for waker in term.wakers.drain(..) {
            waker.wake();
        }
        self.changed.notify_all();
    }

    /// Clears the term of `fence` if the board names it.
    ///
    /// Called from the lease's loss, perhaps while the core tells every
    /// waiter of it: so the board is never held while the core is called
    /// (the cleared term, whose registration a drop undoes, is dropped
    /// after the board is let go).
    pub(crate) fn clear(&self, fence: u64) {
        let mut term = locked(&self.term);
        if term.leader.as_ref().is_some_and(|n| n.fence == fence) {
            let gone = term.leader.take();
            self.changed(&mut term);
            drop(term);
            drop(gone);
        }
    }
}

impl Term {
    /// Makes `waker` the one the next change wakes for the task that last
    /// registered as `mine` (`None`: never): replaced in place while the
    /// version is the one it registered at (its waker is still there),
    /// else added. Answers the registration to keep.
    pub(crate) fn wait_with(&mut self, mine: Option<Registration>, waker: &Waker) -> Registration {
        match mine {
            Some(r) if r.version == self.version => {
                let kept = &mut self.wakers[r.at];
                if !kept.will_wake(waker) {
                    *kept = waker.clone();
                }
                r
            }
            _ => {
                self.wakers.push(waker.clone());
                Registration {
                    version: self.version,
                    at: self.wakers.len() - 1,
                }
            }
        }
    }

    /// How many task wakers wait on the board.
    #[cfg(test)]
    pub(crate) fn waiting_tasks(&self) -> usize {
        self.wakers.len()
    }
}
