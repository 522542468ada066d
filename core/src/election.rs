//! Elections among the threads and tasks of one process, in the shape of
//! etcd's `Election` and of the server's clients (`campaign`, `leader`,
//! `observe`, a leadership that proclaims and resigns).
//!
//! A campaign is an exclusive hold of the election's key, waited for as
//! long as it takes, so campaigners stand in the key's FIFO line; the
//! leadership is that lease: its fence rises every term, and its signal
//! fires the moment it is lost (revoked at maxHold, run out, its store
//! closed), before the core grants the key to the next campaigner. The
//! election's board (one per lock and name, shared by every [`Election`]
//! of it) keeps the leader's note and wakes observers.
//!
//! Invariants:
//! - the board names at most one term, and only the newest: a term whose
//!   lease ended is cleared before the next is named. A resign (or a
//!   dropped leadership) clears it before the core lets the key go; a
//!   lease the core ends on its own wakes the board through its signal,
//!   which fires before the next grant, and a new term found a lost one
//!   named clears it first;
//! - every change of the board bumps `version` and wakes every observer:
//!   an observer yields the board's state whenever it changed since its
//!   last item (one that fell behind yields the latest, as a watch does);
//!   a pending observer keeps one waker on the board however often it is
//!   polled (`board`'s module doc).
//!
//! The board itself (its term, version and waiters, one per lock and name)
//! is `board`'s, below the lock's shared state that keeps it; this module
//! gives it a term's lease as a [`TermLease`].

use crate::board::{locked, Board, Named, Registration, Term, TermLease};
use crate::error::{Error, ErrorKind};
use crate::lease::{Aborted, HeldLease, Signal};
use crate::lock::Lock;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::{Arc, PoisonError, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// How long one turn of a campaign waits in line before it joins again
/// (a campaign waits as long as it takes; the core's waits are bounded).
const CAMPAIGN_TURN: Duration = Duration::from_secs(3600);

/// The leader an election has now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// What the leader said of itself (its address, say).
    pub note: String,
    /// Its term's fence: greater than every earlier term's.
    pub fence: u64,
    /// How long it has led.
    pub held_for: Option<Duration>,
}

/// A term's lease, as the board knows it: its signal, and its loss's
/// registration of a [`LossWaker`] (kept so the registration stays;
/// dropped with the term, which undoes it).
struct TermOf {
    signal: Signal,
    _lost: Pin<Box<Aborted>>,
}

impl TermLease for TermOf {
    fn is_lost(&self) -> bool {
        self.signal.is_aborted()
    }
}

/// Names the term of `lease` on `board` (after clearing a lost one).
fn name_term(board: &Arc<Board>, lease: &HeldLease, note: &str) {
    let signal = lease.signal();
    let mut lost = Box::pin(signal.aborted());
    let waker = Waker::from(Arc::new(LossWaker {
        board: Arc::downgrade(board),
        fence: lease.fence(),
    }));
    // Registers the waker with the lease's loss (a lost one is seen below).
    let _ = lost.as_mut().poll(&mut Context::from_waker(&waker));
    let mut term = locked(&board.term);
    let old = term.leader.replace(Named {
        note: note.to_owned(),
        fence: lease.fence(),
        since: Instant::now(),
        lease: Box::new(TermOf {
            signal,
            _lost: lost,
        }),
    });
    board.changed(&mut term);
    drop(term);
    // Dropped unlocked: see `Board::clear`.
    drop(old);
}

/// The board's leader, as callers see it, with the version.
fn read(term: &Term) -> (Option<Leader>, u64) {
    let leader = term.leader.as_ref().filter(|n| !n.lease.is_lost());
    let leader = leader.map(|n| Leader {
        note: n.note.clone(),
        fence: n.fence,
        held_for: Some(n.since.elapsed()),
    });
    (leader, term.version)
}

/// Wakes the board when a term's lease is lost.
struct LossWaker {
    board: Weak<Board>,
    fence: u64,
}

impl Wake for LossWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(board) = self.board.upgrade() {
            board.clear(self.fence);
        }
    }
}

/// An election: the campaigners of one name of a lock (`lock.election(name)`).
pub struct Election {
    lock: Lock,
    name: Box<str>,
    board: Arc<Board>,
}

impl Lock {
    /// The election `name` of this lock: its leader holds the key `name`.
    ///
    /// ```
    /// use holdline::Store;
    ///
    /// let store = Store::new();
    /// let jobs = store.lock("jobs").open()?;
    /// let election = jobs.election("nightly");
    /// let lead = election.campaign("worker-1")?; // waits as long as it takes
    /// assert_eq!(election.leader().unwrap().note, "worker-1");
    /// lead.proclaim("worker-1, at step 2")?;
    /// lead.resign()?;
    /// assert_eq!(election.leader(), None);
    /// # Ok::<(), holdline::Error>(())
    /// ```
    pub fn election(&self, name: &str) -> Election {
        Election {
            lock: self.clone(),
            name: name.into(),
            board: Board::of(&self.shared.elections, name),
        }
    }
}

impl Election {
    /// The election's name (its key in the lock).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Campaigns from this thread, waiting as long as it takes; answers the
    /// leadership, or an error other than the wait (a bad name, the store
    /// closed, the line full).
    pub fn campaign(&self, note: &str) -> Result<Leadership, Error> {
        loop {
            let hold = self.lock.key(&*self.name).exclusive().wait(CAMPAIGN_TURN);
            match hold.acquire() {
                Ok(lease) => return Ok(self.elected(lease, note)),
                Err(e) if e.kind() == ErrorKind::InUse => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// [`campaign`](Election::campaign) as a task: dropping the future
    /// leaves the line. Fails as `campaign` does (a bad name, the store
    /// closed, the line full), never for the wait.
    pub async fn campaign_async(&self, note: &str) -> Result<Leadership, Error> {
        loop {
            let hold = self.lock.key(&*self.name).exclusive().wait(CAMPAIGN_TURN);
            match hold.acquire_async().await {
                Ok(lease) => return Ok(self.elected(lease, note)),
                Err(e) if e.kind() == ErrorKind::InUse => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn elected(&self, lease: HeldLease, note: &str) -> Leadership {
        name_term(&self.board, &lease, note);
        Leadership {
            lease: Some(lease),
            board: self.board.clone(),
        }
    }

    /// The leader now, if any.
    pub fn leader(&self) -> Option<Leader> {
        read(&locked(&self.board.term)).0
    }

    /// The leaders, the present one first, then each change (an observer
    /// that fell behind yields the latest state, not every one between).
    pub fn observe(&self) -> Observer {
        Observer {
            board: self.board.clone(),
            seen: None,
            waiting: None,
        }
    }
}

/// A term of leadership: the election's lease. Dropping it resigns.
pub struct Leadership {
    lease: Option<HeldLease>,
    board: Arc<Board>,
}

impl Leadership {
    fn lease(&self) -> &HeldLease {
        self.lease.as_ref().expect("held until resigned")
    }

    /// This term's fence: greater than every earlier term's.
    pub fn fence(&self) -> u64 {
        self.lease().fence()
    }

    /// Fires the moment the leadership is lost (before anyone else leads).
    pub fn signal(&self) -> Signal {
        self.lease().signal()
    }

    /// Whether it was lost.
    pub fn is_lost(&self) -> bool {
        self.lease().is_lost()
    }

    /// Replaces the leader's note; `lost` once the leadership was lost.
    pub fn proclaim(&self, note: &str) -> Result<(), Error> {
        // Before the board is held: see `Board::clear`.
        self.lease().check()?;
        let mut term = locked(&self.board.term);
        if let Some(named) = term.leader.as_mut().filter(|n| n.fence == self.fence()) {
            named.note = note.to_owned();
            self.board.changed(&mut term);
        }
        Ok(())
    }

    /// Gives the leadership up: the next campaigner is elected. `lost` when
    /// it was lost before.
    pub fn resign(mut self) -> Result<(), Error> {
        self.let_go()
    }

    /// Clears the board, then lets the key go (its observers are told of
    /// the end before the next term).
    fn let_go(&mut self) -> Result<(), Error> {
        let Some(lease) = self.lease.take() else {
            return Ok(());
        };
        self.board.clear(lease.fence());
        lease.release()
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        let _ = self.let_go();
    }
}

/// An election's leaders, one change at a time (see [`Election::observe`]).
pub struct Observer {
    board: Arc<Board>,
    /// The version last yielded (`None`: nothing yet).
    seen: Option<u64>,
    /// Its waker on the board, if it put one there (module doc).
    waiting: Option<Registration>,
}

impl Observer {
    /// The next leader (or none) not yet yielded: the present one at once
    /// the first time, then each change as it comes.
    pub async fn next(&mut self) -> Option<Leader> {
        poll_fn(|cx| {
            let mut term = locked(&self.board.term);
            let (leader, version) = read(&term);
            if self.seen != Some(version) {
                self.seen = Some(version);
                return Poll::Ready(leader);
            }
            self.waiting = Some(term.wait_with(self.waiting, cx.waker()));
            Poll::Pending
        })
        .await
    }

    /// [`next`](Observer::next) from a thread: `None` when nothing changed
    /// within `timeout`.
    pub fn next_timeout(&mut self, timeout: Duration) -> Option<Option<Leader>> {
        let deadline = Instant::now() + timeout;
        let mut term = locked(&self.board.term);
        loop {
            let (leader, version) = read(&term);
            if self.seen != Some(version) {
                self.seen = Some(version);
                return Some(leader);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            term = self
                .board
                .changed
                .wait_timeout(term, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::Store;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts its wakes.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_pending_observer_keeps_one_waker_however_often_it_is_polled() {
        let store = Store::new();
        let lock = store.lock("jobs").open().unwrap();
        let election = lock.election("nightly");
        let mut observer = election.observe();
        let waiting = |e: &Election| locked(&e.board.term).waiting_tasks();
        let (first, second) = (
            Arc::new(Count(AtomicUsize::new(0))),
            Arc::new(Count(AtomicUsize::new(0))),
        );
        let (w1, w2) = (Waker::from(first.clone()), Waker::from(second.clone()));
        {
            let mut next = std::pin::pin!(observer.next());
            // The present state (no leader) at once.
            let cx = &mut Context::from_waker(&w1);
            assert_eq!(next.as_mut().poll(cx), Poll::Ready(None));
        }
        for round in 0..3 {
            // A new future each round, polled many times, by two wakers.
            let mut next = std::pin::pin!(observer.next());
            for i in 0..100 {
                let w = if i % 2 == 0 { &w1 } else { &w2 };
                assert!(next.as_mut().poll(&mut Context::from_waker(w)).is_pending());
                assert_eq!(waiting(&election), 1, "round {round}, poll {i}");
            }
        }
        // The change wakes the last waker, once, and leaves none behind.
        let lead = election.campaign("w1").unwrap();
        assert_eq!(
            (
                first.0.load(Ordering::Relaxed),
                second.0.load(Ordering::Relaxed)
            ),
            (0, 1)
        );
        assert_eq!(waiting(&election), 0);
        let mut next = std::pin::pin!(observer.next());
        let seen = next.as_mut().poll(&mut Context::from_waker(&w1));
        assert!(matches!(seen, Poll::Ready(Some(l)) if l.note == "w1"));
        drop(lead);
    }
}
