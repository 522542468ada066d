//! Every grant and every end of a lease, as an event: the last
//! `--history N` kept in memory for `HISTORY`, and each appended to the
//! `--audit-log` file as a JSON line.
//!
//! The hold path only formats nothing and waits for nothing: recording
//! pushes an `Arc` into a bounded ring under a short mutex and offers it
//! to the audit writer's bounded queue. The writer is a thread of its own
//! (a slow or stuck file never slows a grant); when its queue is full the
//! event is dropped from the log (never from the ring) and counted, with a
//! warning on the first drop of a run of drops.

use crate::record::LeaseRecord;
use holdline::EndReason;
use serde::Serialize;
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tracing::{info, warn};

/// Events the audit writer may have queued before new ones are dropped.
const AUDIT_QUEUE: usize = 4096;

/// What happened to a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Granted,
    Released,
    Expired,
    Revoked,
    Disconnected,
    Closed,
}

impl Kind {
    pub fn word(self) -> &'static str {
        match self {
            Kind::Granted => "granted",
            Kind::Released => "released",
            Kind::Expired => "expired",
            Kind::Revoked => "revoked",
            Kind::Disconnected => "disconnected",
            Kind::Closed => "closed",
        }
    }

    /// The end a lost lease's signal tells.
    pub fn of_loss(reason: Option<EndReason>) -> Kind {
        match reason {
            Some(EndReason::Revoked) => Kind::Revoked,
            Some(EndReason::Expired) => Kind::Expired,
            Some(EndReason::StoreClosed) => Kind::Closed,
            Some(EndReason::Released) | None => Kind::Released,
        }
    }
}

/// One event.
#[derive(Clone, Debug, Serialize)]
pub struct Event {
    /// UTC, milliseconds since the Unix epoch.
    pub time_ms: u64,
    pub event: Kind,
    /// The lease: lock, key, fence, permits, lease, holder.
    #[serde(flatten)]
    pub of: Arc<LeaseRecord>,
    /// Its note when the event happened.
    pub note: Arc<str>,
    /// How long the lease was held, for an end; absent for a grant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_ms: Option<u64>,
    /// Why, where the event alone does not say (`killed`: CLIENT KILL).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
}

/// Now, in UTC milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The ring of recent events and the audit log's queue.
pub struct History {
    capacity: usize,
    ring: Mutex<VecDeque<Arc<Event>>>,
    audit: Option<Audit>,
}

/// The audit writer's end of things the server keeps.
struct Audit {
    queue: SyncSender<Arc<Event>>,
    /// Events the log never got (its queue was full).
    dropped: Arc<AtomicU64>,
    /// Set by SIGHUP; the writer reopens the file before its next line.
    reopen: Arc<AtomicBool>,
    /// Whether the last offer was dropped (warn once per run of drops).
    dropping: AtomicBool,
}

impl History {
    /// Keeps the last `capacity` events (0: none) and, with `audit_log`,
    /// appends each to that file from a thread of its own.
    pub fn new(capacity: usize, audit_log: Option<PathBuf>) -> History {
        History {
            capacity,
            ring: Mutex::new(VecDeque::with_capacity(capacity.min(1024))),
            audit: audit_log.map(Audit::start),
        }
    }

    /// Whether events are kept or logged at all (else nobody makes them).
    pub fn is_on(&self) -> bool {
        self.capacity > 0 || self.audit.is_some()
    }

    /// Records `event`: into the ring, and offered to the audit log.
    pub fn record(&self, event: Event) {
        if !self.is_on() {
            return;
        }
        let event = Arc::new(event);
        if self.capacity > 0 {
            let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
            if ring.len() == self.capacity {
                ring.pop_front();
            }
            ring.push_back(event.clone());
        }
        if let Some(audit) = &self.audit {
            audit.offer(event);
        }
    }

    /// Up to `count` events, newest first, of `lock` (and `key`) when
    /// given, and only of locks `visible` admits.
    pub fn recent(
        &self,
        lock: Option<&str>,
        key: Option<&str>,
        count: usize,
        visible: impl Fn(&str) -> bool,
    ) -> Vec<Arc<Event>> {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        ring.iter()
            .rev()
            .filter(|e| lock.is_none_or(|l| e.of.lock() == l))
            .filter(|e| key.is_none_or(|k| e.of.key() == k))
            .filter(|e| visible(e.of.lock()))
            .take(count)
            .cloned()
            .collect()
    }

    /// Events the audit log dropped so far (its queue was full).
    pub fn audit_dropped(&self) -> u64 {
        self.audit
            .as_ref()
            .map_or(0, |a| a.dropped.load(Ordering::Relaxed))
    }

    /// SIGHUP: the audit log is reopened before its next line (logrotate
    /// moved the file away).
    pub fn reopen_audit_log(&self) {
        if let Some(audit) = &self.audit {
            // Relaxed: a request; the writer acts on it at its next line.
            audit.reopen.store(true, Ordering::Relaxed);
        }
    }
}

impl Audit {
    fn start(path: PathBuf) -> Audit {
        let (queue, lines) = sync_channel(AUDIT_QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let reopen = Arc::new(AtomicBool::new(false));
        let flag = reopen.clone();
        std::thread::Builder::new()
            .name("holdline-audit".into())
            .spawn(move || write_lines(&path, &lines, &flag))
            .expect("a thread for the audit log");
        Audit {
            queue,
            dropped,
            reopen,
            dropping: AtomicBool::new(false),
        }
    }

    fn offer(&self, event: Arc<Event>) {
        match self.queue.try_send(event) {
            Ok(()) => {
                // Relaxed: a flag for the log line only.
                self.dropping.store(false, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                // Relaxed: a tally.
                let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if !self.dropping.swap(true, Ordering::Relaxed) {
                    warn!(
                        dropped = n,
                        "audit log: its writer is behind; events are dropped from it"
                    );
                }
            }
        }
    }
}

/// How often the audit writer looks for events: it sleeps between looks
/// rather than waiting on the queue, so a grant never pays a wake-up of
/// the writer (on two cores that cost the server a quarter of its rate).
const AUDIT_TICK: Duration = Duration::from_millis(10);

/// The audit writer: opens the file (which may block, as a FIFO does
/// until someone reads it), then every tick appends the events queued
/// meanwhile as JSON lines in one write, reopening the file when asked.
fn write_lines(path: &PathBuf, lines: &Receiver<Arc<Event>>, reopen: &AtomicBool) {
    let mut file = open(path);
    let mut batch = Vec::new();
    loop {
        std::thread::sleep(AUDIT_TICK);
        batch.clear();
        let over = loop {
            match lines.try_recv() {
                Ok(event) => {
                    serde_json::to_writer(&mut batch, &*event).expect("an event is JSON");
                    batch.push(b'\n');
                }
                Err(TryRecvError::Empty) => break false,
                Err(TryRecvError::Disconnected) => break true,
            }
        };
        // Relaxed: see `reopen_audit_log`.
        if reopen.swap(false, Ordering::Relaxed) {
            file = open(path);
            info!(path = %path.display(), "SIGHUP: audit log reopened");
        }
        if !batch.is_empty() {
            write_batch(path, &mut file, &batch);
        }
        if over {
            return;
        }
    }
}

/// Appends `batch` to the log (opened again if it was not open).
fn write_batch(path: &PathBuf, file: &mut Option<File>, batch: &[u8]) {
    if file.is_none() {
        *file = open(path);
    }
    let Some(f) = file.as_mut() else { return };
    if let Err(why) = f.write_all(batch) {
        warn!(%why, path = %path.display(), "audit log: lines were not written");
        *file = None;
    }
}

fn open(path: &PathBuf) -> Option<File> {
    match OpenOptions::new().create(true).append(true).open(path) {
        Ok(f) => Some(f),
        Err(why) => {
            warn!(%why, path = %path.display(), "audit log: cannot open");
            None
        }
    }
}
