//! One client connection: reading, decoding, carrying out commands in
//! order, writing answers and pushes.
//!
//! Reading never stops while a HOLD waits: every frame read renews the
//! connection's leases at once and is queued, to be carried out after the
//! HOLD ends (commands run one at a time, answered in order, as in Redis).
//! A malformed frame is answered `-ERR protocol error: ...` in its turn and
//! the connection closed. Closing drops the session, which lets every key
//! go, and the waiting HOLD's future, which leaves its line.

use crate::command::{self, NotACommand};
use crate::session::{Outcome, PendingHold, Session, Shared};
use bytes::BytesMut;
use futures_util::FutureExt;
use holdline::{Error, HeldLease};
use holdline_resp::{encode, Decoder, Value};
use std::collections::VecDeque;
use std::future::{pending, poll_fn};
use std::sync::Arc;
use std::task::Poll;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tracing::debug;

/// Room made for a read when the buffer is nearly full. Small: ten
/// thousand idle connections each keep one.
const READ_CHUNK: usize = 4 * 1024;
/// An input buffer grown past this (a large frame) is given back once empty.
const KEPT_INPUT_CAPACITY: usize = 64 * 1024;
/// Commands read ahead of a waiting HOLD before reading pauses.
const MAX_QUEUED_COMMANDS: usize = 1024;
/// Their bytes, at least (a larger `--max-frame` raises it to two frames).
const MAX_QUEUED_BYTES: usize = 4 << 20;
/// An answer buffer grown past this is given back after it was written.
const KEPT_OUTPUT_CAPACITY: usize = 64 * 1024;

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

/// Serves one client until it leaves, breaks the protocol, or the server
/// shuts down.
pub async fn serve(
    mut stream: TcpStream,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    // Answers are small and latency is the product: no Nagle delay.
    let _ = stream.set_nodelay(true);
    let (mut reader, mut writer) = stream.split();
    let mut session = Session::new(shared);
    let mut decoder = Decoder::new(session.frame_limit()).inline(true);
    let mut input = BytesMut::new();
    let mut output = Vec::with_capacity(1024);
    let mut queue = Queue::default();
    let mut waiting: Option<PendingHold> = None;
    let mut reading = true;
    let mut closing = false;

    loop {
        // After a fault the stream means nothing: bytes are read only to
        // notice the client leaving (which takes a waiting HOLD out of
        // its line), and dropped.
        if !reading {
            input.clear();
        }
        // Decode what is buffered, as far as the queue has room. Before
        // authentication, one frame at a time: the frame limit grows once
        // AUTH has run, and a pipelined AUTH must not be judged by the
        // stranger's limit for what follows it.
        while reading
            && !input.is_empty()
            && queue.has_room(decoder.max_frame())
            && (session.is_authenticated() || queue.items.is_empty())
        {
            match decoder.decode(&mut input) {
                Ok(Some(frame)) => {
                    session.renew_all();
                    match command::arguments(frame) {
                        Ok(args) if args.is_empty() => {}
                        Ok(args) => queue.push(Queued::Command(args)),
                        Err(NotACommand(why)) => {
                            queue.push(Queued::Fault(why.to_owned()));
                            reading = false;
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    queue.push(Queued::Fault(e.to_string()));
                    reading = false;
                }
            }
        }
        if input.is_empty() && input.capacity() > KEPT_INPUT_CAPACITY {
            input = BytesMut::new();
        }
        // Carry out queued commands until one must wait.
        while waiting.is_none() && !closing {
            let Some(item) = queue.pop() else { break };
            match item {
                Queued::Command(args) => match session.execute(args) {
                    Outcome::Reply(v) => encode(&v, session.proto(), &mut output),
                    Outcome::Wait(mut hold) => {
                        // A free key is granted on the first poll: answer
                        // it here, with the replies around it in one
                        // write, rather than a turn of the loop later.
                        // Polled with this task's waker, so a HOLD that
                        // must wait is registered as the select would.
                        let first = poll_fn(|cx| Poll::Ready(hold.future.as_mut().poll(cx))).await;
                        match first {
                            Poll::Ready(result) => {
                                let v = session.granted(result, hold);
                                encode(&v, session.proto(), &mut output);
                            }
                            Poll::Pending => waiting = Some(hold),
                        }
                    }
                    Outcome::Close(v) => {
                        encode(&v, session.proto(), &mut output);
                        closing = true;
                    }
                },
                Queued::Fault(why) => {
                    debug!(reason = %why, "protocol error; closing the connection");
                    let v = Value::Error(format!("ERR protocol error: {why}"));
                    encode(&v, session.proto(), &mut output);
                    closing = true;
                }
            }
            decoder.set_max_frame(session.frame_limit());
        }
        if !output.is_empty() {
            if writer.write_all(&output).await.is_err() {
                return;
            }
            output.clear();
            output.shrink_to(KEPT_OUTPUT_CAPACITY);
        }
        if closing {
            let _ = writer.shutdown().await;
            return;
        }
        let can_read = !reading || queue.has_room(decoder.max_frame());
        if can_read && input.capacity() - input.len() < READ_CHUNK / 2 {
            input.reserve(READ_CHUNK);
        }
        tokio::select! {
            biased;
            result = hold_done(&mut waiting) => {
                let hold = waiting.take().expect("a hold was waiting");
                let v = session.granted(result, hold);
                encode(&v, session.proto(), &mut output);
            }
            lost = session.losses.next_lost() => {
                if let Some(push) = session.loss_push(lost) {
                    encode(&push, session.proto(), &mut output);
                }
            }
            read = reader.read_buf(&mut input), if can_read => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = shutdown.changed() => {
                // The store is closed by now: a waiting HOLD has its
                // `closed` answer and lost leases their pushes. Say so,
                // then leave.
                if let Some(mut hold) = waiting.take() {
                    if let Some(result) = (&mut hold.future).now_or_never() {
                        let v = session.granted(result, hold);
                        encode(&v, session.proto(), &mut output);
                    }
                }
                while let Some(lost) = session.losses.lost_now() {
                    if let Some(push) = session.loss_push(lost) {
                        encode(&push, session.proto(), &mut output);
                    }
                }
                let _ = writer.write_all(&output).await;
                let _ = writer.shutdown().await;
                return;
            }
        }
    }
}

/// The waiting HOLD's result; never resolves when none waits.
async fn hold_done(waiting: &mut Option<PendingHold>) -> Result<HeldLease, Error> {
    match waiting {
        Some(hold) => (&mut hold.future).await,
        None => pending().await,
    }
}
