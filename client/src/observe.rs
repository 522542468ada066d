//! Watching one key's holder: `OBSERVE lock key` on a connection of its
//! own, read by a task of its own, as a [`Stream`] of who leads (the key's
//! holder and its note), the present state first.
//!
//! The server answers `OK`, pushes the present state at once (`held`, one
//! push per holder, or `free`), then one push per change: `granted`,
//! `released`, `expired`, `revoked`, `disconnected`, and `held` again when
//! a holder's note changes. `closed` (the store or the cluster partition
//! closed) ends the observation. Each push is
//! `["observe", lock, key, event, fence, permits, holder_id, note]`.
//!
//! The task turns them into items: a holder on `held` and `granted`; none
//! on `free`, and on an end whose fence is the holder last yielded (the end
//! of another lease, one already replaced, says nothing new). When the
//! connection breaks, the server says `closed`, or nothing has been read
//! for the lock's ttl (at least 1 s; a `PING` goes every third of it while
//! the connection is silent), the task opens a fresh connection (after
//! 100 ms, then doubling up to 2 s while it keeps failing), observes again
//! (following `MOVED` and `CLUSTERDOWN` in a cluster) and yields the
//! present state again. An error retrying cannot mend (`invalid`: a
//! RESP2 server, a lock the user may not name; `limit`; the store closed
//! here) ends the stream, and [`Observer::error`] tells it.

use crate::connection::Connection;
use crate::error::Error;
use crate::route::Route;
use crate::store::Store;
use crate::texts;
use futures_core::Stream;
use holdline::wire::Scope;
use holdline::ErrorKind;
use holdline_resp::Value;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// A key's holder as an election sees it: the leader.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// What the leader campaigned with, or proclaimed since.
    pub note: String,
    /// Its lease's fence: every later leader's is greater.
    pub fence: u64,
    /// How long it has led: the server's count (to the millisecond) from
    /// [`Election::leader`](crate::Election::leader); from
    /// [`Election::observe`](crate::Election::observe), zero for a grant
    /// just pushed, the time since that push for a note proclaimed later,
    /// and `None` for a leader found in place (the push does not say).
    pub held_for: Option<Duration>,
    /// The server's id of the leader's connection (`CLIENT KILL ID <id>`
    /// closes it, and the lease with it).
    pub holder_id: u64,
}

/// The items of [`Election::observe`](crate::Election::observe): the
/// leader now (`None`: nobody leads), then one item per change, and the
/// present state again after every reconnect. A [`Stream`]; also
/// [`next`](Observer::next) without a stream library. Dropping it closes
/// its connection.
pub struct Observer {
    items: mpsc::Receiver<Option<Leader>>,
    /// The task, until the first poll starts it on the caller's runtime.
    start: Option<Watch>,
    /// Why the stream ended, once it did.
    end: Arc<OnceLock<Error>>,
}

/// Items the task may yield ahead of the reader before it stops reading
/// the socket (the server disconnects an observer 1 MiB behind; the task
/// then reconnects and yields the present state).
const BACKLOG: usize = 64;

/// The first pause before observing again, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const LONGEST_PAUSE: Duration = Duration::from_secs(2);

/// The least silence taken for a dead connection.
const MIN_SILENCE: Duration = Duration::from_secs(1);

impl Observer {
    /// The observer of `lock`'s `key` on `store`; nothing is sent before
    /// the first poll. `ttl` bounds the silence believed.
    pub(crate) fn new(store: Store, lock: Arc<str>, key: String, ttl: Duration) -> Observer {
        let (tx, items) = mpsc::channel(BACKLOG);
        let end = Arc::new(OnceLock::new());
        let watch = Watch {
            store,
            lock,
            key,
            silence: ttl.max(MIN_SILENCE),
            tx,
            end: end.clone(),
        };
        Observer {
            items,
            start: Some(watch),
            end,
        }
    }

    /// The next item; `None` once the stream ended (see [`error`](Observer::error)).
    pub async fn next(&mut self) -> Option<Option<Leader>> {
        poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    /// Why the stream ended: an error retrying cannot mend (`invalid`,
    /// `limit`, the store closed here). `None` while it runs.
    pub fn error(&self) -> Option<&Error> {
        self.end.get()
    }
}

impl Stream for Observer {
    type Item = Option<Leader>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(watch) = self.start.take() {
            tokio::spawn(watch.run());
        }
        self.items.poll_recv(cx)
    }
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("error", &self.error())
            .finish_non_exhaustive()
    }
}

/// The task's side: where and what it observes, and where items go.
struct Watch {
    store: Store,
    lock: Arc<str>,
    key: String,
    /// Nothing read for this long: the connection is taken for dead.
    silence: Duration,
    tx: mpsc::Sender<Option<Leader>>,
    end: Arc<OnceLock<Error>>,
}

/// Why one observation ended.
enum Ending {
    /// The reader dropped the stream.
    Gone,
    /// Observe again: the connection broke or went silent, the server said
    /// `closed`, or could not be reached.
    Again,
    /// An error retrying will not mend: the stream ends.
    Over(Error),
}

impl Watch {
    async fn run(self) {
        let mut pause = FIRST_PAUSE;
        loop {
            let ending = tokio::select! {
                _ = self.tx.closed() => Ending::Gone,
                ending = self.observe_once(&mut pause) => ending,
            };
            match ending {
                Ending::Gone => return,
                Ending::Over(e) => {
                    let _ = self.end.set(e);
                    return;
                }
                Ending::Again => {}
            }
            tokio::select! {
                _ = self.tx.closed() => return,
                _ = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(LONGEST_PAUSE);
        }
    }

    /// One connection: observed, then read until it ends. `pause` goes back
    /// to the first once the server answered `OK`.
    async fn observe_once(&self, pause: &mut Duration) -> Ending {
        let mut conn = match self.open().await {
            Ok(conn) => conn,
            Err(e) => return self.judge(e),
        };
        *pause = FIRST_PAUSE;
        let mut holder = Holding::default();
        let mut last_read = Instant::now();
        // A `PING` went since the last frame read.
        let mut pinged = false;
        loop {
            let wake = match pinged {
                true => last_read + self.silence,
                false => last_read + self.silence / 3,
            };
            let frame = tokio::select! {
                biased;
                frame = conn.read_frame() => frame,
                _ = tokio::time::sleep_until(wake) => {
                    if pinged {
                        return Ending::Again;
                    }
                    conn.queue(&["PING"]);
                    if conn.flush().await.is_err() {
                        return Ending::Again;
                    }
                    pinged = true;
                    continue;
                }
            };
            let Ok(frame) = frame else {
                return Ending::Again;
            };
            (last_read, pinged) = (Instant::now(), false);
            let Value::Push(items) = frame else { continue };
            match holder.on_push(&items, &self.lock, &self.key) {
                Seen::Nothing => {}
                Seen::Closed => return Ending::Again,
                Seen::Item(item) => {
                    if self.tx.send(item).await.is_err() {
                        return Ending::Gone;
                    }
                }
            }
        }
    }

    /// A connection to the key's node that answered `OBSERVE` with `OK`
    /// (after `MOVED` and `CLUSTERDOWN`, followed as for any command).
    async fn open(&self) -> Result<Connection, Error> {
        let inner = &self.store.inner;
        let scope = Scope::Key(&self.lock, &self.key);
        inner.check_open(scope)?;
        let mut route = Route::new(inner, &self.key, scope);
        loop {
            let node = route.node().await?;
            let mut conn = node.new_connection().await?;
            conn.queue(&["OBSERVE", &*self.lock, self.key.as_str()]);
            // The pushes come after the `OK`: the first frame is the reply.
            // A server silent for the ttl is given up, as later.
            let answer = async {
                conn.flush().await?;
                conn.read_reply().await
            };
            let reply = tokio::time::timeout(self.silence, answer).await;
            let silent = || texts::connection_closed(io::ErrorKind::TimedOut.into());
            match reply.unwrap_or_else(|_| Err(silent()))? {
                Value::Error(text) => route.again_after(Error::from_reply(&text)).await?,
                _ => return Ok(conn),
            }
        }
    }

    /// What an error opening the observation means for the stream.
    fn judge(&self, e: Error) -> Ending {
        if self.store.is_closed() {
            return Ending::Over(e);
        }
        match e.kind() {
            ErrorKind::Invalid | ErrorKind::Limit if !e.is_connection() => Ending::Over(e),
            _ => Ending::Again,
        }
    }
}

/// What a push means to the stream.
#[derive(Debug, PartialEq)]
enum Seen {
    /// Not this key's, or not news (the end of a lease not yielded).
    Nothing,
    /// The observation is over: observe again.
    Closed,
    /// An item to yield.
    Item(Option<Leader>),
}

/// The holder last yielded on this connection, and when its grant was
/// pushed (if it was seen).
#[derive(Default)]
struct Holding {
    fence: Option<u64>,
    granted: Option<(u64, Instant)>,
}

impl Holding {
    /// Reads `["observe", lock, key, event, fence, permits, holder_id, note]`.
    fn on_push(&mut self, items: &[Value], lock: &str, key: &str) -> Seen {
        let word = |i: usize| items.get(i).and_then(Value::as_str);
        let number = |i: usize| items.get(i).and_then(Value::as_integer);
        let ours = word(0).is_some_and(|w| w.eq_ignore_ascii_case("observe"))
            && word(1) == Some(lock)
            && word(2) == Some(key);
        let (Some(event), Some(fence)) = (word(3).filter(|_| ours), number(4)) else {
            return Seen::Nothing;
        };
        let fence = u64::try_from(fence).unwrap_or(0);
        match event {
            "held" | "granted" => {
                let note = items.get(7).and_then(Value::as_bytes).unwrap_or_default();
                let holder_id = number(6).and_then(|id| u64::try_from(id).ok());
                Seen::Item(Some(self.lead(event, fence, note, holder_id.unwrap_or(0))))
            }
            "free" => {
                self.fence = None;
                Seen::Item(None)
            }
            "closed" => Seen::Closed,
            "released" | "expired" | "revoked" | "disconnected" if self.fence == Some(fence) => {
                self.fence = None;
                Seen::Item(None)
            }
            _ => Seen::Nothing,
        }
    }

    /// The leader of a `held` or `granted` push.
    fn lead(&mut self, event: &str, fence: u64, note: &[u8], holder_id: u64) -> Leader {
        self.fence = Some(fence);
        let held_for = match self.granted {
            _ if event == "granted" => {
                self.granted = Some((fence, Instant::now()));
                Some(Duration::ZERO)
            }
            Some((f, at)) if f == fence => Some(at.elapsed()),
            _ => None,
        };
        Leader {
            note: String::from_utf8_lossy(note).into_owned(),
            fence,
            held_for,
            holder_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(event: &str, fence: i64, id: i64, note: &str) -> Vec<Value> {
        ["observe", "elections", "billing", event]
            .into_iter()
            .map(Value::bulk)
            .chain([Value::Integer(fence), Value::Integer(1), Value::Integer(id)])
            .chain([Value::bulk(note)])
            .collect()
    }

    fn leader(seen: Seen) -> (u64, String, Option<Duration>, u64) {
        let Seen::Item(Some(l)) = seen else {
            panic!("not a leader: {seen:?}")
        };
        (l.fence, l.note, l.held_for, l.holder_id)
    }

    #[test]
    fn pushes_become_leaders_and_ends_of_the_leader_none() {
        let mut h = Holding::default();
        let mut on = |p: Vec<Value>| h.on_push(&p, "elections", "billing");
        assert_eq!(
            leader(on(push("held", 4, 9, "a:1"))),
            (4, "a:1".into(), None, 9)
        );
        // The end of another lease (already replaced) is no news.
        assert_eq!(on(push("expired", 3, 8, "old")), Seen::Nothing);
        assert_eq!(on(push("disconnected", 4, 9, "a:1")), Seen::Item(None));
        assert_eq!(on(push("released", 4, 9, "a:1")), Seen::Nothing);
        let granted = leader(on(push("granted", 5, 10, "b:2")));
        assert_eq!(granted, (5, "b:2".into(), Some(Duration::ZERO), 10));
        // A proclaim: held again, with the time since the grant.
        let proclaimed = leader(on(push("held", 5, 10, "b:3")));
        assert_eq!((proclaimed.0, proclaimed.1.as_str()), (5, "b:3"));
        assert!(proclaimed.2.is_some());
        assert_eq!(on(push("revoked", 5, 10, "b:3")), Seen::Item(None));
        assert_eq!(on(push("free", 5, 0, "")), Seen::Item(None));
        assert_eq!(on(push("closed", 5, 0, "")), Seen::Closed);
    }

    #[test]
    fn other_pushes_are_not_news() {
        let mut h = Holding::default();
        let lost = [Value::bulk("lost"), Value::Integer(1), Value::bulk("x")];
        assert_eq!(h.on_push(&lost, "elections", "billing"), Seen::Nothing);
        let other_key = push("held", 4, 9, "a");
        assert_eq!(h.on_push(&other_key, "elections", "other"), Seen::Nothing);
        assert_eq!(
            h.on_push(&push("held", 4, 9, "a")[..4], "elections", "billing"),
            Seen::Nothing
        );
        assert_eq!(
            h.on_push(&push("later", 4, 9, "a"), "elections", "billing"),
            Seen::Nothing
        );
    }
}
