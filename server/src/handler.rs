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
//! | any     | the client leaves                       | (ends)  |
//! | any     | the server shuts down                   | (ends, after answering what it can) |
//!
//! The input is `Open`, or `Broken` after a malformed frame: from then on
//! bytes are read only to notice the client leaving (which takes a waiting
//! HOLD out of its line) and dropped; the fault is answered in its turn.
//! Ending drops the session, which lets every key go, and a waiting HOLD's
//! future, which leaves its line.

use crate::cmd::{self, NotACommand};
use crate::connection::Connection;
use crate::session::{slot_parts, Counts, PendingHold, Session, Step};
use crate::shutdown::Shutdown;
use holdline::{Error, HeldLease};
use holdline_resp::Value;
use std::collections::VecDeque;
use std::future::{pending, poll_fn};
use std::task::Poll;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tracing::{debug, info};

/// Commands read ahead of a waiting HOLD before reading pauses.
const MAX_QUEUED_COMMANDS: usize = 1024;
/// Their bytes, at least (a larger `--max-frame` raises it to two frames).
const MAX_QUEUED_BYTES: usize = 4 << 20;

enum State {
    Ready,
    Waiting(PendingHold),
    Closing,
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

/// What woke the connection.
enum Event {
    Shutdown,
    /// An operator's CLIENT KILL.
    Killed,
    HoldEnded(Result<HeldLease, Error>),
    Lost(u64),
    /// Bytes read; `false` when the client left.
    Read(bool),
}

/// A client's connection and everything it has.
pub struct Handler<S> {
    connection: Connection<S>,
    session: Session,
    queue: Queue,
    state: State,
    input: Input,
    shutdown: Shutdown,
    /// Dropped when the handler ends: the listener waits for every one.
    _done: mpsc::Sender<()>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Handler<S> {
    pub fn new(stream: S, session: Session, shutdown: Shutdown, done: mpsc::Sender<()>) -> Self {
        let connection = Connection::new(stream, session.frame_limit());
        Handler {
            connection,
            session,
            queue: Queue::default(),
            state: State::Ready,
            input: Input::Open,
            shutdown,
            _done: done,
        }
    }

    /// Serves the client until the connection ends.
    pub async fn run(mut self) {
        loop {
            self.decode_input();
            self.run_queued().await;
            if self.connection.flush().await.is_err() {
                return;
            }
            if matches!(self.state, State::Closing) {
                self.connection.close().await;
                return;
            }
            match self.next_event().await {
                Event::Shutdown => return self.say_goodbye().await,
                Event::Killed => return self.connection.close().await,
                Event::HoldEnded(result) => self.hold_ended(result),
                Event::Lost(id) => self.push_loss(id),
                Event::Read(true) => {}
                Event::Read(false) => return,
            }
        }
    }

    /// Decodes what is buffered into the queue, as far as it has room.
    /// Before authentication, one frame at a time: the frame limit grows
    /// once AUTH has run, and a pipelined AUTH must not be judged by the
    /// stranger's limit for what follows it.
    fn decode_input(&mut self) {
        if self.input == Input::Broken {
            self.connection.discard_input();
            return;
        }
        let mut read = 0;
        while self.connection.has_input()
            && self.queue.has_room(self.connection.max_frame())
            && (self.session.authenticated || self.queue.items.is_empty())
        {
            match self.connection.decode() {
                Ok(Some(frame)) => {
                    read += 1;
                    self.session.renew_all();
                    match cmd::arguments(frame) {
                        Ok(args) if args.is_empty() => {}
                        Ok(args) => self.queue.push(Queued::Command(args)),
                        Err(NotACommand(why)) => return self.broken(why.to_owned()),
                    }
                }
                Ok(None) => break,
                Err(e) => return self.broken(e.to_string()),
            }
        }
        if read > 0 {
            self.session.client.touch();
            Counts::add(&self.session.shared.counts.commands_processed, read);
        }
    }

    fn broken(&mut self, why: String) {
        self.queue.push(Queued::Fault(why));
        self.input = Input::Broken;
        self.connection.discard_input();
    }

    /// Carries out queued commands while the connection is ready.
    async fn run_queued(&mut self) {
        while matches!(self.state, State::Ready) {
            let Some(item) = self.queue.pop() else { break };
            match item {
                Queued::Command(args) => match cmd::execute(&mut self.session, args) {
                    Step::Reply(v) => self.answer(&v),
                    Step::Wait(hold) => self.first_poll(hold).await,
                    Step::Close(v) => {
                        self.answer(&v);
                        self.state = State::Closing;
                    }
                },
                Queued::Fault(why) => {
                    debug!(reason = %why, "protocol error; closing the connection");
                    self.answer(&Value::Error(format!("ERR protocol error: {why}")));
                    self.state = State::Closing;
                }
            }
            self.connection.set_max_frame(self.session.frame_limit());
        }
    }

    /// A free key is granted on the first poll: answer it now, with the
    /// replies around it in one write, rather than a turn of the loop
    /// later. Polled with this task's waker, so a HOLD that must wait is
    /// registered as the select would register it.
    async fn first_poll(&mut self, mut hold: PendingHold) {
        match poll_fn(|cx| Poll::Ready(hold.future.as_mut().poll(cx))).await {
            Poll::Ready(result) => {
                let v = self.session.granted(result, hold);
                self.answer(&v);
            }
            Poll::Pending => {
                self.session.client.set_waiting(Some(hold.slot.clone()));
                self.state = State::Waiting(hold);
            }
        }
    }

    /// Waits for the next event; shutdown first, then a HOLD's end and
    /// losses (they answer what was asked), then bytes.
    async fn next_event(&mut self) -> Event {
        let can_read =
            self.input == Input::Broken || self.queue.has_room(self.connection.max_frame());
        let client = self.session.client.clone();
        tokio::select! {
            biased;
            _ = self.shutdown.recv() => Event::Shutdown,
            _ = client.killed() => Event::Killed,
            result = hold_done(&mut self.state) => Event::HoldEnded(result),
            id = self.session.losses.next_lost() => Event::Lost(id),
            read = self.connection.read_more(), if can_read => {
                Event::Read(matches!(read, Ok(n) if n > 0))
            }
        }
    }

    fn hold_ended(&mut self, result: Result<HeldLease, Error>) {
        if let State::Waiting(hold) = std::mem::replace(&mut self.state, State::Ready) {
            self.session.client.set_waiting(None);
            let v = self.session.granted(result, hold);
            self.answer(&v);
        }
    }

    /// A lease of this connection was lost: logged (never the key's text
    /// above debug) and, on RESP3, pushed.
    fn push_loss(&mut self, id: u64) {
        let Some(held) = self.session.leases.get(&id) else {
            return;
        };
        let reason = held.lease.signal().reason();
        let (lock, key) = slot_parts(&held.slot);
        let (client, addr) = (self.session.id(), self.session.client.addr);
        info!(lock, lease = id, client, %addr, ?reason, "lease lost");
        debug!(lock, lease = id, key, "lease lost: its key");
        if let Some(push) = self.session.loss_push(id) {
            Counts::add(&self.session.shared.counts.lost_pushes, 1);
            self.answer(&push);
        }
    }

    /// The store is closed by now: a waiting HOLD has its `closed` answer
    /// and lost leases their pushes. Say so, then leave.
    async fn say_goodbye(mut self) {
        if let State::Waiting(mut hold) = std::mem::replace(&mut self.state, State::Closing) {
            self.session.client.set_waiting(None);
            if let Some(result) = futures_util::FutureExt::now_or_never(&mut hold.future) {
                let v = self.session.granted(result, hold);
                self.answer(&v);
            }
        }
        while let Some(id) = self.session.losses.lost_now() {
            self.push_loss(id);
        }
        self.connection.close().await;
    }

    fn answer(&mut self, value: &Value) {
        if let (Value::Error(text), Some(m)) = (value, &self.session.shared.metrics) {
            m.error(text.split(' ').next().unwrap_or_default());
        }
        self.connection.queue(value, self.session.proto);
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
        let shared = Arc::new(Shared::new(holdline::Store::new(), None, 1 << 19, facts));
        let session = Session::new(shared, "127.0.0.1:1".parse().unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (done, _) = tokio::sync::mpsc::channel(1);
        let (_notify, watch) = tokio::sync::watch::channel(false);
        let shutdown = crate::shutdown::Shutdown::new(watch);
        let run = super::Handler::new(stream, session, shutdown, done).run();
        let size = std::mem::size_of_val(&run);
        assert!(size <= 3 * 1024, "a connection's future is {size} bytes");
    }
}
