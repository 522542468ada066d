//! `holdline serve`: one store behind a RESP socket.
//!
//! Start-up: parse and check the flags, start logging (`--log-level` or
//! `HOLDLINE_LOG`, e.g. `debug`; never key text or tokens above debug; a
//! bad directive exits 2 naming it), load TLS, raise the descriptor limit,
//! bind, print `holdline: listening on ADDR` on stdout, serve until SIGINT
//! or SIGTERM, exit 0.

//! Module map, bottom-up (each module uses only those above it; checked by
//! `tests/module_graph.rs`): `woken` (a future polled only once woken),
//! `users` (who may connect, their rights), `settings` (flags, variables
//! and the file, and where each value came from),
//! `config` (flags), `tls` (certificates),
//! `reply` (error replies in the core's shape), `parse` (the argument
//! cursor and the options' reader), `record` (one record per lease, and
//! the typed held key), `loss_watch` (which leases were lost), `clients`
//! (what operators see of each connection), `events` (grants and ends:
//! `--history`, `--audit-log`), `observers` (who observes which key, and
//! their pushes), `metrics` (Prometheus), `cluster` (partitions, etcd),
//! `session` (one connection's state), `cmd` (the command table with
//! each command's options, and each command: parse, effect), `connection`
//! (the framed stream), `shutdown` (the signal), `handler` (one
//! connection's life), `server` (the listener), `page` (the metrics
//! listener's page and its JSON, read from `session`'s `Shared`).

mod clients;
mod cluster;
mod cmd;
mod config;
mod connection;
mod events;
mod handler;
mod loss_watch;
mod metrics;
mod observers;
mod page;
mod parse;
mod record;
mod reply;
mod server;
mod session;
mod settings;
mod shutdown;
mod tls;
mod users;
mod woken;

use config::{Config, LogFormat};
use holdline::Store;
use session::{Facts, Shared};
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use tracing::{info, warn};

/// Descriptors kept for the listener, logs and the like, beyond connections.
const SPARE_DESCRIPTORS: u64 = 64;

fn main() -> ExitCode {
    let args = match config::parse(std::env::args_os().collect()) {
        Ok(args) => args,
        Err(settings::Refusal::Clap(e)) => e.exit(),
        Err(settings::Refusal::Refused(why)) => {
            eprintln!("holdline: {why}");
            return ExitCode::from(2);
        }
    };
    let checked = args.check();
    if args.print_config && checked.is_ok() {
        let _ = write!(std::io::stdout(), "{}", args.sources.print());
        return ExitCode::SUCCESS;
    }
    let started = checked.and_then(|config| {
        let level = args
            .log_level
            .as_deref()
            .map(|l| (l, args.label("log-level")));
        init_logging(level, args.log_format)?;
        let tls = config.tls.clone().map(tls::Tls::load).transpose()?;
        Ok((config, tls.map(Arc::new)))
    });
    let (config, tls) = match started {
        Ok(v) => v,
        Err(why) => {
            eprintln!("holdline: {why}");
            return ExitCode::from(2);
        }
    };
    let descriptors = raise_descriptor_limit();
    let wanted = config.max_connections as u64 + SPARE_DESCRIPTORS;
    if descriptors.is_some_and(|n| n < wanted) {
        warn!(
            limit = descriptors,
            wanted, "the descriptor limit is below --max-connections; accepts may fail first"
        );
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("holdline: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(serve(config, tls));
    // Connections still writing to clients that do not read are not
    // waited for past the grace the server gave them.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("holdline: {why}");
            ExitCode::FAILURE
        }
    }
}

/// Binds, says where (the first line on stdout: scripts and tests read
/// the port from it; the metrics' address follows), and serves until a
/// signal ends it.
async fn serve(mut config: Config, tls: Option<Arc<tls::Tls>>) -> Result<(), String> {
    let listener =
        listen(config.listen).map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    // Never println!: a closed stdout (the starter read the line and went)
    // must not take the server down.
    let _ = writeln!(std::io::stdout(), "holdline: listening on {local}");
    let _ = std::io::stdout().flush();
    info!(
        %local,
        tls = tls.is_some(),
        client_certificates = config.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
        auth = config.users.required(),
        max_connections = config.max_connections,
        cores = config.cores,
        max_frame = config.max_frame,
        "serving"
    );
    let metrics_listener = match config.metrics {
        Some(addr) => Some(listen_metrics(addr).await?),
        None => None,
    };
    let facts = Facts {
        started: std::time::Instant::now(),
        port: local.port(),
        tls: tls.is_some(),
        max_clients: config.max_connections,
    };
    let agent = match &mut config.cluster {
        Some(settings) => {
            settings.advertise = advertised(&settings.advertise, local.port());
            Some(join_cluster(settings).await?)
        }
        None => None,
    };
    let node = agent.as_ref().map(cluster::agent::Agent::node);
    let shared = Arc::new_cyclic(|weak: &std::sync::Weak<Shared>| {
        let users = users::Directory::new(config.users, config.users_file);
        let mut shared = Shared::new(Store::new(), users, config.max_frame, facts);
        shared.limits = config.limits;
        if let Some(node) = &node {
            shared.observers = node.observers.clone();
        }
        shared.cluster = node;
        shared.history = events::History::new(config.history, config.audit_log);
        if metrics_listener.is_some() {
            let weak = weak.clone();
            let source = move || weak.upgrade().map(|s| s.snapshot());
            shared.metrics = Some(Arc::new(metrics::Metrics::new(&cmd::names(), source)));
        }
        shared
    });
    if let Some(listener) = metrics_listener {
        serve_metrics(listener, &shared);
    }
    let (leave, left) = tokio::sync::watch::channel(false);
    let agent = agent.map(|a| tokio::spawn(a.run(left)));
    let (connections, cores) = (config.max_connections, config.cores);
    let served = server::run(
        listener,
        shared,
        connections,
        cores,
        tls,
        config.drain_timeout,
    )
    .await;
    if let Some(agent) = agent {
        // Give the partitions up in etcd, so other nodes take them at once.
        let _ = leave.send(true);
        let _ = tokio::time::timeout(LEAVE_GRACE, agent).await;
    }
    served.map_err(|e| e.to_string())
}

/// Binds `--metrics` and says where (stdout's second line).
async fn listen_metrics(addr: std::net::SocketAddr) -> Result<tokio::net::TcpListener, String> {
    let bound = metrics::listen(addr).await;
    let listener = bound.map_err(|e| format!("--metrics {addr}: {e}"))?;
    let at = listener.local_addr().map_err(|e| e.to_string())?;
    let _ = writeln!(
        std::io::stdout(),
        "holdline: metrics on http://{at}/metrics"
    );
    let _ = std::io::stdout().flush();
    Ok(listener)
}

/// Serves `/metrics` and the page on `listener`: off loopback, only to a
/// request bearing an admin's token (`/healthz` to anyone).
fn serve_metrics(listener: tokio::net::TcpListener, shared: &Arc<Shared>) {
    let Some(m) = &shared.metrics else { return };
    let loopback = listener.local_addr().is_ok_and(|a| a.ip().is_loopback());
    let weak = Arc::downgrade(shared);
    let admits: metrics::Admits = Arc::new(move |token: &[u8]| {
        weak.upgrade()
            .is_some_and(|s| s.users.now().admin_token(token))
    });
    let access = metrics::Access {
        loopback,
        auth_configured: shared.wants_token(),
        admits,
    };
    // Weak: the listener outlives nothing it should keep alive.
    let (weak, weak_ready) = (Arc::downgrade(shared), Arc::downgrade(shared));
    let page = metrics::Page {
        html: page::HTML,
        state: Arc::new(move || weak.upgrade().map(|s| page::state_json(&s))),
        ready: Arc::new(move || match weak_ready.upgrade() {
            Some(shared) => shared.readiness(),
            None => Err("shutting down".to_owned()),
        }),
    };
    tokio::spawn(metrics::serve(listener, m.clone(), access, page));
}

/// `--advertise HOST:0` names the port the listener got.
fn advertised(advertise: &str, listening: u16) -> String {
    match advertise.strip_suffix(":0") {
        Some(host) => format!("{host}:{listening}"),
        None => advertise.to_owned(),
    }
}

/// How long leaving the cluster may take at shutdown.
const LEAVE_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// Joins the cluster: etcd must answer before the node serves anything;
/// it is asked again every second for a minute, unless it refused the
/// node for good (its user, password or certificates).
async fn join_cluster(settings: &config::ClusterSettings) -> Result<cluster::agent::Agent, String> {
    let mut tries = 0;
    loop {
        match cluster::agent::join(settings).await {
            Ok(agent) => {
                let node = agent.node();
                info!(
                    cluster = settings.cluster,
                    node = node.id,
                    partitions = node.partitions,
                    advertise = settings.advertise,
                    "cluster mode"
                );
                return Ok(agent);
            }
            Err(why) if why.is_refusal() => {
                return Err(format!("etcd refused this node: {why}"));
            }
            Err(why) if tries < 60 => {
                warn!(%why, "cannot reach etcd yet");
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            Err(why) => return Err(format!("cannot join the cluster: {why}")),
        }
    }
}

/// Room for connections the kernel completed before they were accepted: a
/// burst of thousands of clients (each waiter is a connection) would
/// otherwise overflow tokio's default of 1024 and stall in SYN retries.
const LISTEN_BACKLOG: u32 = 4096;

fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // A restarted server can listen again while old connections linger.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Logs to stderr, filtered by `level` (its directive, and how an error
/// names where it came from), else `info`.
fn init_logging(level: Option<(&str, String)>, format: LogFormat) -> Result<(), String> {
    let (directive, source) = level.unwrap_or(("info", "the default".to_owned()));
    let filter = log_filter(directive).map_err(|why| format!("{source} {directive:?}: {why}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => builder.json().init(),
    }
    Ok(())
}

/// A tracing filter, refusing what would silently log nothing: tracing
/// reads a bare word (`bogus`) as a target name, which matches no event.
fn log_filter(directive: &str) -> Result<tracing_subscriber::EnvFilter, String> {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    for part in directive
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let bare = !part.contains(['=', ':', '[']);
        if bare && !LEVELS.contains(&part.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "{part:?} is neither a level ({}) nor a `target=level` directive",
                LEVELS.join(", ")
            ));
        }
    }
    tracing_subscriber::EnvFilter::try_new(directive).map_err(|e| e.to_string())
}

/// Raises the soft limit on open descriptors to the hard one: each
/// connection is one, and the default soft limit (often 1024) is far below
/// `--max-connections`. Answers the soft limit in force.
fn raise_descriptor_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            return limit.maximum;
        }
    }
    limit.current
}
