//! Elections with etcd's shape, made of a hold with a note and an
//! observer: `lock.election(name)` is the key `name` of the lock;
//! campaigning holds it (alone, with the candidate's note, waiting as long
//! as it takes), the [`Leadership`] is that lease, `leader()` is
//! `INSPECT`, and `observe()` is `OBSERVE` (the `observe` module).

use crate::error::Error;
use crate::hold::HeldLease;
use crate::lease::{Lease, Signal};
use crate::lock::Lock;
use crate::observe::{Leader, Observer};
use holdline::ErrorKind;
use std::fmt;
use std::time::Duration;

/// How long one `HOLD` of a campaign waits before it is sent again (an
/// `in use` answer just means: still not elected).
const CAMPAIGN_WAIT: Duration = Duration::from_secs(60);

/// An election: the key `name` of a lock, from [`Lock::election`].
/// `Clone + Send + Sync`, cheap to clone.
#[derive(Clone)]
pub struct Election {
    lock: Lock,
    name: String,
}

impl Lock {
    /// The election `name` of this lock: its key `name`, held by the
    /// leader (with the lock's ttl and maxHold, under the client's network
    /// rules, as any hold).
    ///
    /// ```no_run
    /// # async fn demo(lock: holdline_client::Lock) -> Result<(), holdline_client::Error> {
    /// let election = lock.election("billing");
    /// let lead = election.campaign("10.0.0.5:8080").await?; // waits as long as it takes
    /// println!("leading under fence {}", lead.fence());
    /// lead.proclaim("10.0.0.5:8081").await?;
    /// lead.resign().await?;
    /// # Ok(()) }
    /// ```
    pub fn election(&self, name: &str) -> Election {
        Election {
            lock: self.clone(),
            name: name.to_owned(),
        }
    }
}

impl Election {
    /// The election's name (the key its leader holds).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stands for leader with `note` (what the others see: an address, a
    /// job id), waiting as long as it takes: a `HOLD` of the key alone
    /// (all its permits) with `NOTE note`, sent again whenever its wait
    /// (60 s) ends. Drop the future to stop campaigning; that leaves the
    /// key's line at once. Fails with any error but `in use` (a bad note,
    /// `invalid`; the server unreachable, `closed`).
    pub async fn campaign(&self, note: &str) -> Result<Leadership, Error> {
        loop {
            let hold = self.lock.key(&*self.name).wait(CAMPAIGN_WAIT);
            match hold.exclusive().note(note).acquire().await {
                Ok(lease) => return Ok(Leadership { lease }),
                Err(e) if e.kind() == ErrorKind::InUse => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The leader now (`INSPECT`), or `None` when nobody leads.
    pub async fn leader(&self) -> Result<Option<Leader>, Error> {
        let Some(info) = self.lock.inspect(&*self.name).await? else {
            return Ok(None);
        };
        Ok(info.holder_list.first().map(|holder| Leader {
            note: holder.note.clone(),
            fence: holder.fence,
            held_for: info.held_for,
            holder_id: holder.id,
        }))
    }

    /// The leader now, then every change, as a stream of `Option<Leader>`
    /// (`None`: nobody leads), on a connection of its own (`OBSERVE`).
    /// After a broken connection (or the server's `closed`) it observes
    /// again and yields the present state again. Nothing is sent before
    /// the first poll.
    ///
    /// ```no_run
    /// # async fn demo(lock: holdline_client::Lock) {
    /// let mut leaders = lock.election("billing").observe();
    /// while let Some(leader) = leaders.next().await {
    ///     match leader {
    ///         Some(l) => println!("{} leads (fence {})", l.note, l.fence),
    ///         None => println!("nobody leads"),
    ///     }
    /// }
    /// // Ended: an error retrying cannot mend.
    /// println!("{:?}", leaders.error());
    /// # }
    /// ```
    pub fn observe(&self) -> Observer {
        let store = self.lock.store.clone();
        let ttl = Duration::from_millis(self.lock.ttl_ms);
        Observer::new(store, self.lock.name.clone(), self.name.clone(), ttl)
    }
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("lock", &self.lock.name())
            .field("name", &self.name)
            .finish()
    }
}

/// Being the leader: the lease of the election's key, from
/// [`Election::campaign`]. Renewed in the background; lost as any lease
/// is (its signal aborts). Dropping it resigns (a `RELEASE` not waited
/// for).
pub struct Leadership {
    lease: HeldLease,
}

impl Leadership {
    /// The fence of this leadership: greater than every earlier leader's.
    /// Pass it to whatever the leader writes to.
    pub fn fence(&self) -> u64 {
        self.lease.fence()
    }

    /// The lease's loss signal: it aborts the moment the leadership is
    /// lost (revoked, run out, the connection dropped, or the server
    /// silent for the ttl), never on a resignation.
    pub fn signal(&self) -> Signal {
        self.lease.signal()
    }

    /// Whether the leadership was lost (the clock consulted first).
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// The lease under the leadership.
    pub fn lease(&self) -> &Lease {
        self.lease.lease()
    }

    /// Replaces the note the others see (`NOTE`): observers get the
    /// leader again with it. `Err` (`lost`) once the leadership is lost.
    /// There is no proclaiming after the leadership ended on purpose:
    /// [`resign`](Leadership::resign) takes the leadership by value, so no
    /// `proclaim` can follow it (the other clients refuse one with
    /// `proclaim_ended`).
    pub async fn proclaim(&self, note: &str) -> Result<(), Error> {
        self.lease.set_note(note).await
    }

    /// Steps down (`RELEASE`): the next candidate is elected. `Err`
    /// (`lost`, the server's text) when the leadership had been lost.
    pub async fn resign(self) -> Result<(), Error> {
        self.lease.release().await
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Leadership").field(self.lease()).finish()
    }
}
