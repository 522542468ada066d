//! A pooled connection's background task: it owns the socket, writes the
//! requests it is sent, hands replies back in order, renews (`PING` every
//! third of the ttl) while its holder has a lease or a waiting `HOLD`, and
//! marks that lease lost the moment the server pushes `lost` or the
//! connection drops. Reading never stops while a `HOLD` waits, so the
//! renewals and the push are seen at once. A `moved` push (a planned
//! hand-over) detaches the lease from the connection and starts its
//! follower (see `follow`).
//!
//! # Why a lease is safe to believe in
//!
//! The server renews every live lease of a connection when it *reads* a
//! command from it, and gives a lease away no sooner than `ttl` after the
//! last such read. The client keeps, for the lease of each connection, a
//! local deadline that is never later than the server's:
//!
//! - it starts at `s + ttl - margin`, `s` the send time of the `HOLD` (the
//!   server granted after reading it, and counts the ttl from the grant);
//! - a reply that arrives *before* the deadline, to a command sent at `t`,
//!   moves it to `t + ttl - margin`: the server read that command before
//!   the reply came, so while the lease was alive, and renewed it then, at
//!   `t` or later;
//! - a reply that arrives after the deadline moves nothing: the server may
//!   have read its command after the lease ended (a renewal does not
//!   revive a lost lease), and a passed deadline is final;
//! - a grant that arrives after its first deadline (a `HOLD` that waited
//!   about a ttl) is confirmed by a `RENEW` before the closure runs: a
//!   `RENEW` answers `OK` only for a live lease (see `hold`);
//! - once the server says the lease moved to another node, this
//!   connection's replies move nothing (its node no longer holds the
//!   lease, so reading a command renews nothing); the deadline stands
//!   until the new node answers the `REATTACH`, whose send time then
//!   counts as any command's (the new node renewed the lease on reading it).
//!
//! The margin (a tenth of the ttl, at least 10 ms) covers this process's
//! own timer lateness. At the deadline the lease is marked lost (signal
//! aborted, `lost_silent`'s text) and the connection is closed, so a server
//! that comes back lets the key go at once. The only timing assumption is
//! that the two clocks run at the same rate within a tenth of the ttl over
//! one ttl; no clock is compared across machines. A frozen network, a
//! stalled server or a stopped holder process all end the same way: the
//! holder stops believing in the lease before anyone else can be granted
//! the key.
//!
//! Over TLS the argument holds as it is: a command's send time is taken
//! before it is encrypted and written, so the server reads it later still;
//! replies come back in order on the one stream; the handshake, alerts and
//! session tickets are not frames, so they answer no command and move no
//! deadline; and early data (0-RTT), which the server could read again
//! from a replay long after it was sent, is never used.

use crate::connection::Connection;
use crate::error::Error;
use crate::lease::{LeaseShared, Moved};
use crate::texts;
use holdline::ErrorKind;
use holdline_resp::{encode_command, Value};
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// A command for the task: its encoded frame, and where its reply goes
/// (`None`: nobody waits for it, as for a `RELEASE` sent on drop).
struct Request {
    frame: Vec<u8>,
    reply: Option<ReplyTo>,
}

/// Where a reply goes, with the send time of its command.
type ReplyTo = oneshot::Sender<(Result<Value, Error>, Instant)>;

/// The handle to one connection's task. Dropping it closes the connection
/// (the server then lets its keys go and takes its `HOLD`s out of line).
pub(crate) struct Conn {
    requests: mpsc::UnboundedSender<Request>,
    shared: Arc<ConnShared>,
    /// Whether its node can hand leases over (`handover` = 1 in `HELLO`):
    /// only then does a hold send a secret.
    handover: bool,
}

/// What a connection's task and its holder share.
pub(crate) struct ConnShared {
    /// The renewal period in ms; 0: none (no lease, no waiting `HOLD`).
    renew_ms: AtomicU64,
    /// The ttl of the lock in use on this connection, in ms.
    ttl_ms: AtomicU64,
    /// Set when a lease's local deadline passed here: never reuse it.
    silent: AtomicBool,
    slot: Mutex<LeaseSlot>,
}

#[derive(Default)]
struct LeaseSlot {
    /// The lease held on this connection (one hold per connection).
    lease: Option<Arc<LeaseShared>>,
    /// A `lost` push for a lease not registered yet: the grant's reply and
    /// the push can both be read before the holder registers the lease.
    early_loss: Option<(i64, String)>,
    /// A `moved` push for a lease not registered yet, likewise.
    early_move: Option<(i64, Moved)>,
    /// Why the task ended, once it has.
    dead: Option<Error>,
}

impl ConnShared {
    fn slot(&self) -> MutexGuard<'_, LeaseSlot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ttl(&self) -> Duration {
        // Relaxed: a value set by the holder before it sends the command the
        // value is about; the request channel orders the two.
        Duration::from_millis(self.ttl_ms.load(Ordering::Relaxed))
    }

    /// The server answered a command sent at `sent`, now: the registered
    /// lease, if still alive now, is held there until `sent + ttl` at least.
    fn confirm(&self, sent: Instant) {
        let slot = self.slot();
        if let Some(lease) = &slot.lease {
            lease.extend_deadline(local_deadline(sent, self.ttl()));
        }
    }
}

/// `t + ttl - margin`: when a lease confirmed by a command sent at `t` is
/// taken for lost here. The margin is a tenth of the ttl, at least 10 ms.
pub(crate) fn local_deadline(t: Instant, ttl: Duration) -> std::time::Instant {
    let margin = (ttl / 10).max(Duration::from_millis(10));
    (t + ttl.saturating_sub(margin)).into_std()
}

/// What a connection that fails marks: its store's map, as worth asking
/// for again, and its node, as one to ask for the map last.
#[derive(Clone)]
pub(crate) struct Failure {
    pub(crate) map: Arc<AtomicBool>,
    pub(crate) node: Arc<AtomicBool>,
}

impl Failure {
    pub(crate) fn mark(&self) {
        // Relaxed: hints, ordered by nothing.
        self.map.store(true, Ordering::Relaxed);
        self.node.store(true, Ordering::Relaxed);
    }
}

impl Conn {
    /// Starts the task for `conn` on the current tokio runtime. `failed`
    /// is marked when the connection fails or goes silent (not when its
    /// holder closes it): a cluster's map may be out of date then, and
    /// this node is asked for it last.
    pub(crate) fn spawn(conn: Connection, failed: Failure) -> Conn {
        let handover = says_handover(conn.hello());
        let (requests, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(ConnShared {
            renew_ms: AtomicU64::new(0),
            ttl_ms: AtomicU64::new(0),
            silent: AtomicBool::new(false),
            slot: Mutex::new(LeaseSlot::default()),
        });
        let task = Task {
            conn,
            requests: rx,
            shared: shared.clone(),
            waiting: VecDeque::new(),
            last_write: Instant::now(),
            failed,
        };
        tokio::spawn(task.run());
        Conn {
            requests,
            shared,
            handover,
        }
    }

    /// Whether its node can hand leases over to another (and take them).
    pub(crate) fn handover(&self) -> bool {
        self.handover
    }

    /// Whether the task has ended (the connection is gone).
    pub(crate) fn is_dead(&self) -> bool {
        self.requests.is_closed() || self.went_silent() || self.shared.slot().dead.is_some()
    }

    /// Whether a lease's local deadline passed on this connection (the
    /// lease was then marked lost and the connection closed).
    pub(crate) fn went_silent(&self) -> bool {
        // Acquire: pairs with the task's Release, after it marked the lease.
        self.shared.silent.load(Ordering::Acquire)
    }

    /// Sends a command and waits for its reply. A failed connection is a
    /// store-scoped `closed` error.
    pub(crate) async fn request<A: AsRef<[u8]>>(&self, args: &[A]) -> Result<Value, Error> {
        self.request_timed(args).await.map(|(reply, _)| reply)
    }

    /// [`request`](Conn::request), with the instant the command was sent.
    pub(crate) async fn request_timed<A: AsRef<[u8]>>(
        &self,
        args: &[A],
    ) -> Result<(Value, Instant), Error> {
        let (tx, rx) = oneshot::channel();
        self.send(args, Some(tx));
        match rx.await {
            Ok((reply, sent)) => reply.map(|v| (v, sent)),
            Err(_) => Err(self.death()),
        }
    }

    /// Sends a command whose reply nobody reads.
    pub(crate) fn send_detached<A: AsRef<[u8]>>(&self, args: &[A]) {
        self.send(args, None);
    }

    fn send<A: AsRef<[u8]>>(&self, args: &[A], reply: Option<ReplyTo>) {
        let mut frame = Vec::with_capacity(64);
        encode_command(args, &mut frame);
        // A closed channel drops `reply`, which `request` reads as the death.
        let _ = self.requests.send(Request { frame, reply });
    }

    fn death(&self) -> Error {
        self.shared.slot().dead.clone().unwrap_or_else(|| {
            texts::connection_closed(io::Error::new(io::ErrorKind::BrokenPipe, "its task ended"))
        })
    }

    /// Renews every third of `ttl` from now on; `None` stops.
    pub(crate) fn renew_for(&self, ttl: Option<Duration>) {
        let ttl_ms = ttl.map_or(0, |t| (t.as_millis() as u64).max(1));
        // Relaxed: read by the task at its next turn; a renewal one turn
        // late is still within the third of the ttl it is planned for.
        self.shared.ttl_ms.store(ttl_ms, Ordering::Relaxed);
        self.shared
            .renew_ms
            .store((ttl_ms / 3).max(ttl_ms.min(1)), Ordering::Relaxed);
    }

    /// Makes `lease` (its first deadline set) the one this connection's
    /// replies, pushes, failure and silence concern. Marks it lost at once
    /// if that already happened.
    pub(crate) fn register(&self, lease: &Arc<LeaseShared>) {
        let mut slot = self.shared.slot();
        if let Some(dead) = &slot.dead {
            lease.mark_lost(lost_on_drop(lease, dead));
            return;
        }
        if let Some((id, text)) = slot.early_loss.take() {
            if id == lease.id() {
                lease.mark_lost(Error::new(ErrorKind::Lost, text));
            }
        }
        match slot.early_move.take() {
            // Moved already: this connection no longer speaks for it.
            Some((id, to)) if id == lease.id() => {
                drop(slot);
                self.renew_for(None);
                lease.moved(to);
            }
            _ => slot.lease = Some(lease.clone()),
        }
    }

    /// Forgets the registered lease (after its release).
    pub(crate) fn unregister(&self) {
        let mut slot = self.shared.slot();
        slot.lease = None;
        slot.early_loss = None;
        slot.early_move = None;
    }
}

/// The lost error of a lease whose connection ended with `dead`.
fn lost_on_drop(lease: &LeaseShared, dead: &Error) -> Error {
    let e = dead
        .io_error()
        .map(|e| io::Error::new(e.kind(), e.to_string()))
        .unwrap_or_else(|| io::Error::other(dead.to_string()));
    texts::lost_connection(&lease.lock, &lease.key, e)
}

/// The task: the socket, the request channel, and the reply slots of the
/// commands written and not answered yet, each with its send time (`None`
/// slots are our own `PING`s and detached requests).
struct Task {
    conn: Connection,
    requests: mpsc::UnboundedReceiver<Request>,
    shared: Arc<ConnShared>,
    waiting: VecDeque<(Option<ReplyTo>, Instant)>,
    last_write: Instant,
    /// Marked when this connection fails or goes silent.
    failed: Failure,
}

/// Why the task's loop ended.
enum End {
    /// The holder dropped the handle: a normal close.
    Dropped,
    /// The socket failed, or the server broke the protocol.
    Failed(io::Error),
    /// A lease's local deadline passed: lost, and the connection closed.
    Silent,
}

impl Task {
    async fn run(mut self) {
        let end = loop {
            if let Some(end) = self.turn().await {
                break end;
            }
        };
        self.finish(end);
    }

    /// One event: a frame read, requests to write, a renewal due, or a
    /// lease's deadline. `Some` ends the task.
    async fn turn(&mut self) -> Option<End> {
        let renew_ms = self.shared.renew_ms.load(Ordering::Relaxed);
        let ping_at = self.last_write + Duration::from_millis(renew_ms);
        let deadline = self.lease_deadline();
        let reader = &mut self.conn.reader;
        tokio::select! {
            // Replies first: they free the slots the next requests queue
            // behind, and may move the deadline on.
            biased;
            frame = reader.read_frame() => match frame {
                Ok(frame) => self.on_frame(frame).err().map(End::Failed),
                Err(e) => Some(End::Failed(e)),
            },
            request = self.requests.recv() => match request {
                Some(first) => self.write_requests(first).await.err().map(End::Failed),
                None => Some(End::Dropped),
            },
            _ = tokio::time::sleep_until(ping_at), if renew_ms > 0 => {
                self.conn.writer.queue(&["PING"]);
                self.waiting.push_back((None, Instant::now()));
                self.flush().await.err().map(End::Failed)
            }
            _ = tokio::time::sleep_until(deadline.unwrap_or(ping_at)), if deadline.is_some() => {
                self.deadline_passed()
            }
        }
    }

    /// The registered lease's local deadline, while it is not lost.
    fn lease_deadline(&self) -> Option<Instant> {
        let slot = self.shared.slot();
        let lease = slot.lease.as_ref()?;
        if lease.lost_error().is_some() {
            return None;
        }
        lease.deadline().map(Instant::from_std)
    }

    fn on_frame(&mut self, frame: Value) -> io::Result<()> {
        let reply = match frame {
            Value::Push(items) => {
                on_push(&self.shared, items);
                return Ok(());
            }
            reply => reply,
        };
        let Some((to, sent)) = self.waiting.pop_front() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a reply to no command",
            ));
        };
        self.shared.confirm(sent);
        if let Some(tx) = to {
            let reply = match reply {
                Value::Error(text) => Err(Error::from_reply(&text)),
                other => Ok(other),
            };
            let _ = tx.send((reply, sent));
        }
        Ok(())
    }

    /// Writes `first` and every request already queued behind it, in one
    /// flush.
    async fn write_requests(&mut self, first: Request) -> io::Result<()> {
        let mut next = Some(first);
        let now = Instant::now();
        while let Some(Request { frame, reply }) = next {
            self.conn.writer.queue_encoded(&frame);
            self.waiting.push_back((reply, now));
            next = self.requests.try_recv().ok();
        }
        self.flush().await
    }

    async fn flush(&mut self) -> io::Result<()> {
        self.conn.writer.flush().await?;
        self.last_write = Instant::now();
        Ok(())
    }

    /// Nothing answered in time: the lease is taken for lost (unless a
    /// reply moved its deadline meanwhile) and the connection closed.
    fn deadline_passed(&mut self) -> Option<End> {
        let slot = self.shared.slot();
        let lease = slot.lease.as_ref()?;
        lease.check_clock().then(|| {
            // Release: `went_silent` readers see the lease marked first.
            self.shared.silent.store(true, Ordering::Release);
            End::Silent
        })
    }

    /// Fails what still waits for a reply and, after a failure, the lease.
    fn finish(self, end: End) {
        // A holder that closed its own connection let its lease go; a
        // silent one already marked it; only a failure loses it here.
        if !matches!(end, End::Dropped) {
            // A hint to look at the map again, this node last.
            self.failed.mark();
        }
        let (dead, failed) = match end {
            End::Dropped => (
                io::Error::new(io::ErrorKind::NotConnected, "closed by its holder"),
                false,
            ),
            End::Failed(e) => (e, true),
            End::Silent => (
                io::Error::new(io::ErrorKind::TimedOut, "nothing answered for the ttl"),
                false,
            ),
        };
        let dead = texts::connection_closed(dead);
        let lease = {
            let mut slot = self.shared.slot();
            slot.dead = Some(dead.clone());
            slot.lease.take()
        };
        if let (Some(lease), true) = (lease, failed) {
            lease.mark_lost(lost_on_drop(&lease, &dead));
        }
        for (to, sent) in self.waiting {
            if let Some(tx) = to {
                let _ = tx.send((Err(dead.clone()), sent));
            }
        }
        // Dropping `self.conn` closes the socket.
    }
}

/// Whether a `HELLO` map says `handover` = 1.
fn says_handover(hello: &Value) -> bool {
    let Value::Map(pairs) = hello else {
        return false;
    };
    pairs
        .iter()
        .any(|(k, v)| k.as_str() == Some("handover") && v.as_integer() == Some(1))
}

/// A push: `["lost", lease, text]` marks that lease lost; `["moved",
/// lease, slot, addr]` hands it to its follower; others are ignored.
fn on_push(shared: &ConnShared, items: Vec<Value>) {
    let kind = items
        .first()
        .and_then(Value::as_str)
        .map(str::to_ascii_lowercase);
    let id = items.get(1).and_then(Value::as_integer);
    match (kind.as_deref(), id) {
        (Some("lost"), Some(id)) => {
            let Some(text) = items.get(2).and_then(Value::as_str) else {
                return;
            };
            let mut slot = shared.slot();
            match &slot.lease {
                Some(lease) if lease.id() == id => {
                    lease.mark_lost(Error::new(ErrorKind::Lost, text.to_owned()))
                }
                _ => slot.early_loss = Some((id, text.to_owned())),
            }
        }
        (Some("moved"), Some(id)) => {
            if let Some(to) = moved_of(&items) {
                on_moved(shared, id, to);
            }
        }
        _ => {}
    }
}

/// `["moved", lease, slot, "host:port"]`'s slot and address.
fn moved_of(items: &[Value]) -> Option<Moved> {
    let slot = u16::try_from(items.get(2)?.as_integer()?).ok()?;
    let addr = items.get(3)?.as_str()?.to_owned();
    Some(Moved { slot, addr })
}

/// Lease `id` moved to another node: this connection stops speaking for
/// it at once (its replies no longer move the lease's deadline, its
/// failure no longer loses it, and it stops renewing), and the lease's
/// follower takes over.
fn on_moved(shared: &ConnShared, id: i64, to: Moved) {
    let mut slot = shared.slot();
    let lease = match &slot.lease {
        Some(lease) if lease.id() == id => slot.lease.take(),
        _ => {
            slot.early_move = Some((id, to));
            return;
        }
    };
    drop(slot);
    // Relaxed: as in `renew_for`.
    shared.renew_ms.store(0, Ordering::Relaxed);
    if let Some(lease) = lease {
        lease.moved(to);
    }
}

#[cfg(test)]
mod tests {
    use crate::Store;
    use bytes::BytesMut;
    use holdline::ErrorKind;
    use holdline_resp::{encode, Decoder, Proto, Value};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::time::{timeout, Instant};

    const LOST: &str = "lock l: key \"k\": the lease was lost: it ran out (ttl 300ms)";
    /// A single server's answer to `CLUSTER SLOTS` (Redis's text).
    const NOT_CLUSTER: &str = "ERR This instance has cluster support disabled";

    /// Reads one command from a scripted peer's socket.
    async fn read_command(
        sock: &mut TcpStream,
        dec: &mut Decoder,
        buf: &mut BytesMut,
    ) -> Option<Vec<String>> {
        loop {
            if let Some(Value::Array(args)) = dec.decode(buf).unwrap() {
                return Some(
                    args.iter()
                        .map(|a| a.as_str().unwrap().to_owned())
                        .collect(),
                );
            }
            if sock.read_buf(buf).await.ok()? == 0 {
                return None;
            }
        }
    }

    async fn send(sock: &mut TcpStream, v: Value) {
        let mut out = Vec::new();
        encode(&v, Proto::Resp3, &mut out);
        sock.write_all(&out).await.unwrap();
    }

    /// A scripted server: grants the HOLD only after three PINGs arrived
    /// while it waited (a ttl after the HOLD: a late grant), answers the
    /// RENEW that confirms it, the PINGs that follow, and pushes `lost`
    /// with the third of them; answers RELEASE `-LOST`. Answers the times
    /// of the PINGs it read before the grant, and how many RENEWs came.
    async fn scripted(listener: TcpListener) -> (Vec<Instant>, usize) {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut dec = Decoder::new(1 << 20);
        let mut buf = BytesMut::new();
        let mut pings = Vec::new();
        let mut hold_pending = false;
        let mut after_grant = 0;
        let mut renews = 0;
        while let Some(cmd) = read_command(&mut sock, &mut dec, &mut buf).await {
            match cmd[0].as_str() {
                "HELLO" => {
                    send(
                        &mut sock,
                        Value::Map(vec![
                            (Value::bulk("server"), Value::bulk("holdline")),
                            (Value::bulk("proto"), Value::Integer(3)),
                        ]),
                    )
                    .await
                }
                "HOLD" => {
                    assert_eq!(&cmd[1..], ["l", "k", "WAIT", "10000", "TTL", "300"]);
                    hold_pending = true;
                }
                "PING" if hold_pending => {
                    pings.push(Instant::now());
                    if pings.len() == 3 {
                        hold_pending = false;
                        send(
                            &mut sock,
                            Value::Array(vec![Value::Integer(1), Value::Integer(5)]),
                        )
                        .await;
                        for _ in 0..3 {
                            send(&mut sock, Value::simple("PONG")).await;
                        }
                    }
                }
                "PING" => {
                    send(&mut sock, Value::simple("PONG")).await;
                    after_grant += 1;
                    if after_grant == 3 {
                        let push = vec![Value::bulk("lost"), Value::Integer(1), Value::bulk(LOST)];
                        send(&mut sock, Value::Push(push)).await;
                    }
                }
                "RENEW" => {
                    assert_eq!(cmd[1], "1");
                    renews += 1;
                    send(&mut sock, Value::simple("OK")).await;
                }
                "CLUSTER" => send(&mut sock, Value::error(NOT_CLUSTER)).await,
                "RELEASE" => {
                    assert_eq!(cmd[1], "1");
                    send(&mut sock, Value::error(format!("LOST {LOST}"))).await;
                    return (pings, renews);
                }
                other => panic!("unexpected {other}"),
            }
        }
        panic!("the client hung up")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pings_while_the_hold_waits_and_the_push_aborts_the_signal() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(scripted(listener));
        let store = Store::connect(&addr).await.unwrap();
        let lock = store
            .lock("l")
            .ttl(Duration::from_millis(300))
            .open()
            .unwrap();
        let sent = Instant::now();
        let result = timeout(
            Duration::from_secs(30),
            lock.hold("k", async |lease| {
                assert_eq!(lease.fence(), 5);
                assert!(!lease.is_lost(), "lost at its grant");
                timeout(Duration::from_secs(20), lease.signal().aborted())
                    .await
                    .expect("the push aborts the signal");
                lease.check().unwrap_err()
            }),
        )
        .await
        .expect("the scripted server grants after three pings");
        let err = result.unwrap_err();
        assert_eq!(
            (err.kind(), err.to_string().as_str()),
            (ErrorKind::Lost, LOST)
        );
        let (pings, renews) = server.await.unwrap();
        // Granted a ttl after its HOLD: confirmed by one RENEW.
        assert_eq!(renews, 1);
        // Renewal runs while the HOLD waits: none sooner than a third of
        // the ttl after the last write.
        assert!(
            pings[0] - sent >= Duration::from_millis(90),
            "{:?}",
            pings[0] - sent
        );
        assert!(pings
            .windows(2)
            .all(|w| w[1] - w[0] >= Duration::from_millis(90)));
    }

    /// A server that granted, then let the lease run out before its grant
    /// reached the client (a link frozen both ways for over a ttl): the
    /// renewals the client sent meanwhile are answered, yet prove nothing.
    async fn granted_then_expired(listener: TcpListener) {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut dec = Decoder::new(1 << 20);
        let mut buf = BytesMut::new();
        let mut pings = 0;
        while let Some(cmd) = read_command(&mut sock, &mut dec, &mut buf).await {
            match cmd[0].as_str() {
                "HELLO" => {
                    let hello = vec![(Value::bulk("server"), Value::bulk("holdline"))];
                    send(&mut sock, Value::Map(hello)).await
                }
                "HOLD" => {}
                "CLUSTER" => send(&mut sock, Value::error(NOT_CLUSTER)).await,
                "PING" => {
                    pings += 1;
                    if pings == 4 {
                        let grant = Value::Array(vec![Value::Integer(1), Value::Integer(5)]);
                        send(&mut sock, grant).await;
                        for _ in 0..4 {
                            send(&mut sock, Value::simple("PONG")).await;
                        }
                    }
                }
                "RENEW" => send(&mut sock, Value::error(format!("LOST {LOST}"))).await,
                other => panic!("unexpected {other}"),
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_grant_that_comes_after_its_deadline_must_be_renewed_to_count() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(granted_then_expired(listener));
        let store = Store::connect(&addr).await.unwrap();
        let lock = store
            .lock("l")
            .ttl(Duration::from_millis(300))
            .open()
            .unwrap();
        let mut ran = false;
        let result = timeout(
            Duration::from_secs(30),
            lock.key("k")
                .wait(Duration::from_secs(10))
                .hold(async |_| ran = true),
        )
        .await
        .expect("answers");
        let err = result.unwrap_err();
        assert_eq!(
            (err.kind(), err.to_string().as_str()),
            (ErrorKind::Lost, LOST)
        );
        assert!(!ran, "the closure never ran under a lease the server ended");
    }
}
