//! The listener: accepting connections within `--max-connections` (a
//! semaphore's permits), one task per connection, and the shutdown on
//! SIGINT or SIGTERM: store closed, every connection told, and the
//! listener waits until each has finished (each holds a sender of a
//! channel whose receiver sees the end once the last one is dropped).
//!
//! Connections are served on [`Cores`]: a current-thread runtime per CPU,
//! each on a thread of its own, a connection given to them in turn when
//! it is accepted and served there until it ends. A request is read,
//! carried out and answered by the thread whose `epoll_wait` saw it, as
//! in Redis: no worker wakes another, none steals work, no futex is paid
//! per request (a multi-thread runtime paid about one futex call and one
//! more context switch per pair at a light load). The accept loop, the
//! signals, the metrics and the cluster's agent stay on the main runtime.

use crate::handler::Handler;
use crate::reply;
use crate::session::{Counts, Session, Shared};
use crate::shutdown::Shutdown;
use crate::tls::{Tls, HANDSHAKE_TIMEOUT};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tracing::{debug, info, warn};

/// How long connections get to write their last answers at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// The accept loop's state.
struct Listener {
    listener: TcpListener,
    shared: Arc<Shared>,
    /// One permit per connection allowed.
    limit: Arc<Semaphore>,
    /// Sends `true` once, at shutdown.
    notify_shutdown: watch::Sender<bool>,
    /// Cloned into every connection; the receiver sees the end once all
    /// connections (and this) dropped theirs.
    done_tx: mpsc::Sender<()>,
    /// The port speaks TLS when set.
    tls: Option<Arc<Tls>>,
    /// Where connections are served.
    cores: Cores,
}

/// The runtimes connections are served on: current-thread runtimes, one
/// per CPU unless `--cores` says how many, each driven by a thread that
/// lives as long as the process.
struct Cores {
    handles: Vec<tokio::runtime::Handle>,
    /// The next one to be given a connection (round robin).
    next: AtomicUsize,
}

impl Cores {
    fn start(n: usize) -> io::Result<Cores> {
        let mut handles = Vec::with_capacity(n);
        for i in 0..n {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            handles.push(runtime.handle().clone());
            std::thread::Builder::new()
                .name(format!("holdline-core-{i}"))
                .spawn(move || runtime.block_on(std::future::pending::<()>()))?;
        }
        Ok(Cores {
            handles,
            next: AtomicUsize::new(0),
        })
    }

    /// Serves `stream` with `serve` on the next core: the socket leaves
    /// this runtime's reactor and joins that core's.
    fn serve<F>(&self, stream: TcpStream, serve: impl FnOnce(TcpStream) -> F + Send + 'static)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => return warn!(error = %e, "cannot hand a connection over"),
        };
        // Relaxed: only spreads connections; any order will do.
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        self.handles[i].spawn(async move {
            match TcpStream::from_std(stream) {
                Ok(stream) => serve(stream).await,
                Err(e) => warn!(error = %e, "cannot register a connection"),
            }
        });
    }
}

/// The signals the server answers.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

/// How often a drain looks whether anything is still held.
const DRAIN_POLL: Duration = Duration::from_millis(50);

/// Serves until SIGINT or SIGTERM (SIGHUP reloads TLS; a single server's
/// first SIGTERM drains first, for at most `drain_timeout`); then closes
/// the store (waiters `closed`, holders lost), tells every connection,
/// and returns once they have finished (or the grace ran out).
pub async fn run(
    listener: TcpListener,
    shared: Arc<Shared>,
    max_connections: usize,
    cores: usize,
    tls: Option<Arc<Tls>>,
    drain_timeout: Duration,
) -> io::Result<()> {
    let mut signals = Signals {
        interrupt: signal(SignalKind::interrupt())?,
        terminate: signal(SignalKind::terminate())?,
        hangup: signal(SignalKind::hangup())?,
    };
    let (notify_shutdown, _) = watch::channel(false);
    let (done_tx, mut done_rx) = mpsc::channel(1);
    tokio::spawn(give_back_memory(shared.clone()));
    let mut server = Listener {
        listener,
        shared,
        limit: Arc::new(Semaphore::new(max_connections)),
        notify_shutdown,
        done_tx,
        tls,
        cores: Cores::start(cores)?,
    };
    server
        .serve_until_stopped(&mut signals, drain_timeout)
        .await;
    info!("shutting down: closing the store");
    let Listener {
        listener,
        shared,
        notify_shutdown,
        done_tx,
        ..
    } = server;
    drop(listener);
    if let Some(m) = &shared.metrics {
        m.shutting_down();
    }
    shared.store.close();
    if let Some(node) = &shared.cluster {
        // Its partitions stop now; the agent hands them over in etcd.
        node.leave();
    }
    let _ = notify_shutdown.send(true);
    drop(done_tx);
    // `None` once every connection's sender is gone.
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, done_rx.recv()).await;
    Ok(())
}

/// Resolves once no key is held or waited for, or at `ends`: whether
/// anything is still held.
async fn drained(shared: &Shared, ends: tokio::time::Instant) -> bool {
    let gone = async {
        while shared.holds_or_waits() {
            tokio::time::sleep(DRAIN_POLL).await;
        }
    };
    tokio::time::timeout_at(ends, gone).await.is_err()
}

/// TCP keepalive: the first probe after this much silence...
const KEEPALIVE_IDLE: Duration = Duration::from_secs(60);
/// ...and the next ones this far apart.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(15);

/// SIGHUP: the TLS certificate and key, and the users file, read again
/// (a bad file keeps what was there and says why).
fn reload(server: &Listener) {
    match &server.tls {
        Some(tls) => tls.reload(),
        None => info!("SIGHUP: no TLS to reload"),
    }
    match server.shared.users.reload() {
        Some(Ok((users, gone))) => {
            info!(users, "SIGHUP: users reloaded");
            close_connections_of(&server.shared, &gone);
        }
        Some(Err(why)) => warn!(%why, "SIGHUP: users not reloaded; the old ones stay"),
        None => {}
    }
    server.shared.history.reopen_audit_log();
}

/// Closes the connections of users a reload removed or gave another
/// token: what they authenticated with no longer admits them.
fn close_connections_of(shared: &Shared, gone: &[String]) {
    if gone.is_empty() {
        return;
    }
    let mut closed = 0;
    for client in shared.clients.all() {
        if client
            .user()
            .is_some_and(|u| gone.iter().any(|g| **g == *u))
        {
            client.kill();
            closed += 1;
        }
    }
    info!(users = ?gone, closed, "SIGHUP: closed the connections of users removed or given another token");
}

impl Listener {
    /// Serves until SIGINT, or SIGTERM. A single server's first SIGTERM
    /// drains: HOLD and TRYHOLD are refused, and serving goes on until
    /// no key is held or waited for, `drain_timeout` passed, or another
    /// SIGTERM or SIGINT comes. A cluster's node leaves at once (its
    /// partitions are handed over).
    async fn serve_until_stopped(&mut self, signals: &mut Signals, drain_timeout: Duration) {
        let shared = self.shared.clone();
        let mut drain_ends: Option<tokio::time::Instant> = None;
        loop {
            let ends = drain_ends.unwrap_or_else(tokio::time::Instant::now);
            // Accepting is cancel-safe: a SIGHUP's turn loses no connection.
            tokio::select! {
                _ = self.accept_loop() => break,
                _ = signals.interrupt.recv() => break,
                _ = signals.terminate.recv() => {
                    if drain_ends.is_some() || shared.cluster.is_some() {
                        break;
                    }
                    let timeout = drain_timeout;
                    info!(?timeout, "SIGTERM: draining: no new holds; holders may finish");
                    shared.drain();
                    drain_ends = Some(tokio::time::Instant::now() + drain_timeout);
                }
                _ = signals.hangup.recv() => reload(self),
                held = drained(&shared, ends), if drain_ends.is_some() => {
                    match held {
                        false => info!("drained: nothing held"),
                        true => info!("drain timeout: ending the leases left"),
                    }
                    break;
                }
            }
        }
    }

    /// Accepts until the task is dropped.
    async fn accept_loop(&mut self) {
        loop {
            match self.listener.accept().await {
                Ok((stream, peer)) => self.admit(stream, peer),
                Err(e) => {
                    // Out of descriptors, most likely: pause rather than spin.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// Serves the connection on a task of its own, or refuses it when
    /// every permit is taken (Redis's answer, then the close).
    fn admit(&self, stream: TcpStream, peer: SocketAddr) {
        let Ok(permit) = self.limit.clone().try_acquire_owned() else {
            warn_limit(peer);
            Counts::add(&self.shared.counts.connections_rejected, 1);
            tokio::spawn(async move {
                let mut stream = stream;
                let _ = stream
                    .write_all(b"-ERR max number of clients reached\r\n")
                    .await;
            });
            return;
        };
        // Answers are small and latency is the product: no Nagle delay.
        let _ = stream.set_nodelay(true);
        // A peer gone without a word (a host off, a NAT entry dropped) is
        // found out and its connection closed, its keys let go.
        let keepalive = socket2::TcpKeepalive::new()
            .with_time(KEEPALIVE_IDLE)
            .with_interval(KEEPALIVE_INTERVAL);
        let _ = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive);
        let session = Session::new(self.shared.clone(), peer);
        let shutdown = Shutdown::new(self.notify_shutdown.subscribe());
        let done = self.done_tx.clone();
        debug!(%peer, "connected");
        // One task shape per stream type: a plain connection's task is not
        // sized for a TLS stream and its handshake.
        match self.tls.clone() {
            None => self.cores.serve(stream, move |stream| {
                serve_plain(stream, peer, session, shutdown, done, permit)
            }),
            Some(tls) => self.cores.serve(stream, move |stream| async move {
                serve_tls(&tls, stream, peer, session, shutdown, done).await;
                drop(permit);
                debug!(%peer, "disconnected");
            }),
        }
    }
}

/// A plain connection's task: its life, then its permit back.
async fn serve_plain(
    stream: TcpStream,
    peer: SocketAddr,
    session: Session,
    shutdown: Shutdown,
    done: mpsc::Sender<()>,
    permit: OwnedSemaphorePermit,
) {
    Handler::new(stream, session, done).run(shutdown).await;
    drop(permit);
    debug!(%peer, "disconnected");
}

/// The handshake (within its timeout), the user its certificate names
/// (`--tls-user-from-cn`), then the connection's life.
async fn serve_tls(
    tls: &Tls,
    stream: TcpStream,
    peer: SocketAddr,
    mut session: Session,
    shutdown: Shutdown,
    done: mpsc::Sender<()>,
) {
    let handshake = tls.acceptor().accept(stream);
    let mut stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return tls.handshake_failed(peer, &e.to_string()),
        Err(_) => return tls.handshake_failed(peer, "no handshake within 10s"),
    };
    if tls.user_from_cn() {
        let cn = crate::tls::peer_common_name(&stream);
        let user = cn
            .as_deref()
            .and_then(|cn| session.shared.users.now().named(cn));
        match user {
            Some(user) => session.authenticated_as(user),
            None => {
                let refusal = reply::no_cn_user(cn.as_deref());
                warn!(%peer, %refusal, "client certificate refused");
                let _ = stream.write_all(format!("-{refusal}\r\n").as_bytes()).await;
                let _ = stream.shutdown().await;
                return;
            }
        }
    }
    Handler::new(stream, session, done).run(shutdown).await;
}

/// The connection limit was reached: said at info level, at most once a
/// second (a flood of refused clients must not flood the log).
fn warn_limit(peer: SocketAddr) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{SystemTime, UNIX_EPOCH};
    static LAST_SECOND: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Relaxed: a rate limit for a log line; a duplicate line is harmless.
    if LAST_SECOND.swap(now, Ordering::Relaxed) != now {
        info!(%peer, "connection limit reached: refusing connections");
    }
}

/// How often the memory of departed connections is looked at.
const TRIM_EVERY: Duration = Duration::from_secs(5);

/// Gives the memory of connections that left back to the system. glibc's
/// allocator keeps freed memory for reuse, so a burst of ten thousand
/// connections would leave the process tens of MiB larger for good: once
/// the connections open fall below half of their peak since the last
/// trim, the heap is trimmed (off the runtime's workers: it walks every
/// arena).
async fn give_back_memory(shared: Arc<Shared>) {
    let mut ticks = tokio::time::interval(TRIM_EVERY);
    let mut peak = 0;
    loop {
        ticks.tick().await;
        peak = peak.max(shared.clients.take_peak());
        let now = shared.clients.count();
        if peak >= 64 && now <= peak / 2 {
            peak = now;
            let _ = tokio::task::spawn_blocking(trim_heap).await;
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_heap() {
    // SAFETY: malloc_trim takes no pointers and is thread-safe in glibc
    // (it locks each arena in turn); it only returns free pages.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heap() {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::Facts;

    /// A connection handed to the cores is read on one of their threads,
    /// its socket registered with that core's reactor.
    #[test]
    fn a_connection_is_served_on_a_core() {
        use tokio::io::AsyncReadExt;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let cores = Cores::start(2).unwrap();
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut client = TcpStream::connect(listener.local_addr().unwrap())
                .await
                .unwrap();
            let (stream, _) = listener.accept().await.unwrap();
            let (tx, rx) = tokio::sync::oneshot::channel();
            cores.serve(stream, move |mut stream| async move {
                let mut got = [0u8; 4];
                stream.read_exact(&mut got).await.unwrap();
                let thread = std::thread::current().name().map(str::to_owned);
                let _ = tx.send((got, thread));
            });
            client.write_all(b"ping").await.unwrap();
            let (got, thread) = rx.await.unwrap();
            assert_eq!(&got, b"ping");
            assert!(thread.unwrap().starts_with("holdline-core-"));
        });
    }

    /// Ten thousand idle connections keep ten thousand of these tasks: a
    /// plain connection's must not be sized for a TLS stream and its
    /// handshake (it was 6.6 KiB when both shared one task body).
    #[tokio::test(flavor = "current_thread")]
    async fn a_plain_connections_task_stays_small() {
        let facts = Facts {
            started: std::time::Instant::now(),
            port: 1,
            tls: false,
            max_clients: 1,
        };
        let users = crate::users::Directory::new(crate::users::Users::open(), None);
        let shared = Arc::new(Shared::new(holdline::Store::new(), users, 1 << 19, facts));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = listener.local_addr().unwrap();
        let stream = TcpStream::connect(peer).await.unwrap();
        let session = Session::new(shared, peer);
        let (done, _) = mpsc::channel(1);
        let (_notify, watch) = watch::channel(false);
        let permit = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
        let task = serve_plain(stream, peer, session, Shutdown::new(watch), done, permit);
        let size = std::mem::size_of_val(&task);
        assert!(
            size <= 3 * 1024,
            "a plain connection's task is {size} bytes"
        );
    }
}
