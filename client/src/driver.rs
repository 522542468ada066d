//! A pooled connection's background task: it owns the socket, writes the
//! requests it is sent, hands replies back in order, renews (`PING` every
//! third of the ttl) while its holder has a lease or a waiting `HOLD`, and
//! marks that lease lost the moment the server pushes `lost` or the
//! connection drops. Reading never stops while a `HOLD` waits, so the
//! renewals and the push are seen at once.
//!
//! It also marks the lease lost when the server has confirmed nothing for
//! a whole ttl (a stalled server or a silent network, where no `lost` push
//! and no closed socket will come): the server renews a lease when it
//! reads a command, so a lease whose last answered command was sent at
//! `t` lives on the server until `t + ttl` at least, and no longer for
//! sure. The lease's grant stands for its first such command. Such a
//! connection is never reused.

use crate::connection::{io_error, Connection};
use crate::error::{Error, Scope};
use crate::lease::LeaseShared;
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
    reply: Option<oneshot::Sender<Result<Value, Error>>>,
}

/// The handle to one connection's task. Dropping it closes the connection
/// (the server then lets its keys go and takes its `HOLD`s out of line).
pub(crate) struct Conn {
    requests: mpsc::UnboundedSender<Request>,
    shared: Arc<ConnShared>,
}

/// What a connection's task and its holder share.
pub(crate) struct ConnShared {
    /// The renewal period in ms; 0: none (no lease, no waiting `HOLD`).
    renew_ms: AtomicU64,
    /// The ttl of the lock in use on this connection, in ms.
    ttl_ms: AtomicU64,
    /// Set when the server went a whole ttl without answering.
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
    /// When the lease's grant arrived.
    granted_at: Option<Instant>,
    /// Why the task ended, once it has.
    dead: Option<Error>,
}

impl ConnShared {
    fn slot(&self) -> MutexGuard<'_, LeaseSlot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Conn {
    /// Starts the task for `conn` on the current tokio runtime.
    pub(crate) fn spawn(conn: Connection) -> Conn {
        let (requests, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(ConnShared {
            renew_ms: AtomicU64::new(0),
            ttl_ms: AtomicU64::new(0),
            silent: AtomicBool::new(false),
            slot: Mutex::new(LeaseSlot::default()),
        });
        tokio::spawn(drive(conn, rx, shared.clone()));
        Conn { requests, shared }
    }

    /// Whether the task has ended (the connection is gone).
    pub(crate) fn is_dead(&self) -> bool {
        self.requests.is_closed() || self.went_silent() || self.shared.slot().dead.is_some()
    }

    /// Whether the server went a whole ttl without answering while a lease
    /// was held here (the lease was then marked lost).
    pub(crate) fn went_silent(&self) -> bool {
        self.shared.silent.load(Ordering::Acquire)
    }

    /// Sends a command and waits for its reply. A failed connection is a
    /// store-scoped `closed` error.
    pub(crate) async fn request<A: AsRef<[u8]>>(&self, args: &[A]) -> Result<Value, Error> {
        let (tx, rx) = oneshot::channel();
        self.send(args, Some(tx));
        match rx.await {
            Ok(reply) => reply,
            Err(_) => Err(self.death()),
        }
    }

    /// Sends a command whose reply nobody reads.
    pub(crate) fn send_detached<A: AsRef<[u8]>>(&self, args: &[A]) {
        self.send(args, None);
    }

    fn send<A: AsRef<[u8]>>(
        &self,
        args: &[A],
        reply: Option<oneshot::Sender<Result<Value, Error>>>,
    ) {
        let mut frame = Vec::with_capacity(64);
        encode_command(args, &mut frame);
        // A closed channel drops `reply`, which `request` reads as the death.
        let _ = self.requests.send(Request { frame, reply });
    }

    fn death(&self) -> Error {
        self.shared.slot().dead.clone().unwrap_or_else(|| {
            io_error(
                Scope::Store,
                "the connection to the server failed",
                io::Error::new(io::ErrorKind::BrokenPipe, "its task ended"),
            )
        })
    }

    /// Renews every third of `ttl` from now on; `None` stops.
    pub(crate) fn renew_for(&self, ttl: Option<Duration>) {
        let ttl_ms = ttl.map_or(0, |t| (t.as_millis() as u64).max(1));
        self.shared.ttl_ms.store(ttl_ms, Ordering::Relaxed);
        self.shared
            .renew_ms
            .store((ttl_ms / 3).max(ttl_ms.min(1)), Ordering::Relaxed);
    }

    /// Makes `lease` the one this connection's pushes and failure concern.
    /// Marks it lost at once if that already happened.
    pub(crate) fn register(&self, lease: &Arc<LeaseShared>) {
        let mut slot = self.shared.slot();
        if let Some(dead) = &slot.dead {
            lease.mark_lost(lost_on_drop(lease, dead));
            return;
        }
        if let Some((id, text)) = slot.early_loss.take() {
            if id == lease.id {
                lease.mark_lost(Error::new(ErrorKind::Lost, text));
            }
        }
        slot.lease = Some(lease.clone());
        slot.granted_at = Some(Instant::now());
    }

    /// Forgets the registered lease (after its release).
    pub(crate) fn unregister(&self) {
        let mut slot = self.shared.slot();
        slot.lease = None;
        slot.early_loss = None;
        slot.granted_at = None;
    }
}

/// The lost error of a lease whose connection ended with `dead`.
fn lost_on_drop(lease: &LeaseShared, dead: &Error) -> Error {
    let e = dead
        .io_error()
        .map(|e| io::Error::new(e.kind(), e.to_string()))
        .unwrap_or_else(|| io::Error::other(dead.to_string()));
    Error::connection(
        ErrorKind::Lost,
        Scope::Key(&lease.lock, &lease.key),
        "its connection to the server dropped",
        e,
    )
}

/// The task's loop. Requests are written in the order sent and their
/// reply slots queued in that order; `None` slots are our own `PING`s and
/// detached requests.
async fn drive(
    mut conn: Connection,
    mut rx: mpsc::UnboundedReceiver<Request>,
    shared: Arc<ConnShared>,
) {
    // Each reply slot with the instant its command was written.
    let mut waiting: VecDeque<(Option<ReplyTo>, Instant)> = VecDeque::new();
    let mut last_write = Instant::now();
    // The send instant of the latest command the server answered.
    let mut confirmed: Option<Instant> = None;
    let ended: Result<(), io::Error> = loop {
        let renew_ms = shared.renew_ms.load(Ordering::Relaxed);
        let ping_at = last_write + Duration::from_millis(renew_ms);
        let silent_at = silence_deadline(&shared, confirmed);
        let Connection { reader, writer, .. } = &mut conn;
        tokio::select! {
            // Replies first: they free the slots the next requests queue behind.
            biased;
            frame = reader.read_frame() => match frame {
                Ok(Value::Push(items)) => on_push(&shared, items),
                Ok(reply) => match waiting.pop_front() {
                    Some((to, sent)) => {
                        confirmed = Some(confirmed.map_or(sent, |c| c.max(sent)));
                        let Some(tx) = to else { continue };
                        let reply = match reply {
                            Value::Error(text) => Err(Error::from_reply(&text)),
                            other => Ok(other),
                        };
                        let _ = tx.send(reply);
                    }
                    None => {
                        break Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "a reply to no command",
                        ))
                    }
                },
                Err(e) => break Err(e),
            },
            request = rx.recv() => {
                let Some(first) = request else { break Ok(()) };
                // Write every request already sent in one flush.
                let mut next = Some(first);
                let now = Instant::now();
                while let Some(Request { frame, reply }) = next {
                    writer.queue_encoded(&frame);
                    waiting.push_back((reply, now));
                    next = rx.try_recv().ok();
                }
                if let Err(e) = writer.flush().await {
                    break Err(e);
                }
                last_write = Instant::now();
            }
            _ = tokio::time::sleep_until(ping_at), if renew_ms > 0 => {
                writer.queue(&["PING"]);
                waiting.push_back((None, Instant::now()));
                if let Err(e) = writer.flush().await {
                    break Err(e);
                }
                last_write = Instant::now();
            }
            _ = tokio::time::sleep_until(silent_at.unwrap_or(ping_at)), if silent_at.is_some() => {
                went_silent(&shared);
            }
        }
    };
    // A holder that closed its own connection let its lease go; only a
    // failure loses it.
    let failed = ended.is_err();
    let dead = match ended {
        Ok(()) => io_error(
            Scope::Store,
            "the connection to the server was closed",
            io::Error::new(io::ErrorKind::NotConnected, "closed by its holder"),
        ),
        Err(e) => io_error(Scope::Store, "the connection to the server failed", e),
    };
    let lease = {
        let mut slot = shared.slot();
        slot.dead = Some(dead.clone());
        slot.lease.take()
    };
    if let (Some(lease), true) = (lease, failed) {
        lease.mark_lost(lost_on_drop(&lease, &dead));
    }
    for tx in waiting.into_iter().filter_map(|(to, _)| to) {
        let _ = tx.send(Err(dead.clone()));
    }
    drop(conn);
}

type ReplyTo = oneshot::Sender<Result<Value, Error>>;

/// When the registered lease must be taken for lost if nothing more is
/// answered: a ttl after the later of its grant and the latest answered
/// command's send. `None` without a live lease.
fn silence_deadline(shared: &ConnShared, confirmed: Option<Instant>) -> Option<Instant> {
    let slot = shared.slot();
    let lease = slot.lease.as_ref()?;
    if lease.lost_error().is_some() {
        return None;
    }
    let from = match (slot.granted_at, confirmed) {
        (Some(g), Some(c)) => g.max(c),
        (Some(g), None) => g,
        (None, _) => return None,
    };
    Some(from + Duration::from_millis(shared.ttl_ms.load(Ordering::Relaxed)))
}

/// The server answered nothing for a whole ttl: the lease is lost for sure
/// by now (or soon), and this connection is not to be trusted again.
fn went_silent(shared: &ConnShared) {
    shared.silent.store(true, Ordering::Release);
    let slot = shared.slot();
    if let Some(lease) = &slot.lease {
        let ttl = ttl_text(shared.ttl_ms.load(Ordering::Relaxed));
        lease.mark_lost(silent_error(lease, &ttl));
    }
}

/// The lost error of a lease whose server stopped answering.
pub(crate) fn silent_error(lease: &LeaseShared, ttl: &str) -> Error {
    Error::local(
        ErrorKind::Lost,
        Scope::Key(&lease.lock, &lease.key),
        &format!("the server answered nothing for its ttl ({ttl})"),
    )
}

/// A ttl as the core writes it: `10s`, `2m`, `300ms`.
pub(crate) fn ttl_text(ms: u64) -> String {
    if ms >= 60_000 && ms % 60_000 == 0 {
        format!("{}m", ms / 60_000)
    } else if ms >= 1000 && ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// A push: `["lost", lease, text]` marks that lease lost; others are ignored.
fn on_push(shared: &ConnShared, items: Vec<Value>) {
    let mut items = items.into_iter();
    let (Some(kind), Some(id), Some(text)) = (items.next(), items.next(), items.next()) else {
        return;
    };
    if kind.as_str().map(|k| k.eq_ignore_ascii_case("lost")) != Some(true) {
        return;
    }
    let (Some(id), Some(text)) = (id.as_integer(), text.as_str().map(str::to_owned)) else {
        return;
    };
    let mut slot = shared.slot();
    match &slot.lease {
        Some(lease) if lease.id == id => lease.mark_lost(Error::new(ErrorKind::Lost, text)),
        _ => slot.early_loss = Some((id, text)),
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
    /// while it waited, then pushes `lost`, answers RELEASE `-LOST`.
    /// Answers the times of the PINGs it read before the grant.
    async fn scripted(listener: TcpListener) -> Vec<Instant> {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut dec = Decoder::new(1 << 20);
        let mut buf = BytesMut::new();
        let mut pings = Vec::new();
        let mut hold_pending = false;
        while let Some(cmd) = read_command(&mut sock, &mut dec, &mut buf).await {
            match cmd[0].as_str() {
                "HELLO" => {
                    send(
                        &mut sock,
                        Value::Map(vec![(Value::bulk("proto"), Value::Integer(3))]),
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
                        let push = vec![Value::bulk("lost"), Value::Integer(1), Value::bulk(LOST)];
                        send(&mut sock, Value::Push(push)).await;
                    }
                }
                "PING" => send(&mut sock, Value::simple("PONG")).await,
                "RELEASE" => {
                    assert_eq!(cmd[1], "1");
                    send(&mut sock, Value::error(format!("LOST {LOST}"))).await;
                    return pings;
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
        let pings = server.await.unwrap();
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
}
