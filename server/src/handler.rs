//! One client's life: read, decode into a queue, run what is queued,
//! answer, until the client leaves, breaks the protocol, quits, or the
//! server shuts down.
//!
//! Reading never stops while a HOLD waits: every frame read renews the
//! connection's leases at once and is queued, to be carried out after the
//! HOLD ends (commands run one at a time, answered in order, as in Redis).
//!
//! The state, and what moves it:
//!
//! | state   | event                                   | next    |
//! |---------|-----------------------------------------|---------|
//! | Ready   | a queued command is answered            | Ready   |
//! | Ready   | a queued HOLD must wait                 | Waiting |
//! | Ready   | QUIT, or a protocol fault's turn comes  | Closing |
//! | Waiting | the HOLD is granted or fails            | Ready   |
//! | Closing | the answers are written                 | (ends)  |
//! | Ready   | answers past `--max-output` wait unread | Gone    |
//! | Gone    | (nothing is written: the client does not read) | (ends) |
//! | any     | the client leaves                       | (ends)  |
//! | any     | an HTTP request is read                 | Closing |
//! | Ready   | no AUTH within `--auth-timeout`, or idle past `--timeout` | (ends) |
//! | any     | the server shuts down                   | (ends, after answering what it can) |
//!
//! The input is `Open`, or `Broken` after a malformed frame: from then on
//! bytes are read only to notice the client leaving (which takes a waiting
//! HOLD out of its line) and dropped; the fault is answered in its turn.
//! Ending drops the session, which lets every key go, and a waiting HOLD's
//! future, which leaves its line.

use crate::clients::ClientState;
use crate::cmd::{self, NotACommand};
use crate::connection::Connection;
use crate::events::Kind;
use crate::reply::{ErrorReply, Reply};
use crate::session::{Counts, PendingHold, Session, Step};
use crate::shutdown::Shutdown;
use crate::woken::Woken;
use holdline::{Error, HeldLease};
use std::collections::VecDeque;
use std::future::{pending, poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// Commands read ahead of a waiting HOLD before reading pauses.
const MAX_QUEUED_COMMANDS: usize = 1024;
/// Their bytes, at least (a larger `--max-frame` raises it to two frames).
const MAX_QUEUED_BYTES: usize = 4 << 20;

enum State {
    Ready,
    Waiting(PendingHold),
    Closing,
    /// Ends without writing: the client stopped reading its answers.
    Gone,
}

#[derive(PartialEq)]
enum Input {
    Open,
    Broken,
}

enum Queued {
    Command(Vec<Vec<u8>>),
    /// The stream broke here: answer this, then close.
    Fault(String),
}

/// Commands read but not yet carried out, with their size.
#[derive(Default)]
struct Queue {
    items: VecDeque<Queued>,
    bytes: usize,
}

impl Queue {
    fn push(&mut self, item: Queued) {
        self.bytes += size(&item);
        self.items.push_back(item);
    }

    fn pop(&mut self) -> Option<Queued> {
        let item = self.items.pop_front()?;
        self.bytes -= size(&item);
        Some(item)
    }

    fn has_room(&self, max_frame: usize) -> bool {
        self.items.len() < MAX_QUEUED_COMMANDS
            && self.bytes < MAX_QUEUED_BYTES.max(max_frame.saturating_mul(2))
    }
}

fn size(item: &Queued) -> usize {
    match item {
        Queued::Command(args) => args.iter().map(|a| a.len() + 16).sum(),
        Queued::Fault(text) => text.len(),
    }
}

/// Why a connection must end at once.
enum Stop {
    Shutdown,
    /// An operator's CLIENT KILL.
    Killed,
}

/// What woke the connection.
enum Event {
    Stop(Stop),
    HoldEnded(Result<HeldLease, Error>),
    Lost(u64),
    /// Pushes for an observed key are waiting in the outbox.
    Pushed,
    /// Bytes read; `false` when the client left.
    Read(bool),
    /// No AUTH within `--auth-timeout`, or idle past `--timeout`.
    TimedOut,
}

/// A client's connection and everything it has.
pub struct Handler<S> {
    connection: Connection<S>,
    session: Session,
    queue: Queue,
    state: State,
    input: Input,
    /// When the connection was made (for `--auth-timeout`).
    opened: Instant,
    /// When a command was last read (for `--timeout`; read only then).
    heard: Instant,
    /// Dropped when the handler ends: the listener waits for every one.
    _done: mpsc::Sender<()>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Handler<S> {
    pub fn new(stream: S, session: Session, done: mpsc::Sender<()>) -> Self {
        let connection = Connection::new(stream, session.frame_limit());
        Handler {
            connection,
            session,
            queue: Queue::default(),
            state: State::Ready,
            input: Input::Open,
            opened: Instant::now(),
            heard: Instant::now(),
            _done: done,
        }
    }

    /// Serves the client until the connection ends or `shutdown` comes.
    pub async fn run(mut self, shutdown: Shutdown) {
        let stop = Woken::new(stop_signal(shutdown, self.session.client.clone()));
        tokio::pin!(stop);
        loop {
            let buffered = self.decode_input();
            self.run_queued().await;
            self.take_pushes();
            if matches!(self.state, State::Gone) || !self.flush(stop.as_mut()).await {
                return;
            }
            if matches!(self.state, State::Closing) {
                self.connection.close().await;
                return;
            }
            match self.next_event(buffered, stop.as_mut()).await {
                Event::Stop(Stop::Shutdown) => return self.say_goodbye().await,
                Event::Stop(Stop::Killed) => return self.connection.close().await,
                Event::HoldEnded(result) => self.hold_ended(result),
                Event::Lost(id) => self.push_loss(id),
                Event::Pushed | Event::Read(true) => {}
                Event::Read(false) => return,
                Event::TimedOut => {
                    debug!(client = self.session.id(), "timed out: closing");
                    return self.connection.close().await;
                }
            }
        }
    }

    /// Decodes what is buffered into the queue, as far as it has room.
    /// Before authentication, one frame at a time: the frame limit grows
    /// once AUTH has run, and a pipelined AUTH must not be judged by the
    /// stranger's limit for what follows it. Answers whether bytes were
    /// left undecoded for want of room (or behind an AUTH), not for want
    /// of bytes: they are taken before anything more is read.
    fn decode_input(&mut self) -> bool {
        if self.input == Input::Broken {
            self.connection.discard_input();
            return false;
        }
        let mut read = 0;
        let mut left_for_room = false;
        while self.connection.has_input() {
            let room = self.queue.has_room(self.connection.max_frame())
                && (self.session.authenticated || self.queue.items.is_empty());
            if !room {
                left_for_room = true;
                break;
            }
            match self.connection.decode() {
                Ok(Some(frame)) => {
                    read += 1;
                    match cmd::arguments(frame) {
                        Ok(args) if args.is_empty() => {}
                        Ok(args) if looks_like_http(&args) => {
                            self.refuse_http();
                            break;
                        }
                        Ok(args) => self.queue.push(Queued::Command(args)),
                        Err(NotACommand(why)) => {
                            self.broken(why.to_owned());
                            break;
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    self.broken(e.to_string());
                    break;
                }
            }
        }
        if read > 0 {
            // One renewal for every frame read: the connection was heard.
            self.session.renew_all();
            if self.session.shared.limits.idle_timeout.is_some() {
                self.heard = Instant::now();
            }
            self.session.client.touch();
            Counts::add(&self.session.shared.counts.commands_processed, read);
        }
        left_for_room
    }

    /// An HTTP request came to the RESP port (a web page a browser was
    /// made to load can send one): nothing in it runs, nothing read
    /// before it in this batch either, and the connection closes, as
    /// Redis does.
    fn refuse_http(&mut self) {
        warn!(
            addr = %self.session.client.addr,
            client = self.session.id(),
            "an HTTP request on the RESP port (possible cross-protocol attack): closing"
        );
        self.queue = Queue::default();
        self.input = Input::Broken;
        self.connection.discard_input();
        self.state = State::Closing;
    }

    fn broken(&mut self, why: String) {
        self.queue.push(Queued::Fault(why));
        self.input = Input::Broken;
        self.connection.discard_input();
    }

    /// Writes the queued answers; false when the connection is done: the
    /// write failed, or `stop` came (an operator's CLIENT KILL or the
    /// server's shutdown) while a client that stopped reading held the
    /// write up. What the socket takes at once is written without
    /// waiting on anything else.
    async fn flush(&mut self, stop: Pin<&mut impl Future<Output = Stop>>) -> bool {
        match self.connection.write_now() {
            Err(_) => return false,
            Ok(()) if self.connection.pending_output() == 0 => return true,
            Ok(()) => {}
        }
        tokio::select! {
            biased;
            written = self.connection.flush() => written.is_ok(),
            _ = stop => false,
        }
    }

    /// Carries out queued commands while the connection is ready.
    async fn run_queued(&mut self) {
        while matches!(self.state, State::Ready) {
            if !self.output_within_limit() {
                return;
            }
            let Some(item) = self.queue.pop() else { break };
            // In a cluster, a lease that moved with its partition is told
            // so before anything else is answered: its client counts no
            // later answer of this connection for it.
            if self.session.shared.cluster.is_some() {
                while let Some(id) = self.session.losses.lost_now() {
                    self.push_loss(id);
                }
            }
            match item {
                Queued::Command(args) => match cmd::execute(&mut self.session, args) {
                    Step::Reply(reply) => self.answer(reply),
                    Step::Wait(hold) => self.first_poll(hold).await,
                    Step::Close(reply) => {
                        self.answer(reply);
                        self.state = State::Closing;
                    }
                },
                Queued::Fault(why) => {
                    debug!(reason = %why, "protocol error; closing the connection");
                    self.answer(Err(ErrorReply::err(format!("protocol error: {why}"))));
                    self.state = State::Closing;
                }
            }
            self.connection.set_max_frame(self.session.frame_limit());
        }
    }

    /// Whether the answers waiting for the client fit `--max-output` once
    /// what the socket takes is written; a client that stopped reading
    /// past it is closed at once (its keys let go), logged.
    fn output_within_limit(&mut self) -> bool {
        let max = self.session.shared.limits.max_output;
        if self.connection.pending_output() < max {
            return true;
        }
        if self.connection.write_now().is_ok() && self.connection.pending_output() < max {
            return true;
        }
        warn!(
            addr = %self.session.client.addr,
            client = self.session.id(),
            pending = self.connection.pending_output(),
            max,
            "the client does not read its answers: closing (--max-output)"
        );
        self.queue = Queue::default();
        self.input = Input::Broken;
        self.state = State::Gone;
        false
    }

    /// A free key is granted on the first poll: answer it now, with the
    /// replies around it in one write, rather than a turn of the loop
    /// later. Polled with this task's waker, so a HOLD that must wait is
    /// registered as the select would register it.
    async fn first_poll(&mut self, mut hold: PendingHold) {
        match poll_fn(|cx| Poll::Ready(hold.future.as_mut().poll(cx))).await {
            Poll::Ready(result) => {
                let reply = self.session.granted(result, hold);
                self.answer(reply);
            }
            Poll::Pending => {
                hold.file_wait();
                self.session.client.set_waiting(Some(hold.held_key.clone()));
                self.state = State::Waiting(hold);
            }
        }
    }

    /// Waits for the next event; shutdown first, then a HOLD's end and
    /// losses (they answer what was asked), then frames already read
    /// (`buffered`: left for want of room) while ready, then bytes.
    async fn next_event(
        &mut self,
        buffered: bool,
        stop: Pin<&mut impl Future<Output = Stop>>,
    ) -> Event {
        let can_read =
            self.input == Input::Broken || self.queue.has_room(self.connection.max_frame());
        let take_buffered = buffered && matches!(self.state, State::Ready);
        let deadline = self.timeout();
        tokio::select! {
            biased;
            why = stop => Event::Stop(why),
            () = until(deadline) => Event::TimedOut,
            result = hold_done(&mut self.state) => Event::HoldEnded(result),
            id = self.session.losses.next_lost() => Event::Lost(id),
            () = pushes_ready(self.session.outbox.as_deref()) => Event::Pushed,
            () = std::future::ready(()), if take_buffered => Event::Read(true),
            read = self.connection.read_more(), if can_read => {
                Event::Read(matches!(read, Ok(n) if n > 0))
            }
        }
    }

    /// When the connection times out if nothing comes: `--auth-timeout`
    /// after it opened while it has not authenticated; `--timeout` after
    /// the last command read while no HOLD waits.
    fn timeout(&self) -> Option<Instant> {
        let limits = &self.session.shared.limits;
        let auth = (!self.session.authenticated).then(|| self.opened + limits.auth_timeout);
        let idle = match self.state {
            State::Ready => limits.idle_timeout.map(|t| self.heard + t),
            _ => None,
        };
        auth.into_iter().chain(idle).min()
    }

    fn hold_ended(&mut self, result: Result<HeldLease, Error>) {
        if let State::Waiting(hold) = std::mem::replace(&mut self.state, State::Ready) {
            self.session.client.set_waiting(None);
            let reply = self.session.granted(result, hold);
            self.answer(reply);
        }
    }

    /// An observer's pushes go out after the answers queued before them.
    /// One that stopped reading is closed by the outbox (CLIENT KILL's
    /// switch), which a write held up by it also heeds.
    fn take_pushes(&mut self) {
        if let Some(outbox) = &self.session.outbox {
            let pushes = outbox.take();
            if !pushes.is_empty() {
                self.connection.queue_encoded(&pushes);
            }
        }
    }

    /// A lease of this connection was lost: logged (never the key's text
    /// above debug) and, on RESP3, pushed.
    fn push_loss(&mut self, id: u64) {
        let Some(held) = self.session.leases.get(&id) else {
            return;
        };
        let reason = held.lease.signal().reason();
        let (lock, key) = (held.record.lock(), held.record.key());
        let (client, addr) = (self.session.id(), self.session.client.addr);
        info!(lock, lease = id, client, %addr, ?reason, "lease lost");
        debug!(lock, lease = id, key, "lease lost: its key");
        self.session.record_end(id, Kind::of_loss(reason), None);
        if let Some(push) = self.session.loss_push(id) {
            Counts::add(&self.session.shared.counts.lost_pushes, 1);
            self.answer(Ok(push));
        }
    }

    /// The store is closed by now: a waiting HOLD has its `closed` answer
    /// and lost leases their pushes. Say so, then leave.
    async fn say_goodbye(mut self) {
        if let State::Waiting(mut hold) = std::mem::replace(&mut self.state, State::Closing) {
            self.session.client.set_waiting(None);
            if let Some(result) = futures_util::FutureExt::now_or_never(&mut hold.future) {
                let reply = self.session.granted(result, hold);
                self.answer(reply);
            }
        }
        while let Some(id) = self.session.losses.lost_now() {
            self.push_loss(id);
        }
        self.connection.close().await;
    }

    fn answer(&mut self, reply: Reply) {
        let value = match reply {
            Ok(value) => value,
            Err(refusal) => {
                if let Some(m) = &self.session.shared.metrics {
                    m.error(refusal.word);
                }
                refusal.into_value()
            }
        };
        self.connection.queue(&value, self.session.proto);
    }
}

/// Resolves when the server shuts down or an operator kills the client
/// (shutdown first). A connection pins one for its whole life, in a
/// [`Woken`]: its waits are registered once, and it is polled again only
/// when one of them fires, not for every request.
async fn stop_signal(shutdown: Shutdown, client: Arc<ClientState>) -> Stop {
    tokio::select! {
        biased;
        _ = shutdown.recv() => Stop::Shutdown,
        _ = client.killed() => Stop::Killed,
    }
}

/// Resolves at `deadline`; never without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => pending().await,
    }
}

/// Whether a command is an HTTP request's first line or header: `POST`,
/// `GET /path HTTP/1.1`, or `Host:`.
fn looks_like_http(args: &[Vec<u8>]) -> bool {
    let name = args[0].as_slice();
    name.eq_ignore_ascii_case(b"POST")
        || name.eq_ignore_ascii_case(b"HOST:")
        || (name.eq_ignore_ascii_case(b"GET")
            && args.len() == 3
            && args[1].starts_with(b"/")
            && args[2].starts_with(b"HTTP/"))
}

/// Resolves when `outbox` has pushes; never without one.
async fn pushes_ready(outbox: Option<&crate::observers::Outbox>) {
    match outbox {
        Some(outbox) => outbox.ready().await,
        None => pending().await,
    }
}

/// The waiting HOLD's result; never resolves when none waits.
async fn hold_done(state: &mut State) -> Result<HeldLease, Error> {
    match state {
        State::Waiting(hold) => (&mut hold.future).await,
        _ => pending().await,
    }
}

#[cfg(test)]
mod tests {
    use crate::session::{Facts, Session, Shared};
    use std::sync::Arc;

    /// Ten thousand idle connections keep ten thousand of these: a field
    /// or a future held across an await that bloats it shows here.
    #[tokio::test(flavor = "current_thread")]
    async fn a_connections_task_stays_small() {
        let facts = Facts {
            started: std::time::Instant::now(),
            port: 1,
            tls: false,
            max_clients: 1,
        };
        let users = crate::users::Directory::new(crate::users::Users::open(), None);
        let shared = Arc::new(Shared::new(holdline::Store::new(), users, 1 << 19, facts));
        let session = Session::new(shared, "127.0.0.1:1".parse().unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (done, _) = tokio::sync::mpsc::channel(1);
        let (_notify, watch) = tokio::sync::watch::channel(false);
        let shutdown = crate::shutdown::Shutdown::new(watch);
        let run = super::Handler::new(stream, session, done).run(shutdown);
        let size = std::mem::size_of_val(&run);
        assert!(size <= 3 * 1024, "a connection's future is {size} bytes");
    }
}
